//===- Sharding.h - layouts shared by the sharding passes -----------------===//
//
// cpc-propagate-sharding, cpc-partition and cpc-data-parallel (mesh + batch seeds + the two)
// talk through attributes on the IR, in global types: `cpc.sharding` on function arguments and
// `cpc.shardings` (one #cpc.sharding per result) on ops give the layout of every split or
// partial value. Propagation writes them; partitioning reads them and rewrites the function
// into the per-rank program, where the same attributes then describe the local values.
//
#ifndef CPC_PASSES_SHARDING_H
#define CPC_PASSES_SHARDING_H

#include "dialects/cpc/CpcDialect.h"
#include "dialects/cpc/ShardingRules.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"

#include <string>

namespace cpc {

/// The attribute names: on function arguments, and on op results (an array, one per result).
inline constexpr llvm::StringLiteral kArgShardingAttr = "cpc.sharding";
inline constexpr llvm::StringLiteral kResultShardingsAttr = "cpc.shardings";

using MeshAxes = llvm::SmallVector<std::string>;

/// Mesh axes per dim of a value (empty: the dim is whole) and the axes it is a partial sum over.
struct Layout {
  llvm::SmallVector<MeshAxes> dims;
  MeshAxes partial;

  static Layout whole(int64_t rank) {
    Layout l;
    l.dims.resize(rank);
    return l;
  }
  static Layout fromAttr(ShardingAttr attr);
  ShardingAttr toAttr(mlir::FlatSymbolRefAttr mesh) const;
  bool isSplit() const {
    return llvm::any_of(dims, [](const MeshAxes &d) { return !d.empty(); });
  }
  bool isSharded() const { return isSplit() || !partial.empty(); }
  /// "[dp, -]" for messages.
  std::string describe() const;
};

/// A mesh and the sizes of its axes.
class Mesh {
public:
  explicit Mesh(MeshOp op) : op_(op) {}
  MeshOp op() const { return op_; }
  mlir::FlatSymbolRefAttr ref() const;
  /// How many blocks `axes` split a dim into: the product of their sizes.
  int64_t parts(llvm::ArrayRef<std::string> axes) const;
  bool hasAxis(llvm::StringRef name) const { return op_.getAxisSize(name) > 0; }

private:
  mutable MeshOp op_;
};

/// The mesh that the annotations in `func` (argument and result attributes, cpc.shard ops) refer
/// to: a null MeshOp when there are none. Fails when they name an unknown mesh or several.
mlir::FailureOr<MeshOp> findAnnotatedMesh(mlir::func::FuncOp func);

/// The layout `attr` gives `v`, checked against the mesh and the (global) type of `v`; `where`
/// gets the diagnostic.
mlir::FailureOr<Layout> readLayout(ShardingAttr attr, mlir::Value v, const Mesh &mesh, mlir::Operation *where);

/// Gives each factor of `factors` (a rule's factor per dim) the axes that `l` splits its dim
/// over, unless the factor already has axes or another factor has one of those axes.
void collectFactorAxes(llvm::MutableArrayRef<MeshAxes> factorAxes, const Layout &l, llvm::ArrayRef<int64_t> factors);

/// The sizes of the dims that share each factor of `rule` (read them while types are global).
llvm::SmallVector<llvm::SmallVector<int64_t>> factorDimSizes(const ShardingRule &rule, mlir::Operation *op);

/// Leaves whole the factors whose dims do not all split evenly over their axes (a reshape of a
/// split [4, 3] to [3, 4]): their operands are then gathered rather than left unevenly split.
void dropIndivisibleFactors(llvm::MutableArrayRef<MeshAxes> factorAxes,
                            llvm::ArrayRef<llvm::SmallVector<int64_t>> sizes, const Mesh &mesh);

/// Of the operands flagged in `partialIn`, those that `op` may consume as partial sums (it is
/// linear in them); the others must be all-reduced first. Ops without a rule consume none.
llvm::SmallVector<bool> partialOperandsKept(mlir::Operation *op, bool hasRule, llvm::ArrayRef<bool> partialIn);

/// The layout of result `index` of an op whose factors are split over `factorAxes`: dims of
/// split factors that divide evenly; a partial sum over a split factor that operands have and the
/// result lacks (matmul K, the batch of a weight gradient), else over `passedPartial` (the axes
/// of a partial operand the op is linear in).
Layout resultLayout(const ShardingRule &rule, unsigned index, mlir::RankedTensorType type,
                    llvm::ArrayRef<MeshAxes> factorAxes, llvm::ArrayRef<std::string> passedPartial, const Mesh &mesh);

/// Propagates the seeds of `func` (annotated arguments, results with `cpc.shardings`, cpc.shard
/// ops) over the ops' factor rules, both directions, to a fixpoint, and records the layout of
/// every split or partial value. Arguments without a seed, parameters and states stay whole.
mlir::LogicalResult propagateShardings(mlir::func::FuncOp func, const Mesh &mesh);

/// Rewrites `func`, annotated by propagateShardings, into the program each rank of `mesh` runs:
/// local types, cpc.shard_slice where a whole value meets a split use, cpc.all_gather where a
/// split value meets a use that needs it whole, cpc.all_reduce where a partial sum meets an op
/// that is not linear in it, a result or an assign.
mlir::LogicalResult partitionFunction(mlir::func::FuncOp func, const Mesh &mesh);

} // namespace cpc

#endif
