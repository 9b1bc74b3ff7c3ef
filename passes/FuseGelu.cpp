//===- FuseGelu.cpp - erf / tanh expansions of GELU -> cpc.gelu ------------===//
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

/// Is `v` == x^3 (x*(x*x), (x*x)*x or pow(x, 3))? Returns x.
Value matchCube(Value v) {
  if (auto pow = v.getDefiningOp<PowOp>())
    return isSplatFloat(pow.getRhs(), 3.0) ? pow.getLhs() : Value();
  auto mul = v.getDefiningOp<MulOp>();
  if (!mul)
    return {};
  for (auto [a, b] : {std::pair(mul.getLhs(), mul.getRhs()), std::pair(mul.getRhs(), mul.getLhs())}) {
    auto square = b.getDefiningOp<MulOp>();
    if (square && square.getLhs() == a && square.getRhs() == a)
      return a;
  }
  return {};
}

/// Is `v` == tanh(sqrt(2/pi) * (x + 0.044715 * x^3))? Returns x.
Value matchTanhOfCubicInput(Value v) {
  auto tanh = v.getDefiningOp<TanhOp>();
  if (!tanh)
    return {};
  double tol = constantTolerance(tanh.getInput());
  constexpr double kSqrt2OverPi = 0.7978845608028654;
  Value inner = otherOperandIf(tanh.getInput().getDefiningOp<MulOp>(),
                               [&](Value c) { return isSplatFloat(c, kSqrt2OverPi, tol); });
  auto add = inner ? inner.getDefiningOp<AddOp>() : AddOp();
  if (!add)
    return {};
  for (auto [x, term] : {std::pair(add.getLhs(), add.getRhs()), std::pair(add.getRhs(), add.getLhs())}) {
    Value cube = otherOperandIf(term.getDefiningOp<MulOp>(), [&](Value c) { return isSplatFloat(c, 0.044715, tol); });
    if (cube && matchCube(cube) == x)
      return x;
  }
  return {};
}

/// Is `v` == 1 + erf(x / sqrt(2)) (exact GELU) or 1 + tanh(...) (tanh GELU)? Returns x and sets
/// `approximate`.
Value matchOnePlusGate(Value v, GeluApproximation &approximate) {
  Value gate = otherOperandIf(v.getDefiningOp<AddOp>(), [](Value c) { return isSplatFloat(c, 1.0); });
  if (!gate)
    return {};
  if (Value x = matchErfOfScaledInput(gate)) {
    approximate = GeluApproximation::None;
    return x;
  }
  Value x = matchTanhOfCubicInput(gate);
  if (x)
    approximate = GeluApproximation::Tanh; // set only on a match: callers try several operand orders
  return x;
}

/// Matches (x * (1 + gate(x))) * 0.5 and (x * 0.5) * (1 + gate(x)) with gate erf or tanh.
struct FuseGeluPattern : OpRewritePattern<MulOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(MulOp root, PatternRewriter &rewriter) const override {
    Value x;
    GeluApproximation approximate = GeluApproximation::None;
    // Form A: mul(mul(x, 1+erf), 0.5).
    if (Value inner = otherOperandIf(root, [](Value c) { return isSplatFloat(c, 0.5); })) {
      if (auto mul = inner.getDefiningOp<MulOp>()) {
        for (auto [a, b] : {std::pair(mul.getLhs(), mul.getRhs()), std::pair(mul.getRhs(), mul.getLhs())})
          if (!x && a && matchOnePlusGate(b, approximate) == a)
            x = a;
      }
    }
    // Form B: mul(mul(x, 0.5), 1+erf).
    if (!x) {
      for (auto [a, b] : {std::pair(root.getLhs(), root.getRhs()), std::pair(root.getRhs(), root.getLhs())}) {
        Value half = otherOperandIf(a.getDefiningOp<MulOp>(), [](Value c) { return isSplatFloat(c, 0.5); });
        if (!x && half && matchOnePlusGate(b, approximate) == half)
          x = half;
      }
    }
    if (!x || x.getType() != root.getType())
      return failure();
    rewriter.replaceOpWithNewOp<GeluOp>(root, x.getType(), x, GeluApproximationAttr::get(rewriter.getContext(), approximate));
    return success();
  }
};

struct CpcFuseGeluPass : cpc::impl::CpcFuseGeluBase<CpcFuseGeluPass> {
  void runOnOperation() override {
    RewritePatternSet patterns(&getContext());
    patterns.add<FuseGeluPattern>(&getContext());
    if (failed(applyPatternsAndFoldGreedily(getOperation(), std::move(patterns))))
      signalPassFailure();
  }
};
} // namespace
