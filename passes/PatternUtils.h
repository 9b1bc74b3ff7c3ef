//===- PatternUtils.h - small matchers shared by cpc rewrite patterns -----===//
#ifndef CPC_PASSES_PATTERNUTILS_H
#define CPC_PASSES_PATTERNUTILS_H

#include "dialects/cpc/CpcDialect.h"
#include "mlir/IR/Matchers.h"
#include "mlir/Transforms/GreedyPatternRewriteDriver.h"

namespace cpc {

/// True when `v` is a constant whose elements all equal `expected` within `tol` (relative).
inline bool isSplatFloat(mlir::Value v, double expected, double tol = 1e-6) {
  mlir::Attribute attr;
  if (!mlir::matchPattern(v, mlir::m_Constant(&attr)))
    return false;
  auto dense = llvm::dyn_cast<mlir::DenseFPElementsAttr>(attr);
  if (!dense || !dense.isSplat())
    return false;
  double got = dense.getSplatValue<llvm::APFloat>().convertToDouble();
  return std::abs(got - expected) <= tol * std::max(1.0, std::abs(expected));
}

/// Splat float value of a constant, if `v` is one.
inline std::optional<double> getSplatFloat(mlir::Value v) {
  mlir::Attribute attr;
  if (!mlir::matchPattern(v, mlir::m_Constant(&attr)))
    return std::nullopt;
  auto dense = llvm::dyn_cast<mlir::DenseFPElementsAttr>(attr);
  if (!dense || !dense.isSplat())
    return std::nullopt;
  return dense.getSplatValue<llvm::APFloat>().convertToDouble();
}

/// For a commutative binary op: if one operand satisfies `pred`, returns the other one.
template <typename OpT, typename Pred>
mlir::Value otherOperandIf(OpT op, Pred pred) {
  if (!op)
    return {};
  if (pred(op.getRhs()))
    return op.getLhs();
  if (pred(op.getLhs()))
    return op.getRhs();
  return {};
}

/// Applies `patterns` to `ops` alone, through the greedy driver: nothing else is folded or
/// rewritten (what a fusion pass asks: its rewrites, not a canonicalization of the function).
inline mlir::LogicalResult rewriteOnly(llvm::ArrayRef<mlir::Operation *> ops, mlir::RewritePatternSet &&patterns) {
  mlir::GreedyRewriteConfig config;
  config.strictMode = mlir::GreedyRewriteStrictness::ExistingOps;
  return mlir::applyOpPatternsAndFold(ops, std::move(patterns), config);
}

} // namespace cpc

#endif
