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
#include "mlir/IR/BuiltinOps.h"

#include <string>

namespace cpc {

/// The attribute names: on function arguments, and on op results (an array, one per result).
inline constexpr llvm::StringLiteral kArgShardingAttr = "cpc.sharding";
inline constexpr llvm::StringLiteral kResultShardingsAttr = "cpc.shardings";

using MeshAxes = llvm::SmallVector<std::string>;

/// The names cpc-tensor-parallel gives the sub-axes of tensor parallelism beyond 1D (tp_dep x
/// tp_row x tp_col for 2D and 2.5D, Colossal-AI's PARALLEL_2D_ROW / COL and 2P5D_DEP), each
/// with its MeshAxisRole: the strategies find the axes by role, never by these names. The batch
/// is split over the depth and row axes as over dp.
inline constexpr llvm::StringLiteral kTpRowAxis = "tp_row";
inline constexpr llvm::StringLiteral kTpColAxis = "tp_col";
inline constexpr llvm::StringLiteral kTpDepthAxis = "tp_dep";
/// 3D tensor parallelism's axes (q x q x q, Colossal-AI's 3D weight, input and output modes):
/// activations' rows are split over tp_wt and one of the other two, their features over the
/// third; consecutive Linears swap tp_in and tp_out. The batch is split over tp_wt and tp_in.
inline constexpr llvm::StringLiteral kTpWeightAxis = "tp_wt";
inline constexpr llvm::StringLiteral kTpInputAxis = "tp_in";
inline constexpr llvm::StringLiteral kTpOutputAxis = "tp_out";

/// Mesh axes per dim of a value (empty: the dim is whole) and the axes over which it is a
/// partial value, combined by `reduction` (sum or max).
struct Layout {
  llvm::SmallVector<MeshAxes> dims;
  MeshAxes partial;
  ReductionKind reduction = ReductionKind::Sum;

  static Layout whole(int64_t rank) {
    Layout l;
    l.dims.resize(rank);
    return l;
  }
  static Layout fromAttr(ShardingAttr attr);
  ShardingAttr toAttr(mlir::FlatSymbolRefAttr mesh, int64_t priority = 0) const;
  bool isSplit() const {
    return llvm::any_of(dims, [](const MeshAxes &d) { return !d.empty(); });
  }
  bool isSharded() const { return isSplit() || !partial.empty(); }
  /// Whether `axis` splits a dim or is a partial axis.
  bool uses(llvm::StringRef axis) const;
  void clearPartial() {
    partial.clear();
    reduction = ReductionKind::Sum;
  }
  /// "[dp, -] partial max(tp)" for messages.
  std::string describe() const;
  bool operator==(const Layout &o) const { return dims == o.dims && partial == o.partial && reduction == o.reduction; }
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
  /// Whether `axes` follow the mesh's order (one collective over them numbers its members, and
  /// so the blocks it moves, major to minor as the dim does).
  bool inOrder(llvm::ArrayRef<std::string> axes) const;
  /// The position of axis `name` in the mesh (-1 when absent).
  int64_t axisIndex(llvm::StringRef name) const;
  /// The role of axis `name` (none when it has none).
  MeshAxisRole roleOf(llvm::StringRef name) const { return op_.getAxisRole(name); }
  /// The axis with `role`, "" when the mesh has none.
  std::string axisWith(MeshAxisRole role) const { return op_.getAxisWithRole(role).str(); }
  /// The size of the axis with `role` (1 when the mesh has none).
  int64_t sizeOf(MeshAxisRole role) const;

private:
  mutable MeshOp op_;
};

/// Whether `user` (of parameter `name`) is part of its update: AdamW, or an op whose results only
/// go to the parameter's assign (fp16's skip on overflow). A parameter stored split reads its
/// stored block there and a cpc.shard of its read layout everywhere else.
bool isParameterUpdate(mlir::Operation *user, llvm::StringRef name);

/// The axes the batch of the inputs is split over, in mesh order: dp, the tensor_depth and
/// tensor_row axes (2D, 2.5D), the tensor_weight and tensor_input axes (3D) where the mesh has
/// them with more than one rank.
MeshAxes batchAxes(const Mesh &mesh);

/// The batch seeds cpc-data-parallel starts from: dim 0 of every user input over the batch axes,
/// gradient accumulators partial over those that only split the batch (dp, tp_dep).
void seedBatch(mlir::func::FuncOp func, const Mesh &mesh);

/// An axis a pass needs on the mesh: its name, size and role.
struct MeshAxisSpec {
  llvm::StringRef name;
  int64_t size;
  MeshAxisRole role = MeshAxisRole::None;
};

/// The module's @mesh, which must have each axis of `axes` (name, size, and the role when it is
/// not none); when the module has none it is created with exactly those axes, in that order
/// (what the seeding passes share). Emits an error on a mismatch.
mlir::FailureOr<MeshOp> getOrCreateMesh(mlir::ModuleOp module, llvm::ArrayRef<MeshAxisSpec> axes);

/// The mesh that the annotations in `func` (argument and result attributes, cpc.shard ops) refer
/// to: a null MeshOp when there are none. Fails when they name an unknown mesh or several.
mlir::FailureOr<MeshOp> findAnnotatedMesh(mlir::func::FuncOp func);

/// The layout `attr` gives `v`, checked against the mesh and the (global) type of `v`; `where`
/// gets the diagnostic.
mlir::FailureOr<Layout> readLayout(ShardingAttr attr, mlir::Value v, const Mesh &mesh, mlir::Operation *where);

/// The mesh axes of each factor of one op.
using FactorAxes = llvm::SmallVector<MeshAxes>;

/// Gives the factors of a value's dims (`dims`, from the op's rule) the axes that `l` splits
/// those dims over: a dim's axes go to its factors major first, each factor taking axes while
/// their product divides its size and passing on to the next once it is exactly covered.
/// Factors that already have axes, that must stay whole, or whose axes another factor of the op
/// has, are left as they are.
void collectFactorAxes(FactorAxes &factorAxes, const Layout &l, llvm::ArrayRef<ShardingRule::DimFactors> dims,
                       const ShardingRule &rule, const Mesh &mesh);

/// Drops the factor splits that some value of the op could not hold as blocks: a factor that
/// must stay whole, whose size its axes do not divide, or that is minor to a factor of the
/// same dim that is not split completely (splitting H of [3, H] with 3 whole is not a block).
void legalizeFactorAxes(FactorAxes &factorAxes, const ShardingRule &rule, const Mesh &mesh);

/// The (legal) factor axes of `op` from the layouts of its values: `resultOf` for results,
/// `operandOf` for operands, results' claims first when `resultsFirst`.
FactorAxes factorAxesOf(mlir::Operation *op, const ShardingRule &rule, const Mesh &mesh, bool resultsFirst,
                        llvm::function_ref<Layout(mlir::Value)> resultOf,
                        llvm::function_ref<Layout(mlir::OpOperand &)> operandOf);

/// Operand `index` laid out as the factor axes say: its dims from them, its partial from `base`.
Layout operandLayout(const ShardingRule &rule, unsigned index, llvm::ArrayRef<MeshAxes> factorAxes, Layout base);

/// The axes of a dim made of `factors`: theirs, major first.
MeshAxes dimAxes(llvm::ArrayRef<int64_t> factors, llvm::ArrayRef<MeshAxes> factorAxes);

/// Of the operands of `op` (their current layouts), those it may take as partial values (it
/// passes them on, ShardingRuleOpInterface::propagatesPartial); the other partial ones must be
/// reduced first. Add and sub take partial operands only when every operand is partial alike.
llvm::SmallVector<bool> partialOperandsKept(mlir::Operation *op, bool hasRule, llvm::ArrayRef<Layout> operands);

/// Whether `op`'s result is summed with other partial sums alike: passed on through ops that
/// pass a partial sum on (a widening cast, a scale) to an add-like op whose every operand is a
/// partial sum over `axes` (`partialOf` says a value's), as a weight's gradients from its two
/// uses (a tied embedding's). Such a value is reduced once after the sum, not each term before.
bool summedWithPartials(mlir::Operation *op, const MeshAxes &axes,
                        llvm::function_ref<MeshAxes(mlir::Value)> partialOf);

/// Removes `axes` from every factor of `factorAxes`.
void dropFactorAxes(FactorAxes &factorAxes, const MeshAxes &axes);

/// The layout of result `index` of an op whose factors are split over `factorAxes` (legal): its
/// dims' axes; partial over the split factors that operands have and it lacks (matmul's K, the
/// rows of a layer norm's scale gradient), combined as the factor says, else as `passed` (the
/// operand the op passes on) is.
Layout resultLayout(const ShardingRule &rule, unsigned index, llvm::ArrayRef<MeshAxes> factorAxes,
                    const Layout *passed);

/// Propagates the seeds of `func` (annotated arguments, results with `cpc.shardings`, cpc.shard
/// ops) over the ops' factor rules, both directions, to a fixpoint, and records the layout of
/// every split or partial value. Arguments without a seed, parameters and states stay whole.
mlir::LogicalResult propagateShardings(mlir::func::FuncOp func, const Mesh &mesh);

/// Rewrites `func`, annotated by propagateShardings, into the program each rank of `mesh` runs:
/// local types, cpc.shard_slice where a whole value meets a split use, cpc.all_gather where a
/// split value meets a use that needs it whole, cpc.all_reduce where a partial sum meets an op
/// that is not linear in it, a result or an assign.
/// `splits` holds how the functions partitioned before laid out each variable they read (null:
/// whole): a variable is read alike in every function, since it is stored once.
using VariableSplits = llvm::DenseMap<mlir::Operation *, ShardingAttr>;

/// Lays out `variable`, which `read` reads split as `sharding` (null: whole) into blocks of type
/// `local`: the variable is stored so and the read returns a block. Returns why not ("" when
/// done): a function partitioned earlier read it otherwise, or an earlier pass split it.
std::string splitVariable(mlir::Operation *read, VariableOp variable, ShardingAttr sharding,
                          mlir::RankedTensorType local, VariableSplits &splits);
mlir::LogicalResult partitionFunction(mlir::func::FuncOp func, const Mesh &mesh, VariableSplits &splits);

} // namespace cpc

#endif
