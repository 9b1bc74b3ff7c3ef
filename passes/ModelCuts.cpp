//===- ModelCuts.cpp - where a forward model can be cut, and what a cut costs ===//
#include "passes/ModelCuts.h"
#include "dialects/cpc/Roles.h"
#include "passes/Passes.h"

#include "mlir/IR/Diagnostics.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"
#include "llvm/ADT/DenseSet.h"

using namespace mlir;

namespace cpc {

SmallVector<Operation *> dataOps(func::FuncOp func) {
  Block &body = func.getBody().front();
  llvm::DenseSet<Value> dataDependent(body.getArguments().begin(), body.getArguments().end());
  SmallVector<Operation *> ops;
  for (Operation &op : body.without_terminator()) {
    bool fromData = llvm::any_of(op.getOperands(), [&](Value v) { return dataDependent.contains(v); });
    if (!fromData && (op.getNumOperands() == 0 || isMemoryEffectFree(&op)))
      continue;
    ops.push_back(&op);
    for (Value r : op.getResults())
      dataDependent.insert(r);
  }
  return ops;
}

std::vector<int64_t> crossingBytes(ArrayRef<Operation *> ops, const llvm::DenseMap<Operation *, size_t> &indexOf) {
  size_t n = ops.size();
  std::vector<int64_t> delta(n + 2, 0);
  for (auto [i, op] : llvm::enumerate(ops))
    for (Value r : op->getResults()) {
      size_t last = i;
      for (Operation *user : r.getUsers()) {
        auto it = indexOf.find(user);
        last = std::max(last, it == indexOf.end() ? n : it->second);
      }
      if (last > i) {
        delta[i + 1] += valueBytes(r);
        delta[last + 1] -= valueBytes(r);
      }
    }
  std::vector<int64_t> crossing(n + 1, 0);
  for (size_t k = 1; k <= n; ++k)
    crossing[k] = crossing[k - 1] + delta[k];
  return crossing;
}

BackwardProbe probeBackward(ModuleOp module, func::FuncOp func, size_t count, const CostProfile &profile) {
  BackwardProbe probe{std::vector<double>(count, 0.0), std::vector<int64_t>(count, 0)};
  // A copy (the variables are symbols the gradient needs) whose data ops carry their index as
  // their stage label: autodiff copies it onto each op's gradient ops and marks them backward.
  OwningOpRef<ModuleOp> copy = module.clone();
  auto copied = copy->lookupSymbol<func::FuncOp>(func.getSymName());
  SmallVector<Operation *> ops = dataOps(copied);
  Builder b(module.getContext());
  for (auto [i, op] : llvm::enumerate(ops))
    op->setAttr(kStageAttrName, b.getI64IntegerAttr((int64_t)i));
  ScopedDiagnosticHandler quiet(module.getContext(), [](Diagnostic &) { return success(); });
  if (ops.size() != count || failed(differentiate(copied, 0.0)))
    return probe;
  auto grad = copy->lookupSymbol<func::FuncOp>((copied.getSymName() + "_grad").str());
  if (!grad)
    return probe;
  grad.walk([&](Operation *op) {
    std::optional<int64_t> index = getStage(op);
    if (!index || (size_t)*index >= count)
      return;
    if (op->hasAttr(kBackwardAttrName)) {
      probe.seconds[*index] += estimateSeconds(op, profile);
      return;
    }
    for (Value r : op->getResults())
      if (llvm::any_of(r.getUsers(), [](Operation *user) { return user->hasAttr(kBackwardAttrName); }))
        probe.savedBytes[*index] += valueBytes(r);
  });
  return probe;
}

} // namespace cpc
