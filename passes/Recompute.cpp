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

#include <limits>
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

/// Forward ops outside every segment that draw random numbers (a Replayable op that is not
/// pure: Dropout's mask) or compute from such draws alone, each with the earliest segment that
/// reads it: they belong to it, so that the mask is drawn again in the backward rather than
/// kept from the forward.
llvm::DenseMap<Operation *, int64_t> randomDraws(Block &body) {
  llvm::DenseSet<Operation *> draws;
  for (Operation &op : body.without_terminator()) {
    if (op.hasAttr(kBackwardAttrName) || getRecomputeSegment(&op))
      continue;
    bool drawn = op.hasTrait<cpc::OpTrait::Replayable>() && !isMemoryEffectFree(&op);
    bool fromDraws = llvm::any_of(op.getOperands(), [&](Value v) { return draws.contains(v.getDefiningOp()); });
    bool fromData = llvm::any_of(op.getOperands(), [&](Value v) {
      Operation *def = v.getDefiningOp();
      return def && !draws.contains(def) && def->getNumOperands() > 0;
    });
    if ((drawn || fromDraws) && !fromData && isReplayable(&op))
      draws.insert(&op);
  }
  llvm::DenseMap<Operation *, int64_t> segmentOf;
  for (Operation &op : llvm::reverse(body.without_terminator())) {
    if (!draws.contains(&op))
      continue;
    std::optional<int64_t> first;
    for (Operation *user : op.getUsers()) {
      std::optional<int64_t> s = getRecomputeSegment(user);
      if (auto it = segmentOf.find(user); it != segmentOf.end())
        s = it->second;
      if (s && !user->hasAttr(kBackwardAttrName))
        first = std::min(first.value_or(*s), *s);
    }
    if (first)
      segmentOf[&op] = *first;
  }
  return segmentOf;
}

Roles classify(Block &body) {
  Roles roles;
  llvm::DenseMap<Operation *, int64_t> draws = randomDraws(body);
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
    if (auto it = draws.find(&op); it != draws.end())
      segment = it->second;
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

/// Whether `v` of segment `segment` must stay from the forward whatever the mode: its op cannot
/// run twice, or it is a checkpoint (a later segment's forward, or something other than its
/// own segment's forward and the backward, reads it).
bool mustKeep(const Roles &roles, Value v, int64_t segment) {
  if (!isReplayable(v.getDefiningOp()))
    return true;
  for (Operation *user : v.getUsers()) {
    auto it = roles.segmentOf.find(user);
    if (it != roles.segmentOf.end() ? it->second != segment : !roles.backward.contains(user))
      return true;
  }
  return false;
}

bool readByBackward(const Roles &roles, Value v) {
  return llvm::any_of(v.getUsers(), [&](Operation *user) { return roles.backward.contains(user); });
}

/// mode=auto's choice: which values of the segments (but the last) stay from the forward, the
/// fewest seconds of ops run again for `bytes` freed (see Passes.td). Greedy by bytes freed per
/// second, each step re-pricing only the segment it changed.
class AutoChoice {
public:
  AutoChoice(const Roles &roles, const CostProfile &profile) : roles_(roles), profile_(profile) {
    for (const auto &[segment, ops] : roles_.segmentOps) {
      if (segment == roles_.lastSegment) {
        for (Operation *op : ops)
          for (Value v : op->getResults())
            if (readByBackward(roles_, v))
              lastSavedBytes_ += valueBytes(v);
        continue;
      }
      for (Operation *op : ops)
        for (Value v : op->getResults()) {
          bool forced = mustKeep(roles_, v, segment);
          if (forced)
            forced_.insert(v);
          if (readByBackward(roles_, v)) {
            saved_[segment].push_back(v);
            if (!forced)
              held_.insert(v);
          }
        }
    }
    for (const auto &[segment, values] : saved_) {
      price_[segment] = price(segment);
      keptAtFirst_ += price_[segment].heldBytes;
    }
  }

  /// The values kept: the forced ones and those still held once `bytes` are freed (all the
  /// greedy can free, when that is fewer).
  llvm::DenseSet<Value> choose(int64_t bytes) {
    std::map<int64_t, Step> best; // per segment, its best next step (re-priced when it changes)
    for (const auto &[segment, values] : saved_)
      best[segment] = bestStep(segment);
    while (freed() < bytes) {
      auto pick = std::max_element(best.begin(), best.end(),
                                   [](const auto &a, const auto &b) { return a.second.score < b.second.score; });
      if (pick == best.end() || !pick->second.value)
        break; // nothing left to free
      held_.erase(pick->second.value);
      price_[pick->first] = pick->second.price;
      pick->second = bestStep(pick->first);
    }
    llvm::DenseSet<Value> kept = forced_;
    kept.insert(held_.begin(), held_.end());
    return kept;
  }

private:
  struct Price {
    int64_t heldBytes = 0;      // what the segment keeps for the backward (and for its copies)
    int64_t recomputedBytes = 0; // what the backward reads of it again, live while it runs
    double seconds = 0;          // of the ops run again
  };

  /// Stop holding `value`: bytes freed per second of ops run again, and the segment's new price.
  struct Step {
    Value value; // none: the segment has nothing left to free
    double score = -1;
    Price price;
  };

  Step bestStep(int64_t segment) {
    Step best;
    const Price &now = price_[segment];
    for (Value v : saved_.at(segment)) {
      if (!held_.contains(v))
        continue;
      held_.erase(v);
      Price trial = price(segment);
      held_.insert(v);
      int64_t gain = now.heldBytes - trial.heldBytes;
      double seconds = trial.seconds - now.seconds;
      double score = seconds <= 0 ? std::numeric_limits<double>::max() : gain / seconds;
      if (gain > 0 && score > best.score)
        best = {v, score, trial};
    }
    return best;
  }

  /// How far the backward's peak of activations has fallen. It runs the segments last to first:
  /// while it runs segment s, the held values of the segments before s are live, and all of s's
  /// (held or computed again); the last segment's are all held.
  int64_t freed() const {
    int64_t before = 0, peak = 0;
    for (const auto &[segment, p] : price_) {
      peak = std::max(peak, before + p.heldBytes + p.recomputedBytes);
      before += p.heldBytes;
    }
    peak = std::max(peak, before + lastSavedBytes_);
    return keptAtFirst_ + lastSavedBytes_ - peak;
  }

  /// Segment `segment`'s price when `held_` (and the forced values) stay and the rest of what
  /// the backward reads is computed again, through whatever is not held.
  Price price(int64_t segment) const {
    Price p;
    llvm::DenseSet<Value> counted;
    llvm::DenseSet<Operation *> copied;
    SmallVector<Value> work;
    auto available = [&](Value v) { return held_.contains(v) || forced_.contains(v); };
    auto hold = [&](Value v) {
      if (counted.insert(v).second)
        p.heldBytes += valueBytes(v);
    };
    for (Value v : saved_.at(segment)) {
      if (available(v)) {
        hold(v);
        continue;
      }
      p.recomputedBytes += valueBytes(v);
      work.push_back(v);
    }
    while (!work.empty()) {
      Operation *def = work.pop_back_val().getDefiningOp();
      if (!copied.insert(def).second)
        continue;
      p.seconds += estimateSeconds(def, profile_);
      for (Value operand : def->getOperands()) {
        Operation *d = operand.getDefiningOp();
        auto it = d ? roles_.segmentOf.find(d) : roles_.segmentOf.end();
        if (it == roles_.segmentOf.end() || it->second != segment)
          continue; // a parameter, a checkpoint of an earlier segment: there anyway
        if (available(operand))
          hold(operand);
        else
          work.push_back(operand);
      }
    }
    return p;
  }

  const Roles &roles_;
  const CostProfile &profile_;
  llvm::DenseSet<Value> forced_, held_;
  std::map<int64_t, SmallVector<Value>> saved_; // per segment: its values the backward reads
  std::map<int64_t, Price> price_;
  int64_t keptAtFirst_ = 0, lastSavedBytes_ = 0;
};

class Recomputer {
public:
  Recomputer(Roles &roles, RecomputeMode mode) : roles_(roles), mode_(mode) {
    for (auto [op, segment] : roles_.segmentOf) // decided before any copy adds readers
      for (Value r : op->getResults())
        kept_[r] = decideKept(r, segment);
  }
  /// mode=auto: `kept` chose which values stay.
  Recomputer(Roles &roles, const llvm::DenseSet<Value> &kept) : roles_(roles), mode_(RecomputeMode::Auto) {
    for (auto [op, segment] : roles_.segmentOf)
      for (Value r : op->getResults())
        kept_[r] = segment == roles_.lastSegment || kept.contains(r);
  }

  /// Whether value `v` of a forward op stays from the forward.
  bool kept(Value v) const { return kept_.lookup(v); }

private:
  bool decideKept(Value v, int64_t segment) {
    Operation *op = v.getDefiningOp();
    if (mode_ == RecomputeMode::Selective && (!isMemoryEffectFree(op) || costClass(op) != CostClass::Memory))
      return true; // a GEMM, attention or collective: kept; selective runs only the cheap again
    return mustKeep(roles_, v, segment);
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
    // Only auto prices its choice.
    FailureOr<CostProfile> costs = mode == RecomputeMode::Auto ? loadCostProfile(module, profile) : CostProfile::builtIn();
    if (failed(costs))
      return signalPassFailure();
    int64_t ops = 0, flops = 0;
    for (auto func : module.getOps<func::FuncOp>()) {
      std::optional<Phase> phase = getPhase(func);
      if (mode != RecomputeMode::None && (phase == Phase::TrainStep || phase == Phase::Accumulate))
        ops += recomputeIn(func.getBody().front(), *costs, flops);
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

  int64_t recomputeIn(Block &body, const CostProfile &costs, int64_t &flops) {
    Roles roles = classify(body);
    Recomputer recomputer = mode == RecomputeMode::Auto ? Recomputer(roles, AutoChoice(roles, costs).choose(bytes))
                                                        : Recomputer(roles, mode);
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
