//===- MatMulStrategies.cpp - the strategies' dispatch and shared pieces --===//
#include "passes/MatMulStrategies.h"

using namespace mlir;

namespace cpc {

namespace {
RankedTensorType tensorType(Value v) { return llvm::cast<RankedTensorType>(v.getType()); }
} // namespace

Value MatMulRewriter::labelled(Operation *op) {
  for (NamedAttribute a : op_->getDiscardableAttrs())
    if (a.getName() != kResultShardingsAttr)
      op->setAttr(a.getName(), a.getValue());
  return op->getResult(0);
}

FailureOr<Value> MatMulRewriter::finish(Value c, const Layout &l, StringRef strategy) {
  SmallVector<int64_t> block(tensorType(op_.getResult()).getShape());
  for (size_t d = 0; d < block.size(); ++d)
    block[d] /= mesh_.parts(l.dims[d]);
  if (tensorType(c).getShape() != ArrayRef<int64_t>(block))
    return op_.emitError() << strategy << " computed " << c.getType() << " for the block of " << l.describe();
  hooks_.setCurrent(c, l);
  if (l.isSharded())
    c.getDefiningOp()->setAttr(kResultShardingsAttr, b_.getArrayAttr({l.toAttr(mesh_.ref())}));
  return c;
}

std::optional<MatMulDims> matMulDims(MatMulOp op) {
  auto a = tensorType(op.getLhs()), b = tensorType(op.getRhs());
  if (a.getRank() < 2 || b.getRank() != 2 || tensorType(op.getResult()).getRank() != a.getRank())
    return std::nullopt;
  int64_t r = a.getRank();
  MatMulDims d;
  d.rank = r;
  d.lm = op.getTransposeLhs() ? r - 1 : r - 2;
  d.lk = op.getTransposeLhs() ? r - 2 : r - 1;
  d.rk = op.getTransposeRhs() ? 1 : 0;
  d.rn = 1 - d.rk;
  return d;
}

bool hasStrategyRhs(MatMulOp op, const Mesh &mesh, const Layout &b) {
  return hasSummaRhs(op, mesh, b) || has3DRhs(op, mesh, b);
}

std::optional<Layout> strategyResultLayout(MatMulOp op, const Mesh &mesh, const Layout &a, const Layout &b,
                                           const Layout &c) {
  if (hasSummaRhs(op, mesh, b))
    return summaResultLayout(op, mesh, a, b, c);
  return matmul3DResultLayout(op, mesh, a, b, c);
}

FailureOr<Value> partitionByStrategy(MatMulOp op, const Mesh &mesh, const PartitionHooks &hooks) {
  FailureOr<Value> summa = partitionSumma(op, mesh, hooks);
  if (failed(summa) || *summa)
    return summa;
  return partitionMatmul3D(op, mesh, hooks);
}

} // namespace cpc
