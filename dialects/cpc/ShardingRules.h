//===- ShardingRules.h - how each op's dims may be split over a mesh ------===//
//
// Shardy-style factor rules (ShardingRuleOpInterface returns one per op): an op has factors,
// each with a size and a kind, and every dim of every operand and result is the product of
// some of them, major first. Dims sharing a factor are split alike; a dim of several factors
// (a reshape's [B, N, 3D] -> [B, N, 3, H, Dh]) is split by giving mesh axes to its factors
// major first. A factor that an operand has and a result lacks is reduced: splitting it leaves
// partial values in that result. One propagation and one partitioning work off these rules.
//
#ifndef CPC_DIALECTS_CPC_SHARDINGRULES_H
#define CPC_DIALECTS_CPC_SHARDINGRULES_H

#include "dialects/cpc/CpcEnums.h"

#include "mlir/IR/Operation.h"
#include "llvm/ADT/SmallVector.h"

#include <optional>
#include <string>

namespace cpc {

/// What splitting a factor over mesh axes means (Shardy's factor types).
enum class FactorKind {
  PassThrough,     // in operands and results: every dim of it split alike, no communication
  Reduction,       // in operands only (matmul's K, a summed dim): results become partial values
  NeedReplication, // must stay whole (softmax's axis, a sort axis, a normalized or spatial dim)
  Permutation,     // splitting it would move data between ranks (concat's axis, a sliced or
                   // padded dim): kept whole here, its operands gathered
};

struct ShardingRule {
  struct Factor {
    int64_t size = 1;
    FactorKind kind = FactorKind::PassThrough;
    ReductionKind reduction = ReductionKind::Sum; // how a split reduction's partial results combine
  };
  /// The factors of one dim, major first; their sizes multiply to the dim's size (none for a
  /// dim of size 1).
  using DimFactors = llvm::SmallVector<int64_t, 2>;
  using TensorFactors = llvm::SmallVector<DimFactors>;

  llvm::SmallVector<Factor> factors;
  llvm::SmallVector<TensorFactors> operands, results;

  int64_t numFactors() const { return factors.size(); }
  /// Whether propagation and partitioning may give the factor mesh axes.
  bool maySplit(int64_t f) const {
    return factors[f].kind == FactorKind::PassThrough || factors[f].kind == FactorKind::Reduction;
  }
  /// Whether some operand has factor `f`.
  bool inOperands(int64_t f) const;
  /// Shardy's notation: "([i, j], [j, k]) -> ([i, k]) {i=4, j=8, k=2} reduction={j}"; a dim of
  /// several factors prints them together ("ij"), size-1 dims print as "[]".
  std::string describe() const;
};

/// Builds a rule dim by dim: ops create factors and append them to dims, major first.
class ShardingRuleBuilder {
public:
  explicit ShardingRuleBuilder(mlir::Operation *op);
  int64_t factor(int64_t size, FactorKind kind = FactorKind::PassThrough,
                 ReductionKind reduction = ReductionKind::Sum);
  void operand(unsigned i, int64_t dim, int64_t f) { rule_.operands[i][dim].push_back(f); }
  void result(unsigned i, int64_t dim, int64_t f) { rule_.results[i][dim].push_back(f); }
  /// Every dim (of size > 1) left without factors gets one of its own of `kind`.
  void wholeDims(FactorKind kind);
  /// Completes the rule: dims left without factors need replication; pass-through factors
  /// that no result has are reductions.
  ShardingRule finish();

private:
  mlir::Operation *op_;
  ShardingRule rule_;
};

/// The rule of `op` (its ShardingRuleOpInterface), or none: its values then stay whole.
std::optional<ShardingRule> getShardingRule(mlir::Operation *op);

/// Whether `op` turns operand `index`, a partial value of `kind`, into partial results of that
/// kind (ShardingRuleOpInterface::propagatesPartial); false for ops without the interface.
bool propagatesPartial(mlir::Operation *op, unsigned index, ReductionKind kind);

/// The rule of elementwise ops with numpy broadcasting (the interface's default); the dims in
/// `wholeDims` of the result (an op's axis) need replication.
ShardingRule elementwiseShardingRule(mlir::Operation *op, llvm::ArrayRef<int64_t> wholeDims = {});

/// Checks that every dim's factor sizes multiply to its size: the invariant that propagation
/// and partitioning rely on. Returns a description of the first mismatch, or "".
std::string checkShardingRule(const ShardingRule &rule, mlir::Operation *op);

} // namespace cpc

#endif
