//===- ShardingRules.h - how each op's dims may be split over a mesh ------===//
//
// Shardy-style factor rules: every dim of every operand and result is mapped to a factor (or
// to none, when it must stay whole). Dims sharing a factor are split the same way; a factor
// found only in operands is a reduction: splitting it leaves partial sums in the results. One
// propagation and one partitioning algorithm work off these rules for every op.
//
#ifndef CPC_DIALECTS_CPC_SHARDINGRULES_H
#define CPC_DIALECTS_CPC_SHARDINGRULES_H

#include "mlir/IR/Operation.h"
#include "llvm/ADT/SmallVector.h"

#include <optional>

namespace cpc {

struct ShardingRule {
  static constexpr int64_t kNone = -1;                    // this dim cannot be split
  llvm::SmallVector<llvm::SmallVector<int64_t>> operands; // factor per operand dim
  llvm::SmallVector<llvm::SmallVector<int64_t>> results;  // factor per result dim
  llvm::SmallVector<bool> reduction;                      // per factor: absent from every result
  int64_t numFactors() const { return reduction.size(); }
};

/// The rule of `op`, or none when cpc knows no rule (its values then stay whole).
std::optional<ShardingRule> getShardingRule(mlir::Operation *op);

/// Whether `op` is linear in operand `index` when the other operands are whole, so that it may
/// consume a partial sum and produce one (add/sub need every float operand partial alike).
bool propagatesPartialSums(mlir::Operation *op, unsigned index);

} // namespace cpc

#endif
