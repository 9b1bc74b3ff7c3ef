//===- ModelState.cpp -----------------------------------------------------===//
#include "runtime/ModelState.h"
#include "kernels/Float16.h"

#include <algorithm>
#include <map>
#include <set>
#include <sstream>

namespace cpc {

namespace {

/// The buffers one optimizer step reads per parameter it updates.
struct ParameterUpdate {
  int param, grad, expAvg, expAvgSq;
};

/// cpc.adamw updates one parameter (param, grad, exp_avg, ...); cpc.multi_tensor_adamw N of
/// them (lr, step, grad_scale, then N params, N grads, N exp_avg, N exp_avg_sq).
std::vector<ParameterUpdate> updatesOf(const StepDesc &s) {
  std::vector<ParameterUpdate> updates;
  if (s.op == OpKind::AdamW && s.inputs.size() >= 4)
    updates.push_back({s.inputs[0], s.inputs[1], s.inputs[2], s.inputs[3]});
  if (s.op == OpKind::MultiTensorAdamW && s.inputs.size() >= 3 && (s.inputs.size() - 3) % 4 == 0) {
    size_t n = (s.inputs.size() - 3) / 4;
    for (size_t i = 0; i < n; ++i)
      updates.push_back({s.inputs[3 + i], s.inputs[3 + n + i], s.inputs[3 + 2 * n + i], s.inputs[3 + 3 * n + i]});
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

int64_t ModelStateBytes::sixteenBitFormula() const {
  ModelStateBytes share = *this;
  share.trainableElements = sixteenBitElements;
  share.shardableElements = sixteenBitShardable;
  return share.mixedPrecisionFormula();
}

nlohmann::json ModelStateBytes::toJson() const {
  return {{"zero", zeroStage},          {"ranks", ranks},
          {"trainable_elements", trainableElements}, {"shardable_elements", shardableElements},
          {"parameters", parameters},   {"frozen_parameters", frozenParameters},
          {"gradients", gradients},     {"optimizer_states", optimizerStates},
          {"accumulators", accumulators}, {"total", total()},
          {"formula", formula()}, {"precision", precision}, {"low_precision_copies", lowPrecisionCopies},
          {"mixed_precision_formula", precision == "fp32" ? 0 : mixedPrecisionFormula()},
          {"mixed_precision_total", precision == "fp32" ? 0 : mixedPrecisionTotal()},
          {"sixteen_bit_elements", sixteenBitElements}, {"sixteen_bit_shardable", sixteenBitShardable},
          {"sixteen_bit_bytes", sixteenBitBytes},
          {"sixteen_bit_formula", precision == "fp32" ? 0 : sixteenBitFormula()}};
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
       << lowPrecisionCopies << " B once per step, the gradients kept in the type backward makes them; with the "
       << "copies " << mixedPrecisionTotal() << " B against DeepSpeed's mixed-precision ZeRO-" << zeroStage
       << " formula " << mixedPrecisionFormula() << " B; the " << sixteenBitElements
       << " elements read only through their copy hold " << sixteenBitBytes << " B, DeepSpeed's formula over them "
       << sixteenBitFormula() << " B";
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

/// The gradient buffer a rank holds for an update reading `grad`: back through the slice
/// ZeRO-1 takes of the whole (all-reduced) gradient right before the update, through scales by a
/// scalar (fp16's unscale) and through a widening cast (mixed precision keeps the 16-bit gradient
/// and widens and unscales it for the update, as DeepSpeed counts it: the f32 values are the
/// update's working memory).
int heldGradient(const Plan &plan, const std::map<int, const StepDesc *> &producer, int grad) {
  for (int hops = 0; hops < 4; ++hops) {
    auto it = producer.find(grad);
    if (it == producer.end() || it->second->inputs.empty())
      break;
    const StepDesc &s = *it->second;
    const BufferDesc &in = plan.buffers[s.inputs[0]], &out = plan.buffers[grad];
    bool widening = s.op == OpKind::Cast && dtypeSize(in.dtype) < dtypeSize(out.dtype);
    bool scaled = s.op == OpKind::Mul && s.inputs.size() == 2 && numElements(plan.buffers[s.inputs[1]].shape) == 1 &&
                  in.shape == out.shape;
    if (s.op != OpKind::ShardSlice && !widening && !scaled)
      break;
    grad = s.inputs[0];
  }
  return grad;
}

/// What a rank holds for one parameter's update besides the master: its gradient (heldGradient)
/// and moments, by root buffer.
struct UpdateState {
  int grad, expAvg, expAvgSq;
};

/// The 16-bit copies of the updated parameters (lowPrecisionCopies), and the mixed-precision
/// share DeepSpeed's formula describes: the parameters that no op reads but their cast to 16
/// bits and their update. What a rank holds for each: the f32
/// master (its block from ZeRO-1 on), the 16-bit copy (gathered whole below ZeRO-3), the
/// gradient and the two moments. One pass over the steps, memory by parameter only (cpc-run
/// counts this while its memory probe runs).
void addSixteenBitShare(const Plan &plan, int rank, const std::vector<std::string> &batchAxes,
                        const std::map<int, UpdateState> &updates, ModelStateBytes &m) {
  struct Reads {
    int64_t copy = 0;   // bytes of its 16-bit cast
    bool other = false; // read by an op that is neither that cast nor an update
  };
  std::map<int, Reads> reads;
  std::set<int> updated; // the updates' results
  for (const RankProgram &p : plan.programs) {
    if (!plan.runsOn(p, rank))
      continue;
    for (const StepDesc &s : p.steps) {
      // The update, and what picks between its result and the parameter (fp16's skip on overflow).
      bool updating = !updatesOf(s).empty();
      bool update = updating ||
                    std::any_of(s.inputs.begin(), s.inputs.end(), [&](int in) { return updated.count(plan.rootOf(in)); });
      if (updating)
        for (int out : s.outputs)
          if (!updates.count(plan.rootOf(out))) // (an update in place writes the parameter itself)
            updated.insert(plan.rootOf(out));
      bool narrowing = s.op == OpKind::Cast && s.outputs.size() == 1 && is16BitFloat(plan.buffers[s.outputs[0]].dtype);
      for (int in : s.inputs) {
        int root = plan.rootOf(in);
        if (!updates.count(root) || update)
          continue;
        Reads &r = reads[root];
        if (narrowing)
          r.copy = std::max<int64_t>(r.copy, plan.buffers[s.outputs[0]].bytes());
        else
          r.other = true;
      }
    }
  }
  for (const auto &[param, u] : updates) {
    auto it = reads.find(param);
    if (it == reads.end() || !it->second.copy)
      continue;
    const BufferDesc &master = plan.buffers[param], &moment = plan.buffers[u.expAvg];
    int64_t blocks = dpBlocks(plan, batchAxes, master);
    // ZeRO-1/2 gather the copy of a split master once and keep it for the step; ZeRO-3 gathers
    // it before each op that reads it (what stays is the block's copy).
    m.lowPrecisionCopies += it->second.copy * (m.zeroStage < 3 ? blocks : 1);
    if (it->second.other)
      continue;
    m.sixteenBitElements += numElements(master.shape) * blocks;
    if (int64_t split = dpBlocks(plan, batchAxes, moment); split > 1) // ZeRO split its update
      m.sixteenBitShardable += numElements(moment.shape) * split;
    m.sixteenBitBytes += master.bytes() + it->second.copy * (m.zeroStage < 3 ? blocks : 1) +
                         plan.buffers[u.grad].bytes() + moment.bytes() + plan.buffers[u.expAvgSq].bytes();
  }
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
  std::map<int, UpdateState> updated; // by the parameter's root buffer
  for (const RankProgram &p : plan.programs) {
    if (!plan.runsOn(p, rank))
      continue;
    std::map<int, const StepDesc *> producer; // buffer -> the step writing it
    for (const StepDesc &s : p.steps) {
      for (int out : s.outputs)
        producer[out] = &s; // by buffer, not root: an in-place step writes its input's root again
      for (const ParameterUpdate &u : updatesOf(s)) {
        // The parameter itself, also where ZeRO updates a slice of a whole master.
        auto slice = producer.find(u.param);
        int param = plan.rootOf(slice != producer.end() && slice->second->op == OpKind::ShardSlice
                                    ? slice->second->inputs[0] : u.param);
        if (updated.count(param))
          continue;
        // ZeRO split this update when it split the moments over dp (a parameter without a dim
        // that divides keeps a whole optimizer: 16 bytes per element).
        const BufferDesc &moment = plan.buffers[plan.rootOf(u.expAvg)];
        if (int64_t blocks = dpBlocks(plan, batchAxes, moment); blocks > 1)
          m.shardableElements += numElements(moment.shape) * blocks;
        int grad = heldGradient(plan, producer, u.grad);
        updated[param] = {grad, plan.rootOf(u.expAvg), plan.rootOf(u.expAvgSq)};
        m.gradients += plan.buffers[grad].bytes();
      }
    }
  }
  if (m.zeroStage == 0)
    m.shardableElements = m.trainableElements;
  addSixteenBitShare(plan, rank, batchAxes, updated, m);
  if (plan.training.contains("recipe"))
    m.precision = plan.training["recipe"].value("precision", "fp32");
  return m;
}

} // namespace cpc
