//===- ModelState.cpp -----------------------------------------------------===//
#include "runtime/ModelState.h"

#include <algorithm>
#include <map>
#include <set>
#include <sstream>

namespace cpc {

namespace {

/// The buffers one optimizer step reads per parameter it updates.
struct ParameterUpdate {
  int param, grad, expAvg;
};

/// cpc.adamw updates one parameter (param, grad, exp_avg, ...); cpc.multi_tensor_adamw N of
/// them (lr, step, grad_scale, then N params, N grads, N exp_avg, N exp_avg_sq).
std::vector<ParameterUpdate> updatesOf(const StepDesc &s) {
  std::vector<ParameterUpdate> updates;
  if (s.op == OpKind::AdamW && s.inputs.size() >= 3)
    updates.push_back({s.inputs[0], s.inputs[1], s.inputs[2]});
  if (s.op == OpKind::MultiTensorAdamW && s.inputs.size() >= 3 && (s.inputs.size() - 3) % 4 == 0) {
    size_t n = (s.inputs.size() - 3) / 4;
    for (size_t i = 0; i < n; ++i)
      updates.push_back({s.inputs[3 + i], s.inputs[3 + n + i], s.inputs[3 + 2 * n + i]});
  }
  return updates;
}
/// ZeRO's model-state bytes per rank: `kept[stage]` bytes of each shardable element on every
/// rank, the rest of its 16 split over the ranks, and 16 for each element ZeRO keeps whole.
int64_t zeroBytes(const ModelStateBytes &m, const int64_t (&kept)[4]) {
  int64_t psi = m.shardableElements, whole = 16 * (m.trainableElements - m.shardableElements);
  int64_t k = kept[std::clamp(m.zeroStage, 0, 3)];
  return m.zeroStage <= 0 ? 16 * m.trainableElements : whole + k * psi + (16 - k) * psi / m.ranks;
}
} // namespace

int64_t ModelStateBytes::formula() const {
  static constexpr int64_t kept[4] = {16, 8, 4, 0}; // fp32: 16Ψ; 8Ψ+8Ψ/N; 4Ψ+12Ψ/N; 16Ψ/N
  return zeroBytes(*this, kept);
}

int64_t ModelStateBytes::mixedPrecisionFormula() const {
  static constexpr int64_t kept[4] = {16, 4, 2, 0}; // 2Ψ+2Ψ+12Ψ; 4Ψ+12Ψ/N; 2Ψ+14Ψ/N; 16Ψ/N
  return zeroBytes(*this, kept);
}

nlohmann::json ModelStateBytes::toJson() const {
  return {{"zero", zeroStage},          {"ranks", ranks},
          {"trainable_elements", trainableElements}, {"shardable_elements", shardableElements},
          {"parameters", parameters},   {"frozen_parameters", frozenParameters},
          {"gradients", gradients},     {"optimizer_states", optimizerStates},
          {"accumulators", accumulators}, {"total", total()},
          {"formula", formula()}, {"precision", precision}, {"low_precision_copies", lowPrecisionCopies},
          {"mixed_precision_formula", precision == "fp32" ? 0 : mixedPrecisionFormula()}};
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
  if (precision != "fp32")
    os << "; " << precision << ": the parameters are f32 master weights, cast to 16-bit copies of "
       << lowPrecisionCopies << " B once per step; DeepSpeed's mixed-precision ZeRO-" << zeroStage << " formula "
       << mixedPrecisionFormula() << " B";
  return os.str();
}

namespace {

/// How many blocks the data-parallel (batch) axes split a stored variable into (1 when they do
/// not: ZeRO-3 stores parameters split over them).
int64_t dpBlocks(const Plan &plan, const std::vector<std::string> &batchAxes, const BufferDesc &b) {
  std::vector<std::string> axes;
  for (const std::vector<std::string> &dim : b.shardDims)
    for (const std::string &axis : dim)
      if (std::find(batchAxes.begin(), batchAxes.end(), axis) != batchAxes.end())
        axes.push_back(axis);
  return axes.empty() ? 1 : meshShardIndex(0, plan.meshShape, plan.meshAxes, axes).second;
}

} // namespace

ModelStateBytes modelStateBytes(const Plan &plan, int rank) {
  ModelStateBytes m;
  m.zeroStage = plan.training.value("zero", 0);
  m.ranks = plan.training.value("data_parallel", 1);
  const std::vector<std::string> batchAxes = plan.zeroAxes();
  // Only what this rank's programs use (a pipeline stage holds its own parameters).
  std::vector<bool> used = plan.buffersOfRank(rank);
  for (size_t i = 0; i < plan.buffers.size(); ++i) {
    const BufferDesc &b = plan.buffers[i];
    if (b.aliasOf >= 0 || !used[i])
      continue;
    if (b.kind == BufferKind::Parameter) {
      (b.trainable ? m.parameters : m.frozenParameters) += b.bytes();
      if (b.trainable) {
        // Psi is what this rank's dp group trains: a parameter stored split over dp (ZeRO-3)
        // counts its dp blocks, but only this rank's tensor-parallel block (the other tp blocks
        // belong to the other tp ranks).
        m.trainableElements += numElements(b.shape) * dpBlocks(plan, batchAxes, b);
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
    if (!plan.runsOn(p, rank))
      continue;
    std::map<int, const StepDesc *> producer; // root buffer -> the step writing it
    for (const StepDesc &s : p.steps) {
      for (int out : s.outputs)
        producer[plan.rootOf(out)] = &s;
      for (const ParameterUpdate &u : updatesOf(s)) {
        if (!updated.insert(plan.rootOf(u.param)).second)
          continue;
        // ZeRO split this update when it split the moments over dp (a parameter without a dim
        // that divides keeps a whole optimizer: 16 bytes per element).
        const BufferDesc &moment = plan.buffers[plan.rootOf(u.expAvg)];
        if (int64_t blocks = dpBlocks(plan, batchAxes, moment); blocks > 1)
          m.shardableElements += numElements(moment.shape) * blocks;
        int grad = u.grad;
        auto it = producer.find(plan.rootOf(grad));
        if (it != producer.end() && it->second->op == OpKind::ShardSlice)
          grad = it->second->inputs[0];
        m.gradients += plan.buffers[grad].bytes();
      }
    }
  }
  if (m.zeroStage == 0)
    m.shardableElements = m.trainableElements;
  if (plan.training.contains("recipe"))
    m.precision = plan.training["recipe"].value("precision", "fp32");
  // The 16-bit copies: casts of trainable parameters to a 16-bit float, once per rank.
  std::set<int> cast;
  for (const RankProgram &p : plan.programs)
    if (plan.runsOn(p, rank))
      for (const StepDesc &s : p.steps) {
        if (s.op != OpKind::Cast || s.inputs.size() != 1 || s.outputs.size() != 1)
          continue;
        const BufferDesc &in = plan.buffers[plan.rootOf(s.inputs[0])], &out = plan.buffers[s.outputs[0]];
        if (in.kind == BufferKind::Parameter && in.trainable && (out.dtype == DType::F16 || out.dtype == DType::BF16) &&
            cast.insert(plan.rootOf(s.inputs[0])).second)
          m.lowPrecisionCopies += out.bytes();
      }
  return m;
}

} // namespace cpc
