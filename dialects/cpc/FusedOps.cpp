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
  if (getPreactivation().size() > 1 || (!getPreactivation().empty() && getActivation() != FusedActivation::Gelu))
    return emitOpError("has a preactivation result only with activation \"gelu\" (at most one)");
  if (!getPreactivation().empty() && getPreactivation()[0].getType() != result)
    return emitOpError("preactivation must have the result's type");
  return success();
}

namespace {

/// The dims of q, k and v after their batch dims: [N, D], or [N, H, D] token-major.
int64_t matrixDims(bool tokenMajor) { return tokenMajor ? 3 : 2; }

/// What attention and its gradient check of q [..., N, D], k [..., M, D], v [..., M, Dv] (or
/// [..., N, H, D], [..., M, H, D], [..., M, H, Dv] token-major).
LogicalResult verifyAttentionOperands(Operation *op, Value q, Value k, Value v, double scale, AttentionLayout layout) {
  const int64_t md = matrixDims(layout == AttentionLayout::TokenMajor);
  auto qt = llvm::cast<RankedTensorType>(q.getType()), kt = llvm::cast<RankedTensorType>(k.getType()),
       vt = llvm::cast<RankedTensorType>(v.getType());
  int64_t rank = qt.getRank();
  if (rank < md || kt.getRank() != rank || vt.getRank() != rank)
    return op->emitOpError("needs q, k and v of one rank >= ") << md;
  if (kt.getElementType() != qt.getElementType() || vt.getElementType() != qt.getElementType())
    return op->emitOpError("q, k and v must have one element type");
  if (qt.getShape().drop_back(md) != kt.getShape().drop_back(md) || qt.getShape().drop_back(md) != vt.getShape().drop_back(md))
    return op->emitOpError("q, k and v must have the same batch dims");
  if (md == 3 && (kt.getDimSize(rank - 2) != qt.getDimSize(rank - 2) || vt.getDimSize(rank - 2) != qt.getDimSize(rank - 2)))
    return op->emitOpError("q, k and v must have as many heads (dim -2)");
  if (qt.getDimSize(rank - 1) != kt.getDimSize(rank - 1))
    return op->emitOpError("q and k must have the same last dim (") << qt.getDimSize(rank - 1) << " vs "
                                                                    << kt.getDimSize(rank - 1) << ")";
  if (kt.getDimSize(rank - md) != vt.getDimSize(rank - md))
    return op->emitOpError("k and v must have as many rows (keys)");
  if (!std::isfinite(scale))
    return op->emitOpError("scale must be finite");
  return success();
}

/// Attention's result: q's shape with v's last dim (Dv), in either layout.
RankedTensorType attentionResultType(Value q, Value v) {
  auto qt = llvm::cast<RankedTensorType>(q.getType());
  SmallVector<int64_t> shape(qt.getShape());
  shape.back() = llvm::cast<RankedTensorType>(v.getType()).getShape().back();
  return qt.clone(shape);
}

} // namespace

RankedTensorType attentionProbabilitiesType(Value q, Value k, bool tokenMajor) {
  auto qt = llvm::cast<RankedTensorType>(q.getType()), kt = llvm::cast<RankedTensorType>(k.getType());
  const int64_t md = matrixDims(tokenMajor), rank = qt.getRank();
  SmallVector<int64_t> shape(qt.getShape().drop_back(md));
  if (tokenMajor)
    shape.push_back(qt.getDimSize(rank - 2));
  shape.append({qt.getDimSize(rank - md), kt.getDimSize(rank - md)});
  return qt.clone(shape);
}

LogicalResult AttentionOp::verify() {
  if (failed(verifyAttentionOperands(*this, getQ(), getK(), getV(), getScale().convertToDouble(), getLayout())))
    return failure();
  if (getResult().getType() != attentionResultType(getQ(), getV()))
    return emitOpError("result must be ") << attentionResultType(getQ(), getV());
  RankedTensorType probabilities = attentionProbabilitiesType(getQ(), getK(), isTokenMajor());
  if (getProbabilities().getType() != probabilities)
    return emitOpError("probabilities must be ") << probabilities;
  return success();
}

LogicalResult AttentionGradOp::verify() {
  if (failed(verifyAttentionOperands(*this, getQ(), getK(), getV(), getScale().convertToDouble(), getLayout())))
    return failure();
  RankedTensorType probabilities = attentionProbabilitiesType(getQ(), getK(), isTokenMajor());
  if (getProbabilities().getType() != probabilities)
    return emitOpError("probabilities must be ") << probabilities;
  if (getGrad().getType() != attentionResultType(getQ(), getV()))
    return emitOpError("grad must have the forward result's type ") << attentionResultType(getQ(), getV());
  if (getQGrad().getType() != getQ().getType() || getKGrad().getType() != getK().getType() ||
      getVGrad().getType() != getV().getType())
    return emitOpError("each gradient must have its operand's type");
  return success();
}

namespace {

/// What the residual LayerNorm ops check: f32/f64 `input` with `axis` in range, and `scale`
/// (and `bias`) of the normalized shape input.shape[axis:].
LogicalResult verifyResidualNorm(Operation *op, Type input, ArrayRef<Type> normalized, int64_t axis) {
  auto in = llvm::cast<RankedTensorType>(input);
  if (!in.getElementType().isF32() && !in.getElementType().isF64())
    return op->emitOpError("is fused for f32 and f64 only");
  if (axis < 0 || axis >= in.getRank())
    return op->emitOpError("axis ") << axis << " is out of range for rank " << in.getRank();
  RankedTensorType want = in.clone(in.getShape().drop_front(axis));
  for (Type t : normalized)
    if (t != want)
      return op->emitOpError("scale, bias and their gradients must be ") << want;
  return success();
}

} // namespace

LogicalResult AddLayerNormOp::verify() {
  Type t = getLhs().getType();
  if (getRhs().getType() != t || getSum().getType() != t || getResult().getType() != t)
    return emitOpError("lhs, rhs, sum and result must have one type (no broadcasting)");
  return verifyResidualNorm(*this, t, {getScale().getType(), getBias().getType()}, getAxis());
}

LogicalResult LayerNormGradAddOp::verify() {
  Type t = getInput().getType();
  if (getGrad().getType() != t || getAddend().getType() != t || getInputGrad().getType() != t)
    return emitOpError("input, grad, addend and input_grad must have one type (no broadcasting)");
  return verifyResidualNorm(*this, t, {getScale().getType(), getScaleGrad().getType(), getBiasGrad().getType()},
                            getAxis());
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
