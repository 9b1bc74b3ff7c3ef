//===- MatMulStrategies.h - how 2D and 3D tensor parallelism multiply ------===//
//
// A matmul whose rhs is a matrix split over the 2D axes (tp_row x tp_col) is computed by SUMMA
// (Summa.cpp), one split over the 3D axes (tp_wt, tp_in, tp_out) by the 3D algorithm
// (Matmul3D.cpp); propagation asks them for the result's layout and partitioning for the
// per-rank steps, instead of the matmul's factor rule.
//
#ifndef CPC_PASSES_MATMULSTRATEGIES_H
#define CPC_PASSES_MATMULSTRATEGIES_H

#include "passes/Sharding.h"

#include "mlir/IR/Builders.h"

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

/// Where a matmul's factors sit in its operands: L (rows of C: batch dims and M) in A and C, K in
/// A and B, N in B and C. B is a matrix (rank 2).
struct MatMulDims {
  int64_t lk, lm, rk, rn, rank; // rank: of A and C
  /// The dim of C holding A's dim `d` (not K).
  int64_t resultDimOfLhs(int64_t d) const { return d == lm ? rank - 2 : d; }
};

/// The dims of `op`, when its rhs is a matrix and its lhs has the result's rank.
std::optional<MatMulDims> matMulDims(MatMulOp op);

/// What the strategies' rewriters share: the matmul, its mesh and dims, a builder before it.
class MatMulRewriter {
protected:
  MatMulRewriter(MatMulOp op, const Mesh &mesh, const PartitionHooks &hooks, const MatMulDims &dims)
      : op_(op), mesh_(mesh), hooks_(hooks), dims_(dims), b_(op) {}

  /// `op`'s result, `op` given the matmul's labels (its pipeline chunk, forward or backward) so
  /// that the steps are placed where the matmul was.
  mlir::Value labelled(mlir::Operation *op);
  /// Checks that `c` is the block of the matmul's result that `l` gives this rank and records
  /// `l` (and the attribute --dump-sharding prints).
  mlir::FailureOr<mlir::Value> finish(mlir::Value c, const Layout &l, llvm::StringRef strategy);

  MatMulOp op_;
  const Mesh &mesh_;
  const PartitionHooks &hooks_;
  MatMulDims dims_;
  mlir::OpBuilder b_;
};

/// Whether `op`'s rhs, laid out as `b`, is one that a strategy multiplies by (split over the 2D
/// or the 3D axes); the result's layout is then the strategy's, not the factor rule's.
bool hasStrategyRhs(MatMulOp op, const Mesh &mesh, const Layout &b);

/// The layout the strategy gives `op`'s result for operands laid out as `a`, `b` (`c`: the
/// result's layout so far); none when it does not apply (yet).
std::optional<Layout> strategyResultLayout(MatMulOp op, const Mesh &mesh, const Layout &a, const Layout &b,
                                           const Layout &c);

/// Partitions `op` by its strategy: the steps before `op`, their result laid out (the caller
/// replaces and erases `op`); a null value when no strategy applies.
mlir::FailureOr<mlir::Value> partitionByStrategy(MatMulOp op, const Mesh &mesh, const PartitionHooks &hooks);

/// Whether `mesh` has the 3D tensor-parallel axes (tp_wt, tp_in, tp_out of one size q > 1).
bool has3DAxes(const Mesh &mesh);
bool has3DRhs(MatMulOp op, const Mesh &mesh, const Layout &b);
std::optional<Layout> matmul3DResultLayout(MatMulOp op, const Mesh &mesh, const Layout &a, const Layout &b,
                                           const Layout &c);
mlir::FailureOr<mlir::Value> partitionMatmul3D(MatMulOp op, const Mesh &mesh, const PartitionHooks &hooks);

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
