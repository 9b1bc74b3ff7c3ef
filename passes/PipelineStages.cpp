//===- PipelineStages.cpp - cut the forward model into pipeline chunks -----===//
//
// Labels every forward op of the loss function with the model chunk it belongs to
// (`cpc.stage`), before autodiff, which carries the label onto the op's gradient. The chunks
// are contiguous runs of the ops in program order. Where to cut: first the smallest possible
// cost of the most expensive chunk (estimated seconds of its forward, and with `backward` of its
// gradient ops too, priced on a differentiated copy: Cost.h, the profile's rates) is found, then, among the cuts whose every chunk
// costs at most `tolerance` times that, the ones that move the fewest bytes between chunks
// (the values live across each cut): in a transformer that is between residual blocks, where
// only the residual stream (and skip values such as MAE's mask) is live. Ops that need no
// input data (parameters, constants and what is computed from them alone) get no label: each
// chunk that uses them has its own copy.
//
#include "dialects/cpc/Cost.h"
#include "dialects/cpc/Roles.h"
#include "passes/ModelCuts.h"
#include "passes/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"
#include "llvm/ADT/DenseSet.h"

#include <limits>

namespace cpc {
#define GEN_PASS_DEF_CPCPIPELINESTAGES
#include "passes/Passes.h.inc"
} // namespace cpc

using namespace mlir;
using namespace cpc;

namespace {

struct Cuts {
  std::vector<size_t> begins; // first op index of each chunk
  double worst = 0;           // the most expensive chunk's FLOPs
  int64_t boundaryBytes = 0;
};

/// Chooses `chunks` contiguous ranges of ops with costs `cost` and boundary bytes `crossing`
/// (crossing[k]: bytes live between op k-1 and op k); `allowed[k]` marks the positions one may
/// cut at.
FailureOr<Cuts> chooseCuts(ArrayRef<double> cost, ArrayRef<int64_t> crossing, const std::vector<bool> &allowed,
                           int64_t chunks, double tolerance) {
  size_t n = cost.size();
  std::vector<double> prefix(n + 1, 0);
  for (size_t i = 0; i < n; ++i)
    prefix[i + 1] = prefix[i] + cost[i];
  const double inf = std::numeric_limits<double>::infinity();
  // best[c][k]: the cheapest worst chunk covering ops [0, k) with c chunks.
  auto solve = [&](auto score, auto combine, double limit) {
    std::vector<std::vector<double>> best(chunks + 1, std::vector<double>(n + 1, inf));
    std::vector<std::vector<size_t>> from(chunks + 1, std::vector<size_t>(n + 1, 0));
    best[0][0] = 0;
    for (int64_t c = 1; c <= chunks; ++c)
      for (size_t k = 1; k <= n; ++k) {
        if (k < n && !allowed[k])
          continue;
        for (size_t j = c - 1; j < k; ++j) {
          if (best[c - 1][j] == inf || (j > 0 && !allowed[j]) || prefix[k] - prefix[j] <= 0)
            continue;
          double chunkCost = prefix[k] - prefix[j];
          if (chunkCost > limit)
            continue;
          double v = combine(best[c - 1][j], score(j, k, chunkCost));
          if (v < best[c][k]) {
            best[c][k] = v;
            from[c][k] = j;
          }
        }
      }
    std::vector<size_t> begins(chunks);
    size_t k = n;
    for (int64_t c = chunks; c >= 1; --c) {
      begins[c - 1] = from[c][k];
      k = from[c][k];
    }
    return std::make_pair(best[chunks][n], begins);
  };
  auto [worst, unused] = solve([](size_t, size_t, double chunkCost) { return chunkCost; },
                               [](double a, double b) { return std::max(a, b); }, inf);
  (void)unused;
  if (worst == inf)
    return failure();
  auto [bytes, begins] = solve([&](size_t j, size_t, double) { return j > 0 ? (double)crossing[j] : 0.0; },
                               [](double a, double b) { return a + b; }, worst * std::max(tolerance, 1.0));
  if (bytes == inf)
    return failure();
  Cuts cuts;
  cuts.begins = begins;
  cuts.boundaryBytes = (int64_t)bytes;
  for (int64_t c = 0; c < chunks; ++c) {
    size_t end = c + 1 < chunks ? begins[c + 1] : n;
    cuts.worst = std::max(cuts.worst, prefix[end] - prefix[begins[c]]);
  }
  return cuts;
}

/// Bytes of the parameters that ops [begin, end) read, directly or through copied ops.
int64_t parameterBytes(ArrayRef<Operation *> ops, size_t begin, size_t end,
                       const llvm::DenseMap<Operation *, size_t> &indexOf) {
  llvm::DenseSet<Operation *> params;
  for (size_t i = begin; i < end; ++i) {
    SmallVector<Value> work(ops[i]->getOperands());
    while (!work.empty()) {
      Operation *def = work.pop_back_val().getDefiningOp();
      if (!def || indexOf.count(def))
        continue;
      if (llvm::isa<ParameterOp>(def))
        params.insert(def);
      else
        work.append(def->operand_begin(), def->operand_end());
    }
  }
  int64_t bytes = 0;
  for (Operation *p : params)
    bytes += valueBytes(p->getResult(0));
  return bytes;
}

} // namespace

double cpc::modelSeconds(ModuleOp module, StringRef funcName, const CostProfile &profile, bool backward) {
  auto func = module.lookupSymbol<func::FuncOp>(funcName);
  if (!func)
    return 0.0;
  SmallVector<Operation *> ops = dataOps(func);
  double seconds = 0;
  for (Operation *op : ops)
    seconds += estimateSeconds(op, profile);
  if (backward)
    for (double b : probeBackward(module, func, ops.size(), profile).seconds)
      seconds += b;
  return seconds;
}

namespace {

std::string nameOf(Operation *op) {
  auto loc = llvm::dyn_cast<NameLoc>(op->getLoc());
  return loc ? loc.getName().str() : "";
}

struct CpcPipelineStagesPass : cpc::impl::CpcPipelineStagesBase<CpcPipelineStagesPass> {
  using CpcPipelineStagesBase::CpcPipelineStagesBase;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    auto func = module.lookupSymbol<func::FuncOp>(funcName);
    if (!func) {
      module.emitError("no function @") << funcName << " to cut into pipeline stages";
      return signalPassFailure();
    }
    if (chunks < 1) {
      module.emitError("the number of pipeline chunks must be >= 1");
      return signalPassFailure();
    }
    SmallVector<Operation *> ops = dataOps(func);
    size_t n = ops.size();
    if ((int64_t)n < chunks) {
      func.emitError("cannot cut ") << n << " ops into " << (int64_t)chunks << " pipeline chunks";
      return signalPassFailure();
    }
    llvm::DenseMap<Operation *, size_t> indexOf;
    for (auto [i, op] : llvm::enumerate(ops))
      indexOf[op] = i;
    std::vector<int64_t> crossing = crossingBytes(ops, indexOf);
    FailureOr<CostProfile> profiled = loadCostProfile(module, profile);
    if (failed(profiled))
      return signalPassFailure();
    std::vector<double> cost;
    for (Operation *op : ops)
      cost.push_back(estimateSeconds(op, *profiled));
    if (backward) // training: a chunk's work is its forward and its backward
      for (auto [c, b] : llvm::zip(cost, probeBackward(module, func, n, *profiled).seconds))
        c += b;
    FailureOr<std::vector<bool>> allowed = cutPoints(func, ops);
    if (failed(allowed))
      return signalPassFailure();
    FailureOr<Cuts> cuts = chooseCuts(cost, crossing, *allowed, chunks, tolerance);
    if (failed(cuts)) {
      func.emitError("found no way to cut the model into ") << (int64_t)chunks << " pipeline chunks";
      return signalPassFailure();
    }
    Builder b(module.getContext());
    SmallVector<Attribute> table;
    for (int64_t c = 0; c < chunks; ++c) {
      size_t begin = cuts->begins[c], end = c + 1 < chunks ? cuts->begins[c + 1] : n;
      double flops = 0, seconds = 0;
      for (size_t i = begin; i < end; ++i) {
        ops[i]->setAttr(kStageAttrName, b.getI64IntegerAttr(c));
        flops += (double)estimateFlops(ops[i]);
        seconds += cost[i];
      }
      table.push_back(b.getDictionaryAttr({
          b.getNamedAttr("chunk", b.getI64IntegerAttr(c)),
          b.getNamedAttr("ops", b.getI64IntegerAttr(end - begin)),
          b.getNamedAttr("flops", b.getF64FloatAttr(flops)),
          b.getNamedAttr("seconds", b.getF64FloatAttr(seconds)),
          b.getNamedAttr("with_backward", b.getBoolAttr(backward)),
          b.getNamedAttr("parameter_bytes", b.getI64IntegerAttr(parameterBytes(ops, begin, end, indexOf))),
          b.getNamedAttr("boundary_bytes", b.getI64IntegerAttr(c > 0 ? crossing[begin] : 0)),
          b.getNamedAttr("first_op", b.getStringAttr(nameOf(ops[begin]))),
      }));
    }
    module->setAttr("cpc.pipeline_chunks", b.getArrayAttr(table));
  }

  /// Where a chunk may begin: anywhere, or (`split`) before the first op whose name contains
  /// each entry.
  FailureOr<std::vector<bool>> cutPoints(func::FuncOp func, ArrayRef<Operation *> ops) {
    size_t n = ops.size();
    std::vector<bool> allowed(n + 1, split.empty());
    for (const std::string &name : split) {
      size_t found = n;
      for (size_t k = 1; k < n && found == n; ++k)
        if (llvm::StringRef(nameOf(ops[k])).contains(name))
          found = k;
      if (found == n)
        return func.emitError("--pp-split: no op named like '") << name << "' to cut before";
      allowed[found] = true;
    }
    if (!split.empty() && (int64_t)split.size() != chunks - 1)
      return func.emitError("--pp-split names ")
             << split.size() << " cut points; " << (int64_t)chunks << " chunks need " << (int64_t)chunks - 1;
    return allowed;
  }
};

} // namespace
