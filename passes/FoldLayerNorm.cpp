//===- FoldLayerNorm.cpp - opset-13 LayerNorm chain -> cpc.layer_norm ------===//
#include "passes/PatternUtils.h"
#include "passes/Passes.h"

#include "mlir/Transforms/GreedyPatternRewriteDriver.h"

namespace cpc {
#define GEN_PASS_DEF_CPCFOLDLAYERNORM
#include "passes/Passes.h.inc"
} // namespace cpc

using namespace mlir;
using namespace cpc;

namespace {
/// Returns the first reduced axis when `mean` averages `x` over all trailing dims [axis, rank)
/// with keepdims; -1 otherwise.
int64_t trailingMeanAxis(ReduceMeanOp mean, Value x) {
  if (!mean || mean.getInput() != x || !mean.getKeepdims())
    return -1;
  int64_t rank = llvm::cast<RankedTensorType>(x.getType()).getRank();
  ArrayRef<int64_t> axes = mean.getAxes();
  if (axes.empty() || axes.back() != rank - 1)
    return -1;
  for (size_t i = 1; i < axes.size(); ++i)
    if (axes[i] != axes[i - 1] + 1)
      return -1;
  return axes.front();
}

/// Matches div(d, sqrt(mean(pow(d, 2)) + eps)) with d = x - mean(x); optionally followed by
/// mul(., scale) and add(., bias) with scale/bias of the normalized shape.
struct FoldLayerNormChain : OpRewritePattern<DivOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(DivOp div, PatternRewriter &rewriter) const override {
    auto centered = div.getLhs().getDefiningOp<SubOp>();
    auto sqrt = div.getRhs().getDefiningOp<SqrtOp>();
    if (!centered || !sqrt)
      return failure();
    Value x = centered.getLhs();
    int64_t axis = trailingMeanAxis(centered.getRhs().getDefiningOp<ReduceMeanOp>(), x);
    if (axis < 0 || div.getType() != x.getType())
      return failure();
    std::optional<double> eps;
    Value var = otherOperandIf(sqrt.getInput().getDefiningOp<AddOp>(), [&](Value c) {
      eps = getSplatFloat(c);
      return eps.has_value();
    });
    auto varMean = var ? var.getDefiningOp<ReduceMeanOp>() : ReduceMeanOp();
    if (!varMean || !(*eps >= 0.0)) // a negative or NaN epsilon is no LayerNorm
      return failure();
    if (!varMean)
      return failure();
    auto square = varMean.getInput().getDefiningOp<PowOp>();
    Value squared;
    if (square && isSplatFloat(square.getRhs(), 2.0))
      squared = square.getLhs();
    else if (auto mul = varMean.getInput().getDefiningOp<MulOp>(); mul && mul.getLhs() == mul.getRhs())
      squared = mul.getLhs();
    if (squared != centered.getResult() || trailingMeanAxis(varMean, varMean.getInput()) != axis)
      return failure();

    auto type = llvm::cast<RankedTensorType>(x.getType());
    auto normType = RankedTensorType::get(type.getShape().drop_front(axis), type.getElementType());
    auto isAffineParam = [&](Value v) { return v.getType() == normType; };

    // Absorb the affine tail when it is there and the normalized value has no other user.
    Operation *last = div;
    Value scale, bias;
    if (div->hasOneUse()) {
      auto mul = llvm::dyn_cast<MulOp>(*div->user_begin());
      if (mul && mul.getType() == type && (scale = otherOperandIf(mul, [&](Value v) { return v == div.getResult(); })) &&
          isAffineParam(scale)) {
        last = mul;
        if (mul->hasOneUse()) {
          auto add = llvm::dyn_cast<AddOp>(*mul->user_begin());
          if (add && add.getType() == type &&
              (bias = otherOperandIf(add, [&](Value v) { return v == mul.getResult(); })) &&
              isAffineParam(bias))
            last = add;
          else
            bias = Value();
        }
      } else {
        scale = Value();
      }
    }
    rewriter.setInsertionPoint(last);
    Location loc = last->getLoc();
    auto splat = [&](double v) {
      return rewriter.create<ConstantOp>(loc, DenseElementsAttr::get(normType, rewriter.getFloatAttr(type.getElementType(), v)));
    };
    if (!scale)
      scale = splat(1.0);
    if (!bias)
      bias = splat(0.0);
    auto ln = rewriter.create<LayerNormOp>(loc, x, scale, bias, rewriter.getI64IntegerAttr(axis),
                                           rewriter.getF64FloatAttr(*eps));
    rewriter.replaceOp(last, ln.getResult());
    return success();
  }
};

struct CpcFoldLayerNormPass : cpc::impl::CpcFoldLayerNormBase<CpcFoldLayerNormPass> {
  void runOnOperation() override {
    RewritePatternSet patterns(&getContext());
    patterns.add<FoldLayerNormChain>(&getContext());
    if (failed(applyPatternsAndFoldGreedily(getOperation(), std::move(patterns))))
      signalPassFailure();
  }
};
} // namespace
