//===- ModelState.cpp -----------------------------------------------------===//
#include "runtime/ModelState.h"

#include <map>
#include <set>
#include <sstream>

namespace cpc {

int64_t ModelStateBytes::formula() const {
  int64_t psi = shardableElements, n = ranks, whole = 16 * (trainableElements - shardableElements);
  switch (zeroStage) {
  case 1: return whole + 8 * psi + 8 * psi / n;
  case 2: return whole + 4 * psi + 12 * psi / n;
  case 3: return whole + 16 * psi / n;
  default: return 16 * trainableElements;
  }
}

nlohmann::json ModelStateBytes::toJson() const {
  return {{"zero", zeroStage},          {"ranks", ranks},
          {"trainable_elements", trainableElements}, {"shardable_elements", shardableElements},
          {"parameters", parameters},   {"frozen_parameters", frozenParameters},
          {"gradients", gradients},     {"optimizer_states", optimizerStates},
          {"accumulators", accumulators}, {"total", total()},
          {"formula", formula()}};
}

std::string ModelStateBytes::summary() const {
  std::ostringstream os;
  os << "model states per rank: parameters " << parameters << " B + gradients " << gradients
     << " B + optimizer states " << optimizerStates << " B = " << total() << " B; ZeRO-" << zeroStage
     << " formula over Psi = " << trainableElements << " on " << ranks << " rank" << (ranks > 1 ? "s" : "") << ": "
     << formula() << " B";
  if (shardableElements != trainableElements && zeroStage > 0)
    os << " (" << trainableElements - shardableElements << " elements kept whole)";
  if (accumulators)
    os << "; accumulators " << accumulators << " B";
  return os.str();
}

ModelStateBytes modelStateBytes(const Plan &plan, int rank) {
  ModelStateBytes m;
  m.zeroStage = plan.training.value("zero", 0);
  m.ranks = plan.training.value("data_parallel", 1);
  for (const BufferDesc &b : plan.buffers) {
    if (b.aliasOf >= 0)
      continue;
    if (b.kind == BufferKind::Parameter) {
      (b.trainable ? m.parameters : m.frozenParameters) += b.bytes();
      if (b.trainable) {
        // Psi is what this rank's dp group trains: the whole of a ZeRO-3 block's parameter (ZeRO
        // shards it over dp), but only the block of a tensor-parallel one (the other blocks belong
        // to the other tp ranks). Below ZeRO-3 only tensor parallelism stores blocks.
        int64_t n = b.sharded() && m.zeroStage == 3 ? numElements(b.globalShape) : numElements(b.shape);
        m.trainableElements += n;
        if (m.zeroStage == 0 || n % m.ranks == 0)
          m.shardableElements += n;
      }
    } else if (b.kind == BufferKind::State) {
      if (b.role == VariableRole::ExpAvg || b.role == VariableRole::ExpAvgSq)
        m.optimizerStates += b.bytes();
      else if (b.role == VariableRole::GradAccumulator)
        m.accumulators += b.bytes();
    }
  }
  // Gradients: what each parameter's update reads (a whole gradient, or this rank's block).
  // ZeRO-1 slices the whole (all-reduced) gradient right before the update: that whole value
  // is what the rank holds.
  std::set<int> updated;
  for (const RankProgram &p : plan.programs) {
    if (!Plan::runsOn(p, rank))
      continue;
    std::map<int, const StepDesc *> producer; // root buffer -> the step writing it
    for (const StepDesc &s : p.steps) {
      for (int out : s.outputs)
        producer[plan.rootOf(out)] = &s;
      if (s.op != "cpc.adamw" || s.inputs.size() < 2 || !updated.insert(plan.rootOf(s.inputs[0])).second)
        continue;
      int grad = s.inputs[1];
      auto it = producer.find(plan.rootOf(grad));
      if (it != producer.end() && it->second->op == "cpc.shard_slice")
        grad = it->second->inputs[0];
      m.gradients += plan.buffers[grad].bytes();
    }
  }
  return m;
}

} // namespace cpc
