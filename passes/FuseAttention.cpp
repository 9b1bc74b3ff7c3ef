//===- FuseAttention.cpp - matmul, scale, softmax, matmul -> cpc.attention -===//
//
// Exporters write scaled dot-product attention as its four steps: the scores q k^T, a scale
// (mul or div by a scalar constant, or none), softmax over the keys, and the product with v.
// Run separately they write the N x M scores three times (product, scaled, softmax);
// cpc.attention writes them once, as the probabilities its gradient reads. Only intermediates
// used by the next step alone are fused (a graph that also returns the scores keeps its ops).
// Then, where q, k and v are transposed from token-major [..., N, H, D] (how a Linear writes
// them) and the result transposed back, the attention takes them token-major (layout "bnhd").
//
#include "passes/PatternUtils.h"
#include "passes/Passes.h"

#include "mlir/IR/PatternMatch.h"
#include "llvm/ADT/SetVector.h"

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

/// Rewrites softmax(scale * q k^T) v at `softmax` into one cpc.attention.
struct FuseSoftmaxAttention : OpRewritePattern<SoftmaxOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(SoftmaxOp softmax, PatternRewriter &b) const override;
};

LogicalResult FuseSoftmaxAttention::matchAndRewrite(SoftmaxOp softmax, PatternRewriter &b) const {
  Value probabilities = softmax.getResult();
  int64_t rank = tensorType(probabilities).getRank();
  if (rank < 2 || softmax.getAxis() != rank - 1 || !probabilities.hasOneUse())
    return failure();
  auto output = llvm::dyn_cast<MatMulOp>(*probabilities.getUsers().begin());
  if (!output || output.getLhs() != probabilities || output.getTransposeLhs() || output.getTransposeRhs())
    return failure();
  Value x = softmax.getInput();
  if (!x.hasOneUse())
    return failure();
  std::optional<std::pair<Value, double>> scaled = scaledScores(x);
  if (!scaled)
    return failure();
  auto scores = scaled->first.getDefiningOp<MatMulOp>();
  if (!scores || !scores.getResult().hasOneUse() || scores.getTransposeLhs() || !scores.getTransposeRhs())
    return failure();
  Value q = scores.getLhs(), k = scores.getRhs(), v = output.getRhs();
  if (!fitsAttention(q, k, v))
    return failure();
  SmallVector<int64_t> resultShape(tensorType(q).getShape());
  resultShape.back() = tensorType(v).getShape().back();
  if (output.getType() != tensorType(q).clone(resultShape))
    return failure();
  // At the output product: q, k and v dominate it (they dominate the ops before it).
  b.setInsertionPoint(output);
  auto fused = b.create<AttentionOp>(output.getLoc(), TypeRange{output.getType(), probabilities.getType()}, q, k, v,
                                     llvm::APFloat(scaled->second), AttentionLayout::HeadMajor);
  fused->setDiscardableAttrs(output->getDiscardableAttrDictionary());
  Operation *scaleOp = x.getDefiningOp() == scores ? nullptr : x.getDefiningOp();
  b.replaceOp(output, fused.getResult());
  b.eraseOp(softmax);
  if (scaleOp)
    b.eraseOp(scaleOp);
  b.eraseOp(scores);
  return success();
}

//===----------------------------------------------------------------------===//
// Token-major operands: no head transposes
//===----------------------------------------------------------------------===//

/// Whether `perm` swaps dims -3 and -2 and keeps the others: [..., N, H, D] <-> [..., H, N, D].
bool isHeadSwap(ArrayRef<int64_t> perm) {
  int64_t rank = perm.size();
  if (rank < 3)
    return false;
  for (int64_t d = 0; d < rank; ++d)
    if (perm[d] != (d == rank - 3 ? rank - 2 : d == rank - 2 ? rank - 3 : d))
      return false;
  return true;
}

/// Where a head-major operand x [..., H, N, D] comes from in token-major order: x =
/// transpose(source) by the head swap, or x = gather(transpose(y, p), i, axis a) with a scalar i
/// whose permutation, once the gathered dim is gone, is the head swap: then the token-major
/// operand is gather(y, i, axis p[a]) (a qkv projection split into q, k and v).
struct TokenMajorSource {
  Value source;       // the first case
  GatherOp gather;    // the second
  TransposeOp transpose;
  int64_t sourceAxis = 0;
};

std::optional<TokenMajorSource> tokenMajorSource(Value x) {
  if (auto t = x.getDefiningOp<TransposeOp>(); t && isHeadSwap(t.getPermutation()))
    return TokenMajorSource{t.getInput(), {}, {}, 0};
  auto gather = x.getDefiningOp<GatherOp>();
  if (!gather || gather.getBlockAxes() || tensorType(gather.getIndices()).getRank() != 0)
    return std::nullopt;
  auto t = gather.getData().getDefiningOp<TransposeOp>();
  if (!t)
    return std::nullopt;
  ArrayRef<int64_t> perm = t.getPermutation();
  int64_t axis = gather.getAxis(), removed = perm[axis];
  SmallVector<int64_t> rest;
  for (int64_t d = 0; d < (int64_t)perm.size(); ++d)
    if (d != axis)
      rest.push_back(perm[d] > removed ? perm[d] - 1 : perm[d]);
  if (!isHeadSwap(rest))
    return std::nullopt;
  return TokenMajorSource{Value(), gather, t, removed};
}

Value materialize(OpBuilder &b, Location loc, TokenMajorSource s) {
  if (s.source)
    return s.source;
  return b.create<GatherOp>(loc, s.transpose.getInput(), s.gather.getIndices(), b.getI64IntegerAttr(s.sourceAxis),
                            ArrayAttr());
}

/// Rewrites attention(swap(q'), swap(k'), swap(v')) whose result only feeds swap(.) into
/// attention{layout = "bnhd"}(q', k', v'): the kernels read each head's rows in place, and
/// neither the transposes nor their gradients are materialised.
struct FoldHeadTransposes : OpRewritePattern<AttentionOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(AttentionOp attention, PatternRewriter &b) const override;
};

LogicalResult FoldHeadTransposes::matchAndRewrite(AttentionOp attention, PatternRewriter &b) const {
  if (attention.isTokenMajor() || !attention.getResult().hasOneUse())
    return failure();
  auto back = llvm::dyn_cast<TransposeOp>(*attention.getResult().getUsers().begin());
  if (!back || !isHeadSwap(back.getPermutation()))
    return failure();
  SmallVector<TokenMajorSource> sources;
  for (Value x : {attention.getQ(), attention.getK(), attention.getV()}) {
    std::optional<TokenMajorSource> s = tokenMajorSource(x);
    if (!s)
      return failure();
    sources.push_back(*s);
  }
  b.setInsertionPoint(attention);
  Location loc = attention.getLoc();
  Value q = materialize(b, loc, sources[0]), k = materialize(b, loc, sources[1]), v = materialize(b, loc, sources[2]);
  auto fused = b.create<AttentionOp>(loc, TypeRange{back.getType(), attention.getProbabilities().getType()}, q, k, v,
                                     attention.getScale(), AttentionLayout::TokenMajor);
  fused->setDiscardableAttrs(attention->getDiscardableAttrDictionary());
  b.replaceOp(back, fused.getResult());
  b.replaceAllUsesWith(attention.getProbabilities(), fused.getProbabilities());
  // The head-major operands' producers (gathers, then the transposes they read; q, k and v may
  // share them), each erased once, once nothing reads it.
  llvm::SetVector<Operation *> producers;
  for (Value x : {attention.getQ(), attention.getK(), attention.getV()})
    if (Operation *op = x.getDefiningOp())
      producers.insert(op);
  for (const TokenMajorSource &s : sources)
    if (s.transpose)
      producers.insert(s.transpose);
  b.eraseOp(attention);
  for (Operation *op : producers)
    if (op->use_empty())
      b.eraseOp(op);
  return success();
}

struct CpcFuseAttentionPass : cpc::impl::CpcFuseAttentionBase<CpcFuseAttentionPass> {
  void runOnOperation() override {
    // The softmaxes, then the attentions (fused or imported).
    SmallVector<Operation *> softmaxes;
    getOperation()->walk([&](SoftmaxOp op) { softmaxes.push_back(op); });
    RewritePatternSet fuse(&getContext());
    fuse.add<FuseSoftmaxAttention>(&getContext());
    if (failed(rewriteOnly(softmaxes, std::move(fuse))))
      return signalPassFailure();
    SmallVector<Operation *> attentions;
    getOperation()->walk([&](AttentionOp op) { attentions.push_back(op); });
    RewritePatternSet fold(&getContext());
    fold.add<FoldHeadTransposes>(&getContext());
    if (failed(rewriteOnly(attentions, std::move(fold))))
      return signalPassFailure();
  }
};

} // namespace
