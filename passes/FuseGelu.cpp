//===- FuseGelu.cpp - erf expansion of GELU -> cpc.gelu --------------------===//
#include "passes/PatternUtils.h"
#include "passes/Passes.h"

#include "mlir/Transforms/GreedyPatternRewriteDriver.h"

namespace cpc {
#define GEN_PASS_DEF_CPCFUSEGELU
#include "passes/Passes.h.inc"
} // namespace cpc

using namespace mlir;
using namespace cpc;

namespace {
/// Relative tolerance for matching sqrt(2): a few ulps of the element type (f16/bf16 round
/// 1.41421 much more coarsely than f32).
double constantTolerance(Value v) {
  unsigned mantissa = llvm::APFloat::semanticsPrecision(
      llvm::cast<FloatType>(llvm::cast<RankedTensorType>(v.getType()).getElementType()).getFloatSemantics());
  return std::max(1e-5, std::ldexp(4.0, -(int)mantissa));
}

/// Is `v` == erf(x / sqrt(2)) (or erf(x * 1/sqrt(2)))? Returns x.
Value matchErfOfScaledInput(Value v) {
  auto erf = v.getDefiningOp<ErfOp>();
  if (!erf)
    return {};
  Value arg = erf.getInput();
  double tol = constantTolerance(arg);
  if (auto div = arg.getDefiningOp<DivOp>())
    return isSplatFloat(div.getRhs(), M_SQRT2, tol) ? div.getLhs() : Value();
  return otherOperandIf(arg.getDefiningOp<MulOp>(),
                        [tol](Value c) { return isSplatFloat(c, M_SQRT1_2, tol); });
}

/// Is `v` == 1 + erf(x / sqrt(2))? Returns x.
Value matchOnePlusErf(Value v) {
  Value erf = otherOperandIf(v.getDefiningOp<AddOp>(), [](Value c) { return isSplatFloat(c, 1.0); });
  return erf ? matchErfOfScaledInput(erf) : Value();
}

/// Matches (x * (1 + erf(x/sqrt2))) * 0.5 and (x * 0.5) * (1 + erf(x/sqrt2)).
struct FuseErfGelu : OpRewritePattern<MulOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(MulOp root, PatternRewriter &rewriter) const override {
    Value x;
    // Form A: mul(mul(x, 1+erf), 0.5).
    if (Value inner = otherOperandIf(root, [](Value c) { return isSplatFloat(c, 0.5); })) {
      if (auto mul = inner.getDefiningOp<MulOp>()) {
        for (auto [a, b] : {std::pair(mul.getLhs(), mul.getRhs()), std::pair(mul.getRhs(), mul.getLhs())})
          if (matchOnePlusErf(b) == a && a)
            x = a;
      }
    }
    // Form B: mul(mul(x, 0.5), 1+erf).
    if (!x) {
      for (auto [a, b] : {std::pair(root.getLhs(), root.getRhs()), std::pair(root.getRhs(), root.getLhs())}) {
        Value half = otherOperandIf(a.getDefiningOp<MulOp>(), [](Value c) { return isSplatFloat(c, 0.5); });
        if (half && matchOnePlusErf(b) == half)
          x = half;
      }
    }
    if (!x || x.getType() != root.getType())
      return failure();
    rewriter.replaceOpWithNewOp<GeluOp>(root, x.getType(), x, rewriter.getStringAttr("none"));
    return success();
  }
};

struct CpcFuseGeluPass : cpc::impl::CpcFuseGeluBase<CpcFuseGeluPass> {
  void runOnOperation() override {
    RewritePatternSet patterns(&getContext());
    patterns.add<FuseErfGelu>(&getContext());
    if (failed(applyPatternsAndFoldGreedily(getOperation(), std::move(patterns))))
      signalPassFailure();
  }
};
} // namespace
