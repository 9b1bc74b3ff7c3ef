//===- Recompute.cpp - forward activations computed again in the backward ===//
//
// After partitioning, each training function holds a microbatch's forward, its backward and
// (train_step) the update. The forward ops carry the recompute segment cpc-recompute-segments
// gave them before autodiff; here the values of a segment that the backward reads and that are
// not kept are computed a second time, right before the backward first needs them, so that the
// forward's originals die as soon as the forward has read them and the arena reuses their
// memory (the planner works from liveness in program order). See Passes.td for what is kept.
//
#include "dialects/cpc/Cost.h"
#include "dialects/cpc/Roles.h"
#include "passes/Passes.h"

#include "mlir/IR/IRMapping.h"
#include "llvm/ADT/DenseSet.h"

#include <map>

namespace cpc {
#define GEN_PASS_DEF_CPCRECOMPUTE
#include "passes/Passes.h.inc"
} // namespace cpc

using namespace mlir;
using namespace cpc;

namespace {

/// The ops of a training function by role.
struct Roles {
  llvm::DenseMap<Operation *, int64_t> segmentOf; // forward ops with their segment
  std::map<int64_t, SmallVector<Operation *>> segmentOps; // in program order
  llvm::DenseSet<Operation *> backward;
  SmallVector<Operation *> backwardOps; // in program order
  int64_t lastSegment = -1;
};

Roles classify(Block &body) {
  Roles roles;
  llvm::DenseSet<Value> backwardValues;
  // The backward begins at the first op marked backward that reads a value; from there on every
  // op that reads a value is backward, marked or not (reshards partitioning made for backward
  // readers, ops a rewrite rebuilt without the mark). Ops that read nothing (constants, variable
  // reads) are never backward: a constant hoisted into the backward must not make its forward
  // readers backward.
  bool inBackward = false;
  for (Operation &op : body.without_terminator()) {
    bool reads = op.getNumOperands() > 0;
    inBackward |= reads && op.hasAttr(kBackwardAttrName);
    if (reads && (inBackward || llvm::any_of(op.getOperands(), [&](Value v) { return backwardValues.contains(v); }))) {
      roles.backward.insert(&op);
      roles.backwardOps.push_back(&op);
      backwardValues.insert(op.result_begin(), op.result_end());
      continue;
    }
    // A forward op runs in its own segment, and no earlier than the segments it reads.
    std::optional<int64_t> segment = getRecomputeSegment(&op);
    for (Value v : op.getOperands())
      if (Operation *def = v.getDefiningOp(); def && roles.segmentOf.count(def))
        segment = std::max(segment.value_or(0), roles.segmentOf[def]);
    if (!segment)
      continue; // parameters, constants, what is computed from them alone: not recomputed
    roles.segmentOf[&op] = *segment;
    roles.segmentOps[*segment].push_back(&op);
    roles.lastSegment = std::max(roles.lastSegment, *segment);
  }
  return roles;
}

class Recomputer {
public:
  Recomputer(Roles &roles, RecomputeMode mode) : roles_(roles), mode_(mode) {
    for (auto [op, segment] : roles_.segmentOf) // decided before any copy adds readers
      for (Value r : op->getResults())
        kept_[r] = decideKept(r, segment);
  }

  /// Whether value `v` of a forward op stays from the forward.
  bool kept(Value v) const { return kept_.lookup(v); }

private:
  bool decideKept(Value v, int64_t segment) {
    Operation *op = v.getDefiningOp();
    if (!isReplayable(op))
      return true;
    if (mode_ == RecomputeMode::Selective && (!isMemoryEffectFree(op) || costClass(op) != CostClass::Memory))
      return true; // a GEMM, attention or collective: kept; selective runs only the cheap again
    for (Operation *user : v.getUsers()) {
      auto it = roles_.segmentOf.find(user);
      if (it != roles_.segmentOf.end() ? it->second != segment : !roles_.backward.contains(user))
        return true; // a checkpoint: a later segment's forward (or something else) reads it
    }
    return false;
  }

public:
  /// Copies the ops of `segment` that compute `wanted` (and what they need of the segment)
  /// before `at`, marked backward; redirects the original backward ops' reads to the copies.
  /// Returns the number of ops copied and adds their FLOPs to `flops`.
  int64_t recompute(int64_t segment, const llvm::DenseSet<Value> &wanted, Operation *at, int64_t &flops) {
    llvm::DenseSet<Operation *> needed;
    // Collectives of parameters alone that the copies read (ZeRO-3's all-gathers, one per use):
    // gathered again, so that the forward's gathered copy dies with the forward.
    SmallVector<Operation *> regathered;
    SmallVector<Value> work(wanted.begin(), wanted.end());
    while (!work.empty()) {
      Operation *def = work.pop_back_val().getDefiningOp();
      if (!needed.insert(def).second)
        continue;
      for (Value operand : def->getOperands()) {
        Operation *d = operand.getDefiningOp();
        if (!d)
          continue;
        auto it = roles_.segmentOf.find(d);
        if (it != roles_.segmentOf.end()) {
          if (it->second == segment && !kept(operand))
            work.push_back(operand);
        } else if (!roles_.backward.contains(d) && d->hasTrait<cpc::OpTrait::GroupCollective>() &&
                   !llvm::is_contained(regathered, d)) {
          regathered.push_back(d);
        }
      }
    }
    llvm::sort(regathered, [](Operation *a, Operation *b) { return a->isBeforeInBlock(b); });
    // What the copies read and do not copy must be there before `at` (it is for a forward and a
    // backward in program order; anything else is left as it was).
    auto readsLater = [&](Operation *op) {
      return llvm::any_of(op->getOperands(), [&](Value operand) {
        Operation *def = operand.getDefiningOp();
        return def && !needed.contains(def) && !llvm::is_contained(regathered, def) && !def->isBeforeInBlock(at);
      });
    };
    if (llvm::any_of(regathered, readsLater) || llvm::any_of(needed, readsLater))
      return 0;
    OpBuilder b(at);
    IRMapping copies;
    int64_t count = 0;
    Attribute stage = at->getAttr(kStageAttrName); // an unlabelled copy goes with the backward it serves
    auto copy = [&](Operation *op) {
      Operation *clone = b.clone(*op, copies);
      clone->setAttr(kBackwardAttrName, b.getUnitAttr());
      if (stage && !clone->hasAttr(kStageAttrName))
        clone->setAttr(kStageAttrName, stage);
      flops += estimateFlops(op);
      ++count;
    };
    for (Operation *op : regathered)
      copy(op);
    for (Operation *op : roles_.segmentOps[segment])
      if (needed.contains(op))
        copy(op);
    for (Operation *user : roles_.backwardOps)
      for (OpOperand &use : user->getOpOperands())
        if (Operation *def = use.get().getDefiningOp(); def && needed.contains(def) && !kept(use.get()))
          use.set(copies.lookup(use.get()));
    return count;
  }

private:
  Roles &roles_;
  RecomputeMode mode_;
  llvm::DenseMap<Value, bool> kept_;
};

struct CpcRecomputePass : cpc::impl::CpcRecomputeBase<CpcRecomputePass> {
  using CpcRecomputeBase::CpcRecomputeBase;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    int64_t ops = 0, flops = 0;
    for (auto func : module.getOps<func::FuncOp>()) {
      std::optional<Phase> phase = getPhase(func);
      if (mode != RecomputeMode::None && (phase == Phase::TrainStep || phase == Phase::Accumulate))
        ops += recomputeIn(func.getBody().front(), flops);
      func.walk([](Operation *op) { // the labels have served; the backward mark stays for the pipeline split
        op->removeAttr(kRecomputeSegmentAttrName);
        if (!op->hasAttr(kStageAttrName))
          op->removeAttr(kBackwardAttrName);
      });
    }
    Builder b(module.getContext());
    module->setAttr("cpc.recomputed", b.getDictionaryAttr({b.getNamedAttr("ops", b.getI64IntegerAttr(ops)),
                                                            b.getNamedAttr("flops", b.getI64IntegerAttr(flops))}));
  }

  int64_t recomputeIn(Block &body, int64_t &flops) {
    Roles roles = classify(body);
    Recomputer recomputer(roles, mode);
    // For each segment but the last: what the backward reads of it that is not kept, and where
    // the backward first reads any of it.
    std::map<int64_t, llvm::DenseSet<Value>> wanted;
    std::map<int64_t, Operation *> firstUse;
    for (Operation *op : roles.backwardOps)
      for (Value v : op->getOperands()) {
        Operation *def = v.getDefiningOp();
        auto it = def ? roles.segmentOf.find(def) : roles.segmentOf.end();
        if (it == roles.segmentOf.end() || it->second == roles.lastSegment || recomputer.kept(v))
          continue;
        wanted[it->second].insert(v);
        firstUse.try_emplace(it->second, op);
      }
    int64_t count = 0;
    for (auto &[segment, values] : wanted)
      count += recomputer.recompute(segment, values, firstUse[segment], flops);
    return count;
  }
};

} // namespace
