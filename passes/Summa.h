//===- Summa.h - the 2D (SUMMA) partitioning strategy of a matmul ---------===//
#ifndef CPC_PASSES_SUMMA_H
#define CPC_PASSES_SUMMA_H

#include "passes/Sharding.h"

namespace cpc {

/// What cpc-partition lends a matmul strategy: the layouts it tracks and its resharding.
struct PartitionHooks {
  /// The partitioned layout of a value (operands are partitioned already).
  llvm::function_ref<Layout(mlir::Value)> current;
  /// The layout propagation gave a value (global).
  llvm::function_ref<Layout(mlir::Value)> propagated;
  /// `v` laid out as `want` (dims) for `user`, built before it.
  llvm::function_ref<mlir::FailureOr<mlir::Value>(mlir::Value v, const Layout &want, mlir::Operation *user)> reshard;
  /// Records the partitioned layout of a value the strategy made.
  llvm::function_ref<void(mlir::Value, const Layout &)> setCurrent;
};

/// Whether `mesh` has the 2D tensor-parallel axes (tp_row x tp_col, both of one size q > 1).
bool hasSummaAxes(const Mesh &mesh);

/// Whether `op`'s rhs, laid out as `b`, is a matrix split over the 2D axes one per dim (SUMMA
/// then decides the result's layout, not the matmul's factor rule).
bool hasSummaRhs(MatMulOp op, const Mesh &mesh, const Layout &b);

/// The layout SUMMA gives `op`'s result for operands laid out as `a` and `b` (`c`: the result's
/// layout so far, which picks between the gradients' two forms); none when it does not apply.
std::optional<Layout> summaResultLayout(MatMulOp op, const Mesh &mesh, const Layout &a, const Layout &b,
                                        const Layout &c);

/// Partitions `op` as SUMMA/// Partitions `op` as SUMMA (Summa.cpp) when its operands are split over the 2D tensor-parallel
/// axes, one per matrix dim: builds the q steps of broadcasts (and reduces) and local matmuls
/// before `op` and returns their sum, whose layout it records (the caller replaces and erases
/// `op`). A null value when the strategy does not apply.
mlir::FailureOr<mlir::Value> partitionSumma(MatMulOp op, const Mesh &mesh, const PartitionHooks &hooks);

} // namespace cpc

#endif
