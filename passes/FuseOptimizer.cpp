//===- FuseOptimizer.cpp - the gradient norm's squares and the clip's scale -===//
//
// The update of a step reads every gradient three times around the norm: g * g (written), its
// sum, then g * coef (written again) for AdamW. On per-rank IR, right before the plan:
//   - reduce_sum(x * x), the square read by nothing else, becomes cpc.reduce_sum_squares(x);
//   - adamw(p, g * s, ...) with s rank 0 and the product read by nothing else takes s as its
//     grad_scale operand.
// Both keep the roundings of the ops they replace: the CPU kernels give the same bits.
//
#include "passes/PatternUtils.h"
#include "passes/Passes.h"

#include "mlir/IR/PatternMatch.h"

namespace cpc {
#define GEN_PASS_DEF_CPCFUSEOPTIMIZER
#include "passes/Passes.h.inc"
} // namespace cpc

using namespace mlir;
using namespace cpc;

namespace {

bool isScalar(Value v) { return llvm::cast<RankedTensorType>(v.getType()).getRank() == 0; }

/// reduce_sum(x * x), the square read by nothing else -> reduce_sum_squares(x).
struct FuseSumOfSquares : OpRewritePattern<ReduceSumOp> {
  using OpRewritePattern::OpRewritePattern;

  LogicalResult matchAndRewrite(ReduceSumOp sum, PatternRewriter &b) const override {
    auto square = sum.getInput().getDefiningOp<MulOp>();
    if (!square || square.getLhs() != square.getRhs() || !square->hasOneUse() ||
        square.getLhs().getType() != square.getType() || !llvm::isa<FloatType>(square.getType().getElementType()))
      return failure(); // (integer sums of squares keep their ops: the fused op is for floats)
    auto fused = b.create<ReduceSumSquaresOp>(sum.getLoc(), sum.getType(), square.getLhs(), sum.getAxesAttr(),
                                              sum.getKeepdimsAttr());
    fused->setDiscardableAttrs(sum->getDiscardableAttrDictionary());
    b.replaceOp(sum, fused.getResult());
    b.eraseOp(square);
    return success();
  }
};

/// adamw(p, g * s, ...), s rank 0 and the product read by nothing else -> adamw(p, g, ...,
/// grad_scale = s).
struct FuseGradScale : OpRewritePattern<AdamWOp> {
  using OpRewritePattern::OpRewritePattern;

  LogicalResult matchAndRewrite(AdamWOp adam, PatternRewriter &b) const override {
    auto product = adam.getGrad().getDefiningOp<MulOp>();
    if (adam.getGradScale() || !product || !product->hasOneUse() || product.getType() != adam.getGrad().getType())
      return failure();
    Value grad = product.getLhs(), scale = product.getRhs();
    if (!isScalar(scale))
      std::swap(grad, scale);
    if (!isScalar(scale) || grad.getType() != product.getType())
      return failure();
    b.modifyOpInPlace(adam, [&] {
      adam.getGradMutable().assign(grad);
      adam.getGradScaleMutable().assign(scale);
    });
    b.eraseOp(product);
    return success();
  }
};

struct CpcFuseOptimizerPass : cpc::impl::CpcFuseOptimizerBase<CpcFuseOptimizerPass> {
  void runOnOperation() override {
    SmallVector<Operation *> candidates;
    getOperation()->walk([&](Operation *op) {
      if (llvm::isa<ReduceSumOp, AdamWOp>(op))
        candidates.push_back(op);
    });
    RewritePatternSet patterns(&getContext());
    patterns.add<FuseSumOfSquares, FuseGradScale>(&getContext());
    if (failed(rewriteOnly(candidates, std::move(patterns))))
      return signalPassFailure();
  }
};

} // namespace
