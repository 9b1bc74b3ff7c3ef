//===- FuseAttention.cpp - matmul, scale, softmax, matmul -> cpc.attention -===//
//
// Exporters write scaled dot-product attention as its four steps: the scores q k^T, a scale
// (mul or div by a scalar constant, or none), softmax over the keys, and the product with v.
// Run separately they write the N x M scores three times (product, scaled, softmax);
// cpc.attention writes them once, as the probabilities its gradient reads. Only intermediates
// used by the next step alone are fused (a graph that also returns the scores keeps its ops).
//
#include "passes/PatternUtils.h"
#include "passes/Passes.h"

#include "mlir/IR/Builders.h"

#include <cmath>

namespace cpc {
#define GEN_PASS_DEF_CPCFUSEATTENTION
#include "passes/Passes.h.inc"
} // namespace cpc

using namespace mlir;
using namespace cpc;

namespace {

RankedTensorType tensorType(Value v) { return llvm::cast<RankedTensorType>(v.getType()); }

/// The scores and the scale of softmax's input `x`: x itself (scale 1), s * c, c * s or s / c
/// with c a scalar constant and the product of s's type. A division becomes a scale of 1/c
/// (exact for a power of two, else within an ulp of the quotient before the softmax).
std::optional<std::pair<Value, double>> scaledScores(Value x) {
  auto scaleOf = [&](Operation *op, Value s, Value c, bool divide) -> std::optional<std::pair<Value, double>> {
    std::optional<double> value = getSplatFloat(c);
    if (!value || op->getResult(0).getType() != s.getType() || !s.hasOneUse())
      return std::nullopt;
    double scale = divide ? 1.0 / *value : *value;
    if (!std::isfinite(scale)) // (cpc.attention's scale is finite; such graphs keep their ops)
      return std::nullopt;
    return std::make_pair(s, scale);
  };
  if (auto mul = x.getDefiningOp<MulOp>()) {
    if (auto found = scaleOf(mul, mul.getLhs(), mul.getRhs(), false))
      return found;
    return scaleOf(mul, mul.getRhs(), mul.getLhs(), false);
  }
  if (auto div = x.getDefiningOp<DivOp>())
    return scaleOf(div, div.getLhs(), div.getRhs(), true);
  return std::make_pair(x, 1.0);
}

/// Whether q [..., N, D], k [..., M, D] and v [..., M, Dv] fit cpc.attention: one rank >= 2 and
/// element type, the same batch dims (no broadcasting), matching D and M.
bool fitsAttention(Value q, Value k, Value v) {
  RankedTensorType qt = tensorType(q), kt = tensorType(k), vt = tensorType(v);
  int64_t rank = qt.getRank();
  return rank >= 2 && kt.getRank() == rank && vt.getRank() == rank && qt.hasStaticShape() && kt.hasStaticShape() &&
         vt.hasStaticShape() && qt.getElementType() == kt.getElementType() &&
         qt.getElementType() == vt.getElementType() && qt.getShape().drop_back(2) == kt.getShape().drop_back(2) &&
         qt.getShape().drop_back(2) == vt.getShape().drop_back(2) && qt.getShape().back() == kt.getShape().back() &&
         kt.getDimSize(rank - 2) == vt.getDimSize(rank - 2);
}

/// Rewrites softmax(scale * q k^T) v at `softmax` into one cpc.attention; false when the
/// pattern is not there.
bool fuse(SoftmaxOp softmax) {
  Value probabilities = softmax.getResult();
  int64_t rank = tensorType(probabilities).getRank();
  if (rank < 2 || softmax.getAxis() != rank - 1 || !probabilities.hasOneUse())
    return false;
  auto output = llvm::dyn_cast<MatMulOp>(*probabilities.getUsers().begin());
  if (!output || output.getLhs() != probabilities || output.getTransposeLhs() || output.getTransposeRhs())
    return false;
  Value x = softmax.getInput();
  if (!x.hasOneUse())
    return false;
  std::optional<std::pair<Value, double>> scaled = scaledScores(x);
  if (!scaled)
    return false;
  auto scores = scaled->first.getDefiningOp<MatMulOp>();
  if (!scores || !scores.getResult().hasOneUse() || scores.getTransposeLhs() || !scores.getTransposeRhs())
    return false;
  Value q = scores.getLhs(), k = scores.getRhs(), v = output.getRhs();
  if (!fitsAttention(q, k, v))
    return false;
  SmallVector<int64_t> resultShape(tensorType(q).getShape());
  resultShape.back() = tensorType(v).getShape().back();
  if (output.getType() != tensorType(q).clone(resultShape))
    return false;
  // At the output product: q, k and v dominate it (they dominate the ops before it).
  OpBuilder builder(output);
  auto fused = builder.create<AttentionOp>(output.getLoc(), TypeRange{output.getType(), probabilities.getType()}, q, k,
                                           v, builder.getF64FloatAttr(scaled->second));
  fused->setDiscardableAttrs(output->getDiscardableAttrDictionary());
  output.getResult().replaceAllUsesWith(fused.getResult());
  Operation *scaleOp = x.getDefiningOp() == scores ? nullptr : x.getDefiningOp();
  output->erase();
  softmax->erase();
  if (scaleOp)
    scaleOp->erase();
  scores->erase();
  return true;
}

struct CpcFuseAttentionPass : cpc::impl::CpcFuseAttentionBase<CpcFuseAttentionPass> {
  void runOnOperation() override {
    SmallVector<SoftmaxOp> softmaxes;
    getOperation()->walk([&](SoftmaxOp op) { softmaxes.push_back(op); });
    for (SoftmaxOp softmax : softmaxes)
      (void)fuse(softmax);
  }
};

} // namespace
