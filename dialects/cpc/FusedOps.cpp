//===- FusedOps.cpp - ops that stand for several: matmul_bias, attention, .. ===//
#include "dialects/cpc/CpcDialect.h"

#include <cmath>

using namespace mlir;

namespace cpc {

LogicalResult MatMulBiasOp::verify() {
  auto result = llvm::cast<RankedTensorType>(getResult().getType());
  auto bias = llvm::cast<RankedTensorType>(getBias().getType());
  auto lhs = llvm::cast<RankedTensorType>(getLhs().getType());
  auto rhs = llvm::cast<RankedTensorType>(getRhs().getType());
  if (lhs.getRank() < 2 || rhs.getRank() != 2)
    return emitOpError("needs an lhs of rank >= 2 and a rank-2 rhs (a Linear's weight)");
  if (lhs.getElementType() != result.getElementType() || rhs.getElementType() != result.getElementType() ||
      bias.getElementType() != result.getElementType())
    return emitOpError("operands and result must have one element type");
  int64_t k = getTransposeLhs() ? lhs.getDimSize(lhs.getRank() - 2) : lhs.getDimSize(lhs.getRank() - 1);
  int64_t rhsK = getTransposeRhs() ? rhs.getDimSize(1) : rhs.getDimSize(0);
  int64_t n = getTransposeRhs() ? rhs.getDimSize(0) : rhs.getDimSize(1);
  int64_t m = getTransposeLhs() ? lhs.getDimSize(lhs.getRank() - 1) : lhs.getDimSize(lhs.getRank() - 2);
  SmallVector<int64_t> shape(lhs.getShape().drop_back(2));
  shape.append({m, n});
  if (k != rhsK)
    return emitOpError("contracting dims differ");
  if (result.getShape() != ArrayRef<int64_t>(shape))
    return emitOpError("result shape does not match the operands'");
  if (bias.getRank() != 1 || bias.getDimSize(0) != n)
    return emitOpError("bias must have one element per column (") << n << ")";
  if (getActivation() != "none" && getActivation() != "gelu")
    return emitOpError("activation must be \"none\" or \"gelu\"");
  if (getApproximate() != "none" && getApproximate() != "tanh")
    return emitOpError("approximate must be \"none\" or \"tanh\"");
  if (getPreactivation().size() > 1 || (!getPreactivation().empty() && getActivation() != "gelu"))
    return emitOpError("has a preactivation result only with activation \"gelu\" (at most one)");
  if (!getPreactivation().empty() && getPreactivation()[0].getType() != result)
    return emitOpError("preactivation must have the result's type");
  return success();
}

namespace {

/// What attention and its gradient check of q [..., N, D], k [..., M, D], v [..., M, Dv].
LogicalResult verifyAttentionOperands(Operation *op, Value q, Value k, Value v, double scale) {
  auto qt = llvm::cast<RankedTensorType>(q.getType()), kt = llvm::cast<RankedTensorType>(k.getType()),
       vt = llvm::cast<RankedTensorType>(v.getType());
  int64_t rank = qt.getRank();
  if (rank < 2 || kt.getRank() != rank || vt.getRank() != rank)
    return op->emitOpError("needs q, k and v of one rank >= 2");
  if (kt.getElementType() != qt.getElementType() || vt.getElementType() != qt.getElementType())
    return op->emitOpError("q, k and v must have one element type");
  if (qt.getShape().drop_back(2) != kt.getShape().drop_back(2) || qt.getShape().drop_back(2) != vt.getShape().drop_back(2))
    return op->emitOpError("q, k and v must have the same batch dims");
  if (qt.getDimSize(rank - 1) != kt.getDimSize(rank - 1))
    return op->emitOpError("q and k must have the same last dim (") << qt.getDimSize(rank - 1) << " vs "
                                                                    << kt.getDimSize(rank - 1) << ")";
  if (kt.getDimSize(rank - 2) != vt.getDimSize(rank - 2))
    return op->emitOpError("k and v must have as many rows (keys)");
  if (!std::isfinite(scale))
    return op->emitOpError("scale must be finite");
  return success();
}

/// q's shape with the last dim `last`: attention's result (v's last dim) and probabilities (M).
RankedTensorType withLastDim(Value q, int64_t last) {
  auto qt = llvm::cast<RankedTensorType>(q.getType());
  SmallVector<int64_t> shape(qt.getShape());
  shape.back() = last;
  return qt.clone(shape);
}
RankedTensorType attentionResultType(Value q, Value v) {
  return withLastDim(q, llvm::cast<RankedTensorType>(v.getType()).getShape().back());
}
RankedTensorType probabilitiesType(Value q, Value k) {
  auto kt = llvm::cast<RankedTensorType>(k.getType());
  return withLastDim(q, kt.getDimSize(kt.getRank() - 2));
}

} // namespace

LogicalResult AttentionOp::verify() {
  if (failed(verifyAttentionOperands(*this, getQ(), getK(), getV(), getScale().convertToDouble())))
    return failure();
  if (getResult().getType() != attentionResultType(getQ(), getV()))
    return emitOpError("result must be ") << attentionResultType(getQ(), getV());
  if (getProbabilities().getType() != probabilitiesType(getQ(), getK()))
    return emitOpError("probabilities must be ") << probabilitiesType(getQ(), getK());
  return success();
}

LogicalResult AttentionGradOp::verify() {
  if (failed(verifyAttentionOperands(*this, getQ(), getK(), getV(), getScale().convertToDouble())))
    return failure();
  if (getProbabilities().getType() != probabilitiesType(getQ(), getK()))
    return emitOpError("probabilities must be ") << probabilitiesType(getQ(), getK());
  if (getGrad().getType() != attentionResultType(getQ(), getV()))
    return emitOpError("grad must have the forward result's type ") << attentionResultType(getQ(), getV());
  if (getQGrad().getType() != getQ().getType() || getKGrad().getType() != getK().getType() ||
      getVGrad().getType() != getV().getType())
    return emitOpError("each gradient must have its operand's type");
  return success();
}

LogicalResult MultiTensorAdamWOp::verify() {
  unsigned n = getNumUpdates();
  if (getTensors().size() % 4 != 0 || getUpdated().size() != 3 * n)
    return emitOpError("needs 4 N tensors (params, grads, exp_avg, exp_avg_sq) and 3 N results");
  if (getWeightDecays().size() != n)
    return emitOpError("needs one weight decay per tensor (") << n << "), got " << getWeightDecays().size();
  auto scalar = [](Value v) { return llvm::cast<RankedTensorType>(v.getType()).getRank() == 0; };
  if (!scalar(getLr()) || !scalar(getStep()) || !scalar(getGradScale()))
    return emitOpError("lr, step and grad_scale must be rank-0 tensors");
  Type element = llvm::cast<RankedTensorType>(getGradScale().getType()).getElementType();
  for (unsigned i = 0; i < n; ++i) {
    Type t = getParam(i).getType();
    if (getGrad(i).getType() != t || getExpAvg(i).getType() != t || getExpAvgSq(i).getType() != t ||
        getNewParam(i).getType() != t || getNewExpAvg(i).getType() != t || getNewExpAvgSq(i).getType() != t)
      return emitOpError("tensor ") << i << ": param, grad, moments and results must have one type";
    if (llvm::cast<RankedTensorType>(t).getElementType() != element)
      return emitOpError("tensor ") << i << ": grad_scale must have the tensors' element type";
  }
  return success();
}

} // namespace cpc
