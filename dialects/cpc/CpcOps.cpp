//===- CpcOps.cpp - shape rules and verifiers of cpc ops ------------------===//
// Over 800 lines: the verifiers and shape functions of the ops in CpcOps.td, section by section as
// the .td; split when a section grows (the fused ops already live in FusedOps.cpp).
//
// Each op's static shape rule is here, in its inferReturnTypes (checked against the declared
// result type by InferTypeOpInterface) or verify() when the result type is given explicitly.
//
#include "dialects/cpc/CpcDialect.h"
#include "dialects/cpc/Variables.h"
#include "support/CheckedSize.h"
#include "support/ShapeMath.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/PatternMatch.h"
#include "llvm/ADT/StringSet.h"

using namespace mlir;
using namespace cpc;

namespace {
RankedTensorType rankedOrNull(Type t) { return llvm::dyn_cast<RankedTensorType>(t); }

shapes::Shape shapeOf(RankedTensorType t) { return shapes::Shape(t.getShape().begin(), t.getShape().end()); }

/// Element count; -1 when it overflows (verified types never do: see TensorSizeLimit).
int64_t numElements(ArrayRef<int64_t> shape) { return checkedNumElements(shape).value_or(-1); }

std::string shapeStr(ArrayRef<int64_t> shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i)
    s += (i ? "," : "") + std::to_string(shape[i]);
  return s + "]";
}

LogicalResult checkAxis(std::optional<Location> loc, int64_t axis, int64_t rank,
                        StringRef what = "axis") {
  if (axis < 0 || axis >= rank)
    return emitShapeError(loc, what + " " + Twine(axis) + " out of range for rank " + Twine(rank));
  return success();
}
} // namespace

//===----------------------------------------------------------------------===//
// Values with no operands.
//===----------------------------------------------------------------------===//

OpFoldResult ConstantOp::fold(FoldAdaptor) { return getValue(); }

OpFoldResult SubOp::fold(FoldAdaptor adaptor) {
  auto lhs = llvm::dyn_cast_if_present<DenseElementsAttr>(adaptor.getLhs());
  auto rhs = llvm::dyn_cast_if_present<DenseElementsAttr>(adaptor.getRhs());
  auto type = llvm::cast<RankedTensorType>(getType());
  // f32/f64 only: APFloat's one rounding is the kernels' (16-bit types compute in f32 there).
  if (!lhs || !rhs || !lhs.isSplat() || !rhs.isSplat() || type.getNumElements() != 1 ||
      !(type.getElementType().isF32() || type.getElementType().isF64()))
    return {};
  APFloat difference = lhs.getSplatValue<APFloat>();
  difference.subtract(rhs.getSplatValue<APFloat>(), APFloat::rmNearestTiesToEven);
  return DenseElementsAttr::get(type, difference);
}

OpFoldResult PowOp::fold(FoldAdaptor adaptor) {
  auto exponent = llvm::dyn_cast_if_present<DenseElementsAttr>(adaptor.getRhs());
  if (exponent && exponent.isSplat() && getLhs().getType() == getType() &&
      exponent.getSplatValue<APFloat>().isExactlyValue(1.0))
    return getLhs();
  return {};
}

/// The mesh `meshRef` names, or a diagnostic on `op`.
static FailureOr<MeshOp> lookupMesh(Operation *op, FlatSymbolRefAttr meshRef, SymbolTableCollection &symbols) {
  auto mesh = symbols.lookupNearestSymbolFrom<MeshOp>(op, meshRef);
  if (!mesh)
    return op->emitOpError("refers to unknown mesh ") << meshRef;
  return mesh;
}

/// The product of the sizes of mesh axes `axes`, or a diagnostic naming an axis `mesh` lacks.
static FailureOr<int64_t> axesSize(Operation *op, MeshOp mesh, ArrayRef<StringRef> axes) {
  int64_t parts = 1;
  for (StringRef axis : axes) {
    int64_t size = mesh.getAxisSize(axis);
    if (size < 0)
      return op->emitOpError("mesh '") << mesh.getSymName() << "' has no axis '" << axis << "'";
    parts *= size;
  }
  return parts;
}

/// The number of ranks in a collective's group: the product of its mesh axes' sizes. Fails with
/// a diagnostic on an unknown mesh or axis.
static FailureOr<int64_t> collectiveGroupSize(Operation *op, FlatSymbolRefAttr meshRef, ArrayAttr axes,
                                              SymbolTableCollection &symbols) {
  FailureOr<MeshOp> mesh = lookupMesh(op, meshRef, symbols);
  if (failed(mesh))
    return failure();
  SmallVector<StringRef> names;
  for (Attribute a : axes)
    names.push_back(llvm::cast<StringAttr>(a).getValue());
  return axesSize(op, *mesh, names);
}

/// A sharded variable (parameter or state): `global_shape` and `sharding` come together, and the
/// value is either a 1-D block of the flattened variable (ZeRO-3) or a block of the global rank
/// split dim by dim, never partial.
static LogicalResult verifyShardedVariable(Operation *op, RankedTensorType type, DenseI64ArrayAttr globalShape,
                                           ShardingAttr sharding) {
  if (bool(globalShape) != bool(sharding))
    return op->emitOpError("a sharded variable needs both global_shape and sharding");
  if (!sharding)
    return success();
  bool flat = type.getRank() == 1 && sharding.getDimAxes().size() == 1;
  bool perDim = type.getRank() == (int64_t)globalShape.size() && (int64_t)sharding.getDimAxes().size() == type.getRank();
  if ((!flat && !perDim) || !sharding.getPartialAxisNames().empty())
    return op->emitOpError("a sharded variable is a 1-D block of the flattened value or a block split dim by dim");
  return success();
}

/// Checks that a sharded variable's block times its axes' sizes is the global shape.
static LogicalResult verifyShardedVariableUses(Operation *op, RankedTensorType type, DenseI64ArrayAttr globalShape,
                                               ShardingAttr sharding, SymbolTableCollection &symbols) {
  if (!sharding)
    return success();
  SmallVector<int64_t> view(globalShape.asArrayRef());
  if (type.getRank() == 1 && view.size() != 1)
    view = {numElements(globalShape.asArrayRef())};
  for (int64_t d = 0; d < type.getRank(); ++d) {
    FailureOr<int64_t> parts =
        collectiveGroupSize(op, sharding.getMesh(), llvm::cast<ArrayAttr>(sharding.getDimAxes()[d]), symbols);
    if (failed(parts))
      return failure();
    if (view[d] < 0 || checkedMul(type.getDimSize(d), *parts) != view[d])
      return op->emitOpError("block of ") << type.getDimSize(d) << " elements along dim " << d << " times " << *parts
                                          << " ranks is not the global " << view[d] << " elements";
  }
  return success();
}

LogicalResult VariableOp::verify() {
  RankedTensorType type = getTensorType();
  if (getSymName().empty())
    return emitOpError("needs a non-empty name");
  if (getTrainable() && (getRoleAttr() || !llvm::isa<FloatType>(type.getElementType())))
    return emitOpError("only floating-point parameters can be trainable");
  if (getInitAttr() && isParameter())
    return emitOpError("a parameter starts at the model's value: only a state (with a role) has init");
  if (bool(getStoredViewAttr()) != bool(getStoredPermAttr()))
    return emitOpError("stored_view and stored_perm come together");
  if (auto view = getStoredViewAttr()) {
    // A parameter's moments and accumulator follow its order; a scalar loss-scaler state has none.
    if (getRoleAttr() && getRole() != StateRole::ExpAvg && getRole() != StateRole::ExpAvgSq &&
        getRole() != StateRole::GradAccumulator)
      return emitOpError("only a parameter and the states kept beside it are stored in another element order");
    ArrayRef<int64_t> perm = getStoredPermAttr().asArrayRef();
    SmallVector<bool> seen(perm.size(), false);
    bool isPerm = perm.size() == view.size();
    for (int64_t p : perm)
      isPerm = isPerm && p >= 0 && p < (int64_t)perm.size() && !seen[p] && (seen[p] = true);
    auto global = getGlobalShapeAttr() ? getGlobalShapeAttr().asArrayRef() : type.getShape();
    if (!isPerm || numElements(view.asArrayRef()) != numElements(global))
      return emitOpError("stored_perm must permute the dims of stored_view, whose elements are the variable's");
  }
  return verifyShardedVariable(*this, type, getGlobalShapeAttr(), getShardingAttr());
}

LogicalResult VariableOp::verifySymbolUses(SymbolTableCollection &symbols) {
  return verifyShardedVariableUses(*this, getTensorType(), getGlobalShapeAttr(), getShardingAttr(), symbols);
}

/// The variable `name` that `op` reads or writes as a value of `type`, or a diagnostic: the
/// symbol names no cpc.variable, one of the other kind (`parameter`: a read of a parameter,
/// false: of a state, nullopt: any), or one of another type.
static LogicalResult verifyVariableAccess(Operation *op, FlatSymbolRefAttr name, Type type,
                                          std::optional<bool> parameter, SymbolTableCollection &symbols) {
  auto variable = symbols.lookupNearestSymbolFrom<VariableOp>(op, name);
  if (!variable)
    return op->emitOpError("refers to ") << name << ", which is no cpc.variable";
  if (parameter && variable.isParameter() != *parameter)
    return op->emitOpError("reads ") << name << ", which is a " << (variable.isParameter() ? "parameter" : "state")
                                     << ": read it with cpc." << (variable.isParameter() ? "parameter" : "state");
  if (variable.getType() != type)
    return op->emitOpError("uses ") << name << " as " << type << ", but the variable is " << variable.getType();
  return success();
}

/// The variable `name` that `op` reads, in `op`'s module (null when none).
static VariableOp variableOf(Operation *op, FlatSymbolRefAttr name) {
  auto module = op->getParentOfType<ModuleOp>();
  return module ? findVariable(module, name.getAttr()) : VariableOp();
}

VariableOp ParameterOp::getVariable() { return variableOf(*this, getNameAttr()); }
DenseI64ArrayAttr ParameterOp::getGlobalShapeAttr() { return getVariable().getGlobalShapeAttr(); }
ShardingAttr ParameterOp::getShardingAttr() { return getVariable().getShardingAttr(); }
bool ParameterOp::getTrainable() { return getVariable().getTrainable(); }
DenseI64ArrayAttr ParameterOp::getStoredViewAttr() { return getVariable().getStoredViewAttr(); }
DenseI64ArrayAttr ParameterOp::getStoredPermAttr() { return getVariable().getStoredPermAttr(); }
VariableOp StateOp::getVariable() { return variableOf(*this, getNameAttr()); }
DenseI64ArrayAttr StateOp::getGlobalShapeAttr() { return getVariable().getGlobalShapeAttr(); }
ShardingAttr StateOp::getShardingAttr() { return getVariable().getShardingAttr(); }
StateRole StateOp::getRole() { return *getVariable().getRole(); }

LogicalResult ParameterOp::verifySymbolUses(SymbolTableCollection &symbols) {
  return verifyVariableAccess(*this, getNameAttr(), getType(), true, symbols);
}

LogicalResult StateOp::verifySymbolUses(SymbolTableCollection &symbols) {
  return verifyVariableAccess(*this, getNameAttr(), getType(), false, symbols);
}

LogicalResult AssignOp::verifySymbolUses(SymbolTableCollection &symbols) {
  return verifyVariableAccess(*this, getNameAttr(), getValue().getType(), std::nullopt, symbols);
}

LogicalResult RandomUniformOp::verify() {
  if (!(getLow().convertToDouble() < getHigh().convertToDouble()))
    return emitOpError("needs low < high");
  return success();
}


//===----------------------------------------------------------------------===//
// Elementwise.
//===----------------------------------------------------------------------===//

LogicalResult WhereOp::inferReturnTypes(MLIRContext *, std::optional<Location> loc,
                                        Adaptor adaptor, SmallVectorImpl<Type> &inferred) {
  auto c = rankedOrNull(adaptor.getCondition().getType());
  auto a = rankedOrNull(adaptor.getOnTrue().getType());
  auto b = rankedOrNull(adaptor.getOnFalse().getType());
  if (!c || !a || !b)
    return emitShapeError(loc, "operands must be ranked tensors");
  if (a.getElementType() != b.getElementType())
    return emitShapeError(loc, "branch element types differ");
  auto ab = broadcastShapes(a.getShape(), b.getShape());
  auto all = ab ? broadcastShapes(c.getShape(), *ab) : std::nullopt;
  if (!all)
    return emitShapeError(loc, "condition and branches do not broadcast");
  inferred.push_back(RankedTensorType::get(*all, a.getElementType()));
  return success();
}

//===----------------------------------------------------------------------===//
// Contractions, reductions, normalizations.
//===----------------------------------------------------------------------===//

LogicalResult MatMulOp::inferReturnTypes(MLIRContext *, std::optional<Location> loc,
                                         Adaptor adaptor, SmallVectorImpl<Type> &inferred) {
  auto lt = rankedOrNull(adaptor.getLhs().getType());
  auto rt = rankedOrNull(adaptor.getRhs().getType());
  if (!lt || !rt)
    return emitShapeError(loc, "operands must have rank >= 1");
  if (lt.getElementType() != rt.getElementType())
    return emitShapeError(loc, "operand element types differ");
  shapes::Inferred out = shapes::matmul(shapeOf(lt), shapeOf(rt), adaptor.getTransposeLhs(), adaptor.getTransposeRhs());
  if (!out.ok())
    return emitShapeError(loc, out.error);
  inferred.push_back(RankedTensorType::get(out.shape, lt.getElementType()));
  return success();
}

namespace {
/// Is `v` a transpose that swaps only the last two dims? Returns its input.
Value swappedLastTwo(Value v) {
  auto t = v.getDefiningOp<TransposeOp>();
  if (!t)
    return {};
  ArrayRef<int64_t> perm = t.getPermutation();
  int64_t r = perm.size();
  if (r < 2 || perm[r - 1] != r - 2 || perm[r - 2] != r - 1)
    return {};
  for (int64_t d = 0; d < r - 2; ++d)
    if (perm[d] != d)
      return {};
  return t.getInput();
}

/// matmul(transpose(a), b) -> matmul(a, b) {transpose_lhs}: GEMM reads operands transposed for
/// free, while the transpose op copies them.
struct FoldTransposeIntoMatMul : OpRewritePattern<MatMulOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(MatMulOp op, PatternRewriter &rewriter) const override {
    Value lhs = swappedLastTwo(op.getLhs()), rhs = swappedLastTwo(op.getRhs());
    if (!lhs && !rhs)
      return failure();
    rewriter.modifyOpInPlace(op, [&] {
      if (lhs) {
        op.getLhsMutable().assign(lhs);
        op.setTransposeLhs(!op.getTransposeLhs());
      }
      if (rhs) {
        op.getRhsMutable().assign(rhs);
        op.setTransposeRhs(!op.getTransposeRhs());
      }
    });
    return success();
  }
};
} // namespace

void MatMulOp::getCanonicalizationPatterns(RewritePatternSet &results, MLIRContext *context) {
  results.add<FoldTransposeIntoMatMul>(context);
}

namespace {
/// reduce_sum(neg(x)) -> neg(reduce_sum(x)): the negation moves to the smaller tensor (and the
/// sum meets what produced x, see SumOfScatteredRows).
struct SumOfNegation : OpRewritePattern<ReduceSumOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(ReduceSumOp op, PatternRewriter &rewriter) const override {
    auto neg = op.getInput().getDefiningOp<NegOp>();
    if (!neg || !llvm::isa<FloatType>(op.getType().getElementType()))
      return failure();
    Value sum = rewriter.create<ReduceSumOp>(op.getLoc(), op.getType(), neg.getInput(), op.getAxesAttr(),
                                             op.getKeepdimsAttr());
    rewriter.replaceOpWithNewOp<NegOp>(op, op.getType(), sum);
    return success();
  }
};

/// reduce_sum over `axis` of gather_elements_grad(g, indices) when the indices pick one element
/// per row (size 1 along `axis`) is g itself: each row's gradient lands in one place. (A
/// cross-entropy's backward then needs no sum over the classes, which a vocab-parallel split
/// would have to all-reduce.)
struct SumOfScatteredRows : OpRewritePattern<ReduceSumOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(ReduceSumOp op, PatternRewriter &rewriter) const override {
    auto scatter = op.getInput().getDefiningOp<GatherElementsGradOp>();
    if (!scatter || scatter.getBlockAxesAttr() || op.getAxes().size() != 1)
      return failure();
    auto grad = llvm::cast<RankedTensorType>(scatter.getGrad().getType());
    int64_t axis = scatter.getAxis() < 0 ? scatter.getAxis() + grad.getRank() : scatter.getAxis();
    int64_t reduced = op.getAxes()[0] < 0 ? op.getAxes()[0] + grad.getRank() : op.getAxes()[0];
    if (reduced != axis || grad.getDimSize(axis) != 1)
      return failure();
    // The other dims of the scatter's result are the indices' (gather_elements_grad verifies
    // indices <= result; equal is what makes the sum exactly g).
    auto result = llvm::cast<RankedTensorType>(scatter.getType());
    for (int64_t d = 0; d < grad.getRank(); ++d)
      if (d != axis && grad.getDimSize(d) != result.getDimSize(d))
        return failure();
    Value g = scatter.getGrad();
    if (g.getType() == op.getType())
      rewriter.replaceOp(op, g);
    else
      rewriter.replaceOpWithNewOp<ReshapeOp>(op, op.getType(), g);
    return success();
  }
};
} // namespace

void ReduceSumOp::getCanonicalizationPatterns(RewritePatternSet &results, MLIRContext *context) {
  results.add<SumOfNegation, SumOfScatteredRows>(context);
}

LogicalResult LayerNormOp::inferReturnTypes(MLIRContext *, std::optional<Location> loc,
                                            Adaptor adaptor, SmallVectorImpl<Type> &inferred) {
  auto in = rankedOrNull(adaptor.getInput().getType());
  auto scale = rankedOrNull(adaptor.getScale().getType());
  auto bias = rankedOrNull(adaptor.getBias().getType());
  if (!in || !scale || !bias)
    return emitShapeError(loc, "operands must be ranked tensors");
  int64_t axis = adaptor.getAxis();
  if (failed(checkAxis(loc, axis, in.getRank())))
    return failure();
  ArrayRef<int64_t> normalized = in.getShape().drop_front(axis);
  if (scale.getShape() != normalized || bias.getShape() != normalized)
    return emitShapeError(loc, "scale and bias must have the normalized shape " +
                                   shapeStr(normalized));
  if (scale.getElementType() != in.getElementType() || bias.getElementType() != in.getElementType())
    return emitShapeError(loc, "scale and bias must have the input's element type");
  if (!(adaptor.getEpsilon().convertToDouble() >= 0.0)) // also rejects NaN
    return emitShapeError(loc, "epsilon must be >= 0");
  inferred.push_back(in);
  return success();
}

LogicalResult SoftmaxOp::verify() {
  int64_t axis = getAxis();
  if (axis < 0 || axis >= getType().getRank())
    return emitOpError("axis ") << axis << " out of range for rank " << getType().getRank();
  return success();
}

/// Output shape of a 2-D convolution (NCHW input, OIHW weight), shared by conv2d and its VJPs.
static FailureOr<SmallVector<int64_t>> convOutputShape(std::optional<Location> loc, RankedTensorType in,
                                                       RankedTensorType w, ArrayRef<int64_t> strides,
                                                       ArrayRef<int64_t> pads, ArrayRef<int64_t> dil, int64_t groups) {
  if (in.getRank() != 4 || w.getRank() != 4)
    return emitShapeError(loc, "input (NCHW) and weight (OIHW) must have rank 4");
  if (strides.size() != 2 || pads.size() != 4 || dil.size() != 2)
    return emitShapeError(loc, "needs 2 strides, 4 paddings and 2 dilations");
  if (groups < 1 || in.getDimSize(1) % groups || w.getDimSize(0) % groups ||
      checkedMul(w.getDimSize(1), groups) != in.getDimSize(1))
    return emitShapeError(loc, "channels " + Twine(in.getDimSize(1)) + " and weight " + shapeStr(w.getShape()) +
                                   " do not match groups " + Twine(groups));
  SmallVector<int64_t> shape{in.getDimSize(0), w.getDimSize(0)};
  for (int i = 0; i < 2; ++i) {
    if (strides[i] < 1 || dil[i] < 1 || pads[i] < 0 || pads[i + 2] < 0)
      return emitShapeError(loc, "strides and dilations must be >= 1, paddings >= 0");
    // Attributes come from the model: sizes past int64 are an error, not a wraparound.
    auto extent = checkedAdd(in.getDimSize(2 + i), pads[i]);
    extent = extent ? checkedAdd(*extent, pads[i + 2]) : extent;
    auto window = checkedMul(dil[i], w.getDimSize(2 + i) - 1);
    window = window ? checkedAdd(*window, 1) : window;
    if (!extent || !window)
      return emitShapeError(loc, "paddings or dilations overflow 64 bits");
    if (*extent < *window)
      return emitShapeError(loc, "kernel larger than the padded input");
    shape.push_back((*extent - *window) / strides[i] + 1);
  }
  return shape;
}

LogicalResult Conv2DOp::inferReturnTypes(MLIRContext *, std::optional<Location> loc,
                                         Adaptor adaptor, SmallVectorImpl<Type> &inferred) {
  auto in = rankedOrNull(adaptor.getInput().getType());
  auto w = rankedOrNull(adaptor.getWeight().getType());
  if (!in || !w || in.getRank() != 4 || w.getRank() != 4)
    return emitShapeError(loc, "input (NCHW) and weight (OIHW) must have rank 4");
  if (w.getElementType() != in.getElementType() ||
      (adaptor.getBias() && llvm::cast<RankedTensorType>(adaptor.getBias().getType()).getElementType() !=
                                in.getElementType()))
    return emitShapeError(loc, "input, weight and bias must share the element type");
  auto strides = adaptor.getStrides(), pads = adaptor.getPadding(), dil = adaptor.getDilations();
  int64_t groups = adaptor.getGroups();
  if (Value bias = adaptor.getBias()) {
    auto b = rankedOrNull(bias.getType());
    if (!b || b.getRank() != 1 || b.getDimSize(0) != w.getDimSize(0))
      return emitShapeError(loc, "bias must have shape [" + Twine(w.getDimSize(0)) + "]");
  }
  auto shape = convOutputShape(loc, in, w, strides, pads, dil, groups);
  if (failed(shape))
    return failure();
  inferred.push_back(RankedTensorType::get(*shape, in.getElementType()));
  return success();
}

//===----------------------------------------------------------------------===//
// Data movement.
//===----------------------------------------------------------------------===//

LogicalResult ReshapeOp::verify() {
  auto in = getInput().getType(), out = getType();
  if (in.getElementType() != out.getElementType())
    return emitOpError("element types differ");
  if (numElements(in.getShape()) != numElements(out.getShape()))
    return emitOpError("cannot reshape ") << shapeStr(in.getShape()) << " ("
           << numElements(in.getShape()) << " elements) to " << shapeStr(out.getShape());
  return success();
}

LogicalResult TransposeOp::inferReturnTypes(MLIRContext *, std::optional<Location> loc,
                                            Adaptor adaptor, SmallVectorImpl<Type> &inferred) {
  auto in = rankedOrNull(adaptor.getInput().getType());
  if (!in)
    return emitShapeError(loc, "permutation size must equal the input rank");
  ArrayRef<int64_t> perm = adaptor.getPermutation();
  shapes::Inferred out = shapes::transpose(shapeOf(in), shapes::Shape(perm.begin(), perm.end()));
  if (!out.ok())
    return emitShapeError(loc, out.error);
  inferred.push_back(RankedTensorType::get(out.shape, in.getElementType()));
  return success();
}

LogicalResult SliceOp::inferReturnTypes(MLIRContext *, std::optional<Location> loc,
                                        Adaptor adaptor, SmallVectorImpl<Type> &inferred) {
  auto in = rankedOrNull(adaptor.getInput().getType());
  auto starts = adaptor.getStarts(), limits = adaptor.getLimits(), strides = adaptor.getStrides();
  if (!in || (int64_t)starts.size() != in.getRank() || limits.size() != starts.size() ||
      strides.size() != starts.size())
    return emitShapeError(loc, "starts, limits and strides need one entry per input dim");
  SmallVector<int64_t> shape;
  for (int64_t d = 0; d < in.getRank(); ++d) {
    int64_t dim = in.getDimSize(d);
    if (strides[d] < 1 || starts[d] < 0 || starts[d] > dim || limits[d] < starts[d] ||
        limits[d] > dim)
      return emitShapeError(loc, "dim " + Twine(d) + ": need 0 <= start <= limit <= " +
                                     Twine(dim) + " and stride >= 1");
    shape.push_back((limits[d] - starts[d] + strides[d] - 1) / strides[d]);
  }
  inferred.push_back(RankedTensorType::get(shape, in.getElementType()));
  return success();
}

LogicalResult ConcatOp::inferReturnTypes(MLIRContext *, std::optional<Location> loc,
                                         Adaptor adaptor, SmallVectorImpl<Type> &inferred) {
  std::vector<shapes::Shape> inputs;
  Type element;
  for (Value v : adaptor.getInputs()) {
    auto t = rankedOrNull(v.getType());
    if (!t || (element && t.getElementType() != element))
      return emitShapeError(loc, "inputs must share rank and element type");
    element = t.getElementType();
    inputs.push_back(shapeOf(t));
  }
  shapes::Inferred out = shapes::concat(inputs, adaptor.getAxis());
  if (!out.ok())
    return emitShapeError(loc, out.error);
  inferred.push_back(RankedTensorType::get(out.shape, element));
  return success();
}

LogicalResult BroadcastOp::verify() {
  auto in = getInput().getType(), out = getType();
  if (in.getElementType() != out.getElementType())
    return emitOpError("element types differ");
  if (!isBroadcastableTo(in.getShape(), out.getShape()))
    return emitOpError("cannot broadcast ") << shapeStr(in.getShape()) << " to "
                                            << shapeStr(out.getShape());
  return success();
}

LogicalResult GatherOp::inferReturnTypes(MLIRContext *, std::optional<Location> loc,
                                         Adaptor adaptor, SmallVectorImpl<Type> &inferred) {
  auto data = rankedOrNull(adaptor.getData().getType());
  auto idx = rankedOrNull(adaptor.getIndices().getType());
  if (!data || !idx)
    return failure();
  shapes::Inferred out = shapes::gather(shapeOf(data), shapeOf(idx), adaptor.getAxis());
  if (!out.ok())
    return emitShapeError(loc, out.error);
  inferred.push_back(RankedTensorType::get(out.shape, data.getElementType()));
  return success();
}

LogicalResult GatherElementsOp::inferReturnTypes(MLIRContext *, std::optional<Location> loc,
                                                 Adaptor adaptor, SmallVectorImpl<Type> &inferred) {
  auto data = rankedOrNull(adaptor.getData().getType());
  auto idx = rankedOrNull(adaptor.getIndices().getType());
  int64_t axis = adaptor.getAxis();
  if (!data || !idx || failed(checkAxis(loc, axis, data.getRank())))
    return failure();
  if (idx.getRank() != data.getRank())
    return emitShapeError(loc, "indices must have the rank of data");
  for (int64_t d = 0; d < data.getRank(); ++d)
    if (d != axis && idx.getDimSize(d) > data.getDimSize(d))
      return emitShapeError(loc, "indices dim " + Twine(d) + " exceeds data");
  inferred.push_back(RankedTensorType::get(idx.getShape(), data.getElementType()));
  return success();
}

LogicalResult ScatterNDOp::inferReturnTypes(MLIRContext *, std::optional<Location> loc,
                                            Adaptor adaptor, SmallVectorImpl<Type> &inferred) {
  auto data = rankedOrNull(adaptor.getData().getType());
  auto idx = rankedOrNull(adaptor.getIndices().getType());
  auto upd = rankedOrNull(adaptor.getUpdates().getType());
  if (!data || !idx || !upd || idx.getRank() < 1)
    return emitShapeError(loc, "indices must have rank >= 1");
  int64_t k = idx.getShape().back();
  if (k < 1 || k > data.getRank())
    return emitShapeError(loc, "indices' last dim must be in [1, rank(data)]");
  SmallVector<int64_t> expected(idx.getShape().drop_back());
  llvm::append_range(expected, data.getShape().drop_front(k));
  if (upd.getShape() != ArrayRef<int64_t>(expected) ||
      upd.getElementType() != data.getElementType())
    return emitShapeError(loc, "updates must have shape " + shapeStr(expected) +
                                   " and the element type of data");
  ScatterReduction red = adaptor.getReduction();
  if (red == ScatterReduction::Max || red == ScatterReduction::Min) // no gradient rule yet
    return emitShapeError(loc, "reduction must be none, add or mul");
  inferred.push_back(data);
  return success();
}

LogicalResult TopKOp::inferReturnTypes(MLIRContext *ctx, std::optional<Location> loc,
                                       Adaptor adaptor, SmallVectorImpl<Type> &inferred) {
  auto in = rankedOrNull(adaptor.getInput().getType());
  int64_t axis = adaptor.getAxis(), k = adaptor.getK();
  if (!in || failed(checkAxis(loc, axis, in.getRank())))
    return failure();
  if (k < 0 || k > in.getDimSize(axis))
    return emitShapeError(loc, "k = " + Twine(k) + " out of range for dim " +
                                   Twine(in.getDimSize(axis)));
  SmallVector<int64_t> shape(in.getShape());
  shape[axis] = k;
  inferred.push_back(RankedTensorType::get(shape, in.getElementType()));
  inferred.push_back(RankedTensorType::get(shape, IntegerType::get(ctx, 64)));
  return success();
}

LogicalResult ArgSortOp::inferReturnTypes(MLIRContext *ctx, std::optional<Location> loc,
                                          Adaptor adaptor, SmallVectorImpl<Type> &inferred) {
  auto in = rankedOrNull(adaptor.getInput().getType());
  if (!in || failed(checkAxis(loc, adaptor.getAxis(), in.getRank())))
    return failure();
  inferred.push_back(RankedTensorType::get(in.getShape(), IntegerType::get(ctx, 64)));
  return success();
}

LogicalResult PadOp::inferReturnTypes(MLIRContext *, std::optional<Location> loc, Adaptor adaptor,
                                      SmallVectorImpl<Type> &inferred) {
  auto in = rankedOrNull(adaptor.getInput().getType());
  auto low = adaptor.getLowPadding(), high = adaptor.getHighPadding(), interior = adaptor.getInteriorPadding();
  if (!in || (int64_t)low.size() != in.getRank() || high.size() != low.size() || interior.size() != low.size())
    return emitShapeError(loc, "low_padding, high_padding and interior_padding need one entry per input dim");
  SmallVector<int64_t> shape;
  for (int64_t d = 0; d < in.getRank(); ++d) {
    if (low[d] < 0 || high[d] < 0 || interior[d] < 0)
      return emitShapeError(loc, "padding amounts must be >= 0");
    int64_t n = in.getDimSize(d);
    auto size = checkedMul(std::max<int64_t>(n - 1, 0), interior[d]);
    for (int64_t term : {low[d], high[d], n})
      size = size ? checkedAdd(*size, term) : size;
    if (!size)
      return emitShapeError(loc, "padded size of dim " + Twine(d) + " overflows 64 bits");
    shape.push_back(*size);
  }
  inferred.push_back(RankedTensorType::get(shape, in.getElementType()));
  return success();
}

//===----------------------------------------------------------------------===//
// Gradients.
//===----------------------------------------------------------------------===//

LogicalResult LayerNormGradOp::inferReturnTypes(MLIRContext *, std::optional<Location> loc, Adaptor adaptor,
                                                SmallVectorImpl<Type> &inferred) {
  auto in = rankedOrNull(adaptor.getInput().getType());
  auto scale = rankedOrNull(adaptor.getScale().getType());
  auto grad = rankedOrNull(adaptor.getGrad().getType());
  if (!in || !scale || !grad || grad != in)
    return emitShapeError(loc, "grad must have the input's type");
  int64_t axis = adaptor.getAxis();
  if (failed(checkAxis(loc, axis, in.getRank())))
    return failure();
  if (scale.getShape() != in.getShape().drop_front(axis) || scale.getElementType() != in.getElementType())
    return emitShapeError(loc, "scale must have the normalized shape " + shapeStr(in.getShape().drop_front(axis)));
  inferred.append({in, scale, scale});
  return success();
}

LogicalResult GatherGradOp::inferReturnTypes(MLIRContext *, std::optional<Location> loc, Adaptor adaptor,
                                             SmallVectorImpl<Type> &inferred) {
  auto grad = rankedOrNull(adaptor.getGrad().getType());
  auto idx = rankedOrNull(adaptor.getIndices().getType());
  int64_t axis = adaptor.getAxis(), dimSize = adaptor.getDimSize();
  if (!grad || !idx || axis < 0 || axis + idx.getRank() > grad.getRank() || dimSize < 1)
    return emitShapeError(loc, "grad must have the shape gather produced with these indices and axis");
  SmallVector<int64_t> shape(grad.getShape().take_front(axis));
  shape.push_back(dimSize);
  llvm::append_range(shape, grad.getShape().drop_front(axis + idx.getRank()));
  inferred.push_back(RankedTensorType::get(shape, grad.getElementType()));
  return success();
}

LogicalResult GatherElementsGradOp::verify() {
  auto grad = getGrad().getType(), idx = getIndices().getType(), out = getType();
  int64_t axis = getAxis();
  if (grad.getShape() != idx.getShape())
    return emitOpError("grad must have the shape of indices");
  if (out.getRank() != grad.getRank() || axis < 0 || axis >= out.getRank())
    return emitOpError("result rank must match and axis must be in range");
  if (out.getElementType() != grad.getElementType())
    return emitOpError("result element type must be the grad's");
  return success();
}

/// Checks that conv2d(input, weight) with these attributes produces `output`.
static LogicalResult verifyConvShapes(Operation *op, RankedTensorType input, RankedTensorType weight,
                                      RankedTensorType output, ArrayRef<int64_t> strides,
                                      ArrayRef<int64_t> padding, ArrayRef<int64_t> dilations, int64_t groups) {
  auto shape = convOutputShape(op->getLoc(), input, weight, strides, padding, dilations, groups);
  if (failed(shape))
    return failure();
  if (output.getShape() != ArrayRef<int64_t>(*shape))
    return op->emitOpError("grad shape ") << shapeStr(output.getShape()) << " is not the conv output shape "
                                          << shapeStr(*shape);
  return success();
}

LogicalResult Conv2DGradInputOp::verify() {
  return verifyConvShapes(*this, getType(), getWeight().getType(), getGrad().getType(), getStrides(), getPadding(),
                          getDilations(), getGroups());
}

LogicalResult Conv2DGradWeightOp::verify() {
  return verifyConvShapes(*this, getInput().getType(), getType(), getGrad().getType(), getStrides(), getPadding(),
                          getDilations(), getGroups());
}

LogicalResult AdamWOp::inferReturnTypes(MLIRContext *, std::optional<Location> loc, Adaptor adaptor,
                                        SmallVectorImpl<Type> &inferred) {
  Type p = adaptor.getParam().getType();
  if (adaptor.getGrad().getType() != p || adaptor.getExpAvg().getType() != p || adaptor.getExpAvgSq().getType() != p)
    return emitShapeError(loc, "param, grad and moments must have one type");
  for (Value scalar : {adaptor.getLr(), adaptor.getStep()})
    if (llvm::cast<RankedTensorType>(scalar.getType()).getRank() != 0)
      return emitShapeError(loc, "lr and step must be rank-0 tensors");
  if (Value scale = adaptor.getGradScale();
      scale && scale.getType() != RankedTensorType::get({}, llvm::cast<RankedTensorType>(p).getElementType()))
    return emitShapeError(loc, "grad_scale must be a rank-0 tensor of the gradient's element type");
  inferred.append({p, p, p});
  return success();
}

//===----------------------------------------------------------------------===//
// Mesh and sharding.
//===----------------------------------------------------------------------===//

LogicalResult MeshOp::verify() {
  // Far above any job and small enough that products of axis sizes cannot overflow.
  constexpr int64_t kMaxMeshRanks = int64_t(1) << 20;
  int64_t ranks = 1;
  if (getShape().size() != getAxisNames().size())
    return emitOpError("needs one axis name per mesh dim");
  if (getShape().empty())
    return emitOpError("needs at least one axis");
  llvm::StringSet<> names;
  for (auto [size, name] : llvm::zip(getShape(), getAxisNames())) {
    StringRef n = llvm::cast<StringAttr>(name).getValue();
    if (size < 1)
      return emitOpError("axis '") << n << "' must have size >= 1";
    if (size > kMaxMeshRanks || (ranks *= size) > kMaxMeshRanks)
      return emitOpError("has more than ") << kMaxMeshRanks << " ranks";
    if (n.empty() || !names.insert(n).second)
      return emitOpError("axis names must be non-empty and unique");
  }
  if (ArrayAttr roles = getAxisRolesAttr()) {
    if (roles.size() != getAxisNames().size())
      return emitOpError("needs one role per axis, got ") << roles.size() << " for " << getAxisNames().size();
    llvm::SmallDenseSet<MeshAxisRole> seen;
    for (Attribute role : roles) {
      MeshAxisRole r = llvm::cast<MeshAxisRoleAttr>(role).getValue();
      if (r != MeshAxisRole::None && !seen.insert(r).second)
        return emitOpError("has two axes with role ") << stringifyMeshAxisRole(r);
    }
  }
  return success();
}

MeshAxisRole MeshOp::getAxisRole(StringRef name) {
  ArrayAttr roles = getAxisRolesAttr();
  for (auto [i, n] : llvm::enumerate(getAxisNames()))
    if (roles && llvm::cast<StringAttr>(n).getValue() == name)
      return llvm::cast<MeshAxisRoleAttr>(roles[i]).getValue();
  return MeshAxisRole::None;
}

StringRef MeshOp::getAxisWithRole(MeshAxisRole role) {
  ArrayAttr roles = getAxisRolesAttr();
  for (auto [i, n] : llvm::enumerate(getAxisNames()))
    if (roles && role != MeshAxisRole::None && llvm::cast<MeshAxisRoleAttr>(roles[i]).getValue() == role)
      return llvm::cast<StringAttr>(n).getValue();
  return "";
}

int64_t MeshOp::getAxisSize(StringRef name) {
  for (auto [size, n] : llvm::zip(getShape(), getAxisNames()))
    if (llvm::cast<StringAttr>(n).getValue() == name)
      return size;
  return -1;
}

int64_t MeshOp::getNumRanks() { return numElements(getShape()); }

LogicalResult ShardOp::verifySymbolUses(SymbolTableCollection &symbols) {
  ShardingAttr sharding = getSharding();
  FailureOr<MeshOp> mesh = lookupMesh(*this, sharding.getMesh(), symbols);
  if (failed(mesh))
    return failure();
  RankedTensorType type = getType();
  if ((int64_t)sharding.getDimAxes().size() != type.getRank())
    return emitOpError("sharding has ") << sharding.getDimAxes().size()
                                        << " dims but the tensor has rank " << type.getRank();
  for (int64_t d = 0; d < type.getRank(); ++d) {
    FailureOr<int64_t> parts = axesSize(*this, *mesh, sharding.getAxesOfDim(d));
    if (failed(parts))
      return failure();
    if (type.getDimSize(d) % *parts)
      return emitOpError("dim ") << d << " of size " << type.getDimSize(d)
                                 << " is not divisible into " << *parts << " shards";
  }
  return axesSize(*this, *mesh, sharding.getPartialAxisNames());
}

LogicalResult AllReduceOp::inferReturnTypes(MLIRContext *, std::optional<Location> loc, Adaptor adaptor,
                                            SmallVectorImpl<Type> &inferred) {
  if (adaptor.getInputs().empty())
    return emitShapeError(loc, "needs at least one value");
  for (Value v : adaptor.getInputs())
    inferred.push_back(v.getType());
  return success();
}

LogicalResult AllReduceOp::verifySymbolUses(SymbolTableCollection &symbols) {
  return collectiveGroupSize(*this, getMeshAttr(), getMeshAxes(), symbols);
}

LogicalResult AllGatherOp::verify() {
  auto in = getInput().getType(), out = getType();
  int64_t dim = getGatherDim();
  if (dim < 0 || dim >= in.getRank())
    return emitOpError("dim ") << dim << " is not a dim of the rank-" << in.getRank() << " input";
  bool othersMatch = in.getRank() == out.getRank();
  for (int64_t d = 0; othersMatch && d < in.getRank(); ++d)
    othersMatch = d == dim || in.getDimSize(d) == out.getDimSize(d);
  if (!othersMatch || in.getElementType() != out.getElementType() || in.getDimSize(dim) == 0 ||
      out.getDimSize(dim) % in.getDimSize(dim))
    return emitOpError("result must be the input with dim ") << dim << " multiplied by the number of ranks";
  return success();
}

LogicalResult AllGatherOp::verifySymbolUses(SymbolTableCollection &symbols) {
  FailureOr<int64_t> group = collectiveGroupSize(*this, getMeshAttr(), getMeshAxes(), symbols);
  if (failed(group))
    return failure();
  int64_t parts = *group, dim = getGatherDim();
  if (getType().getDimSize(dim) != getInput().getType().getDimSize(dim) * parts)
    return emitOpError("gathers ") << parts << " blocks, so dim " << dim << " must grow by that factor";
  return success();
}

LogicalResult AllToAllOp::verify() {
  auto in = getInput().getType(), out = getType();
  int64_t split = getSplitDim(), concat = getConcatDim(), rank = in.getRank();
  if (split < 0 || split >= rank || concat < 0 || concat >= rank || split == concat)
    return emitOpError("split_dim ") << split << " and concat_dim " << concat
                                     << " must be two different dims of the rank-" << rank << " input";
  bool othersMatch = rank == out.getRank() && in.getElementType() == out.getElementType();
  for (int64_t d = 0; othersMatch && d < rank; ++d)
    othersMatch = d == split || d == concat || in.getDimSize(d) == out.getDimSize(d);
  if (!othersMatch || out.getDimSize(split) == 0 || in.getDimSize(split) % out.getDimSize(split) ||
      in.getDimSize(split) / out.getDimSize(split) * in.getDimSize(concat) != out.getDimSize(concat))
    return emitOpError("result must be the input with dim ")
           << split << " divided and dim " << concat << " multiplied by the number of ranks";
  return success();
}

/// A point-to-point op's peer: a coordinate of an axis of its mesh; channels are >= 0.
static LogicalResult verifyPeer(Operation *op, FlatSymbolRefAttr meshRef, StringRef axis, int64_t peer,
                                int64_t channel, SymbolTableCollection &symbols) {
  FailureOr<MeshOp> mesh = lookupMesh(op, meshRef, symbols);
  if (failed(mesh))
    return failure();
  int64_t size = mesh->getAxisSize(axis);
  if (size < 0)
    return op->emitOpError("mesh ") << meshRef << " has no axis '" << axis << "'";
  if (peer < 0 || peer >= size)
    return op->emitOpError("peer ") << peer << " is not a coordinate of axis '" << axis << "' (size " << size << ")";
  if (channel < 0)
    return op->emitOpError("channel must be >= 0, got ") << channel;
  return success();
}

LogicalResult SendOp::verifySymbolUses(SymbolTableCollection &symbols) {
  return verifyPeer(*this, getMeshAttr(), getMeshAxis(), getPeer(), getChannel(), symbols);
}

LogicalResult RecvOp::verifySymbolUses(SymbolTableCollection &symbols) {
  return verifyPeer(*this, getMeshAttr(), getMeshAxis(), getPeer(), getChannel(), symbols);
}

LogicalResult AllToAllOp::verifySymbolUses(SymbolTableCollection &symbols) {
  FailureOr<int64_t> group = collectiveGroupSize(*this, getMeshAttr(), getMeshAxes(), symbols);
  if (failed(group))
    return failure();
  if (getInput().getType().getDimSize(getSplitDim()) != getType().getDimSize(getSplitDim()) * *group)
    return emitOpError("exchanges blocks among ") << *group << " ranks, so dim " << getSplitDim()
                                                  << " must shrink by that factor";
  return success();
}

LogicalResult ReduceScatterOp::verifySymbolUses(SymbolTableCollection &symbols) {
  FailureOr<int64_t> group = collectiveGroupSize(*this, getMeshAttr(), getMeshAxes(), symbols);
  if (failed(group))
    return failure();
  int64_t parts = *group, dim = getScatterDim();
  auto in = getInput().getType(), out = getType();
  bool othersMatch = in.getRank() == out.getRank() && in.getElementType() == out.getElementType();
  for (int64_t d = 0; othersMatch && d < in.getRank(); ++d)
    othersMatch = d == dim || in.getDimSize(d) == out.getDimSize(d);
  if (dim < 0 || dim >= in.getRank() || !othersMatch || in.getDimSize(dim) != out.getDimSize(dim) * parts)
    return emitOpError("result must be the input with dim ") << dim << " divided by the " << parts << " ranks";
  return success();
}

/// A rooted collective (broadcast_from, reduce_to): one mesh axis, and a root on it.
static LogicalResult verifyRooted(Operation *op, FlatSymbolRefAttr meshRef, ArrayAttr axes, int64_t root,
                                  SymbolTableCollection &symbols) {
  if (axes.size() != 1)
    return op->emitOpError("takes exactly one mesh axis, got ") << axes.size();
  FailureOr<int64_t> group = collectiveGroupSize(op, meshRef, axes, symbols);
  if (failed(group))
    return failure();
  if (root < 0 || root >= *group)
    return op->emitOpError("root ") << root << " is not a coordinate of axis " << axes[0] << " (size " << *group
                                    << ")";
  return success();
}

LogicalResult BroadcastFromOp::verifySymbolUses(SymbolTableCollection &symbols) {
  return verifyRooted(*this, getMeshAttr(), getMeshAxes(), getRoot(), symbols);
}

LogicalResult ReduceToOp::verifySymbolUses(SymbolTableCollection &symbols) {
  return verifyRooted(*this, getMeshAttr(), getMeshAxes(), getRoot(), symbols);
}

LogicalResult ShardSliceOp::verifySymbolUses(SymbolTableCollection &symbols) {
  ShardingAttr sharding = getSharding();
  FailureOr<MeshOp> mesh = lookupMesh(*this, sharding.getMesh(), symbols);
  if (failed(mesh))
    return failure();
  auto in = getInput().getType(), out = getType();
  if (in.getRank() != out.getRank() || (int64_t)sharding.getDimAxes().size() != in.getRank() ||
      in.getElementType() != out.getElementType())
    return emitOpError("sharding, input and result must have one rank and element type");
  for (int64_t d = 0; d < in.getRank(); ++d) {
    FailureOr<int64_t> parts = axesSize(*this, *mesh, sharding.getAxesOfDim(d));
    if (failed(parts))
      return failure();
    if (in.getDimSize(d) % *parts || out.getDimSize(d) != in.getDimSize(d) / *parts)
      return emitOpError("dim ") << d << " of size " << in.getDimSize(d) << " split into " << *parts
                                 << " blocks is not " << out.getDimSize(d);
  }
  return success();
}

#define GET_OP_CLASSES
#include "dialects/cpc/CpcOps.cpp.inc"
