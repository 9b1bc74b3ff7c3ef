//===- RecomputeSegments.cpp - cut the forward model for activation recompute ===//
//
// Full recompute keeps, of the forward, only the values that cross from one segment into a
// later one (the checkpoints); in the backward each segment's forward runs again from them.
// Its activation memory is then about the checkpoints plus the largest segment's saved
// activations, the quantity this pass minimises (Chen et al., "Training deep nets with
// sublinear memory cost": sqrt(n) segments of a chain): for each bound T on a segment's saved
// bytes, the cuts with the fewest checkpoint bytes come from a dynamic program over the
// positions (a sliding-window minimum: the segments that may end at k start in a window that
// only moves right), and the T with the smallest sum wins.
//
#include "dialects/cpc/Roles.h"
#include "passes/ModelCuts.h"
#include "passes/Passes.h"

#include <cmath>
#include <deque>
#include <limits>

namespace cpc {
#define GEN_PASS_DEF_CPCRECOMPUTESEGMENTS
#include "passes/Passes.h.inc"
} // namespace cpc

using namespace mlir;
using namespace cpc;

namespace {

struct Segmentation {
  std::vector<size_t> begins; // first op index of each segment
  int64_t checkpointBytes = 0, largestSaved = 0;
  int64_t score() const { return checkpointBytes + largestSaved; }
};

/// The cuts of ops [0, n) (saved-bytes prefix sums `prefix`, bytes `crossing[k]` live across
/// position k) into segments of at most `bound` saved bytes, none spanning two pipeline chunks
/// (`runStart[i]`: the first op of op i's chunk), with the fewest checkpoint bytes.
Segmentation cutUnder(int64_t bound, ArrayRef<int64_t> prefix, ArrayRef<int64_t> crossing,
                      ArrayRef<size_t> runStart) {
  size_t n = prefix.size() - 1;
  const int64_t inf = std::numeric_limits<int64_t>::max() / 2;
  std::vector<int64_t> best(n + 1, inf);
  std::vector<size_t> from(n + 1, 0);
  best[0] = 0;
  auto entry = [&](size_t j) { return best[j] + (j > 0 ? crossing[j] : 0); };
  std::deque<size_t> window; // starts j in increasing order with increasing entry(j)
  size_t lo = 0;
  for (size_t k = 1; k <= n; ++k) {
    while (!window.empty() && entry(window.back()) >= entry(k - 1))
      window.pop_back();
    window.push_back(k - 1);
    while (prefix[k] - prefix[lo] > bound || lo < runStart[k - 1])
      ++lo;
    while (!window.empty() && window.front() < lo)
      window.pop_front();
    if (window.empty())
      continue; // an op saves more than the bound: no cut ends here
    best[k] = entry(window.front());
    from[k] = window.front();
  }
  Segmentation s;
  if (best[n] >= inf) {
    s.checkpointBytes = inf;
    return s;
  }
  s.checkpointBytes = best[n];
  for (size_t k = n; k > 0; k = from[k]) {
    s.begins.insert(s.begins.begin(), from[k]);
    s.largestSaved = std::max(s.largestSaved, prefix[k] - prefix[from[k]]);
  }
  return s;
}

/// The segmentation with the least checkpoint plus largest-segment bytes over a geometric
/// ladder of bounds (fewer segments on a tie).
Segmentation chooseSegments(ArrayRef<int64_t> saved, ArrayRef<int64_t> crossing, ArrayRef<size_t> runStart) {
  std::vector<int64_t> prefix(saved.size() + 1, 0);
  int64_t single = 1;
  for (size_t i = 0; i < saved.size(); ++i) {
    prefix[i + 1] = prefix[i] + saved[i];
    single = std::max(single, saved[i]);
  }
  int64_t total = std::max(prefix.back(), single);
  Segmentation chosen = cutUnder(total, prefix, crossing, runStart);
  constexpr int kRungs = 64;
  double ratio = std::pow((double)total / (double)single, 1.0 / kRungs);
  for (int rung = kRungs - 1; rung >= 0; --rung) {
    int64_t bound = rung == 0 ? single : (int64_t)((double)single * std::pow(ratio, rung));
    Segmentation s = cutUnder(bound, prefix, crossing, runStart);
    if (!s.begins.empty() && s.score() < chosen.score())
      chosen = s;
  }
  return chosen;
}

struct CpcRecomputeSegmentsPass : cpc::impl::CpcRecomputeSegmentsBase<CpcRecomputeSegmentsPass> {
  using CpcRecomputeSegmentsBase::CpcRecomputeSegmentsBase;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    auto func = module.lookupSymbol<func::FuncOp>(funcName);
    if (!func) {
      module.emitError("no function @") << funcName << " to cut into recompute segments";
      return signalPassFailure();
    }
    SmallVector<Operation *> ops = dataOps(func);
    if (ops.empty())
      return;
    llvm::DenseMap<Operation *, size_t> indexOf;
    for (auto [i, op] : llvm::enumerate(ops))
      indexOf[op] = i;
    std::vector<int64_t> crossing = crossingBytes(ops, indexOf);
    BackwardProbe probe = probeBackward(module, func, ops.size(), CostProfile::builtIn());
    std::vector<size_t> runStart(ops.size(), 0);
    for (size_t i = 1; i < ops.size(); ++i)
      runStart[i] = getStage(ops[i]) == getStage(ops[i - 1]) ? runStart[i - 1] : i;
    Segmentation segments = chooseSegments(probe.savedBytes, crossing, runStart);
    Builder b(module.getContext());
    SmallVector<Attribute> table;
    for (auto [s, begin] : llvm::enumerate(segments.begins)) {
      size_t end = s + 1 < segments.begins.size() ? segments.begins[s + 1] : ops.size();
      int64_t saved = 0;
      for (size_t i = begin; i < end; ++i) {
        ops[i]->setAttr(kRecomputeSegmentAttrName, b.getI64IntegerAttr((int64_t)s));
        saved += probe.savedBytes[i];
      }
      table.push_back(b.getDictionaryAttr({
          b.getNamedAttr("segment", b.getI64IntegerAttr((int64_t)s)),
          b.getNamedAttr("ops", b.getI64IntegerAttr((int64_t)(end - begin))),
          b.getNamedAttr("saved_bytes", b.getI64IntegerAttr(saved)),
          b.getNamedAttr("checkpoint_bytes", b.getI64IntegerAttr(s > 0 ? crossing[begin] : 0)),
      }));
    }
    module->setAttr("cpc.recompute_segments", b.getArrayAttr(table));
  }
};

} // namespace
