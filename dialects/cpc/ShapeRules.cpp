//===- ShapeRules.cpp -----------------------------------------------------===//
#include "dialects/cpc/ShapeRules.h"
#include "support/ShapeMath.h"

#include "mlir/IR/Diagnostics.h"

using namespace mlir;

namespace cpc {

LogicalResult emitShapeError(std::optional<Location> loc, const llvm::Twine &message) {
  if (loc)
    emitError(*loc) << message;
  return failure();
}

std::optional<llvm::SmallVector<int64_t>> broadcastShapes(llvm::ArrayRef<int64_t> a,
                                                          llvm::ArrayRef<int64_t> b) {
  shapes::Inferred out = shapes::broadcast(shapes::Shape(a.begin(), a.end()), shapes::Shape(b.begin(), b.end()));
  if (!out.ok())
    return std::nullopt;
  return llvm::SmallVector<int64_t>(out.shape.begin(), out.shape.end());
}

bool isBroadcastableTo(llvm::ArrayRef<int64_t> from, llvm::ArrayRef<int64_t> to) {
  if (from.size() > to.size())
    return false;
  size_t offset = to.size() - from.size();
  for (size_t i = 0; i < from.size(); ++i)
    if (from[i] != 1 && from[i] != to[i + offset])
      return false;
  return true;
}

LogicalResult inferBroadcastResult(std::optional<Location> loc, Type lhs, Type rhs,
                                   bool boolResult, llvm::SmallVectorImpl<Type> &inferred) {
  auto lt = llvm::dyn_cast<RankedTensorType>(lhs);
  auto rt = llvm::dyn_cast<RankedTensorType>(rhs);
  if (!lt || !rt)
    return emitShapeError(loc, "operands must be ranked tensors");
  if (lt.getElementType() != rt.getElementType())
    return emitShapeError(loc, "operand element types differ");
  shapes::Inferred shape = shapes::broadcast(shapes::Shape(lt.getShape().begin(), lt.getShape().end()),
                                             shapes::Shape(rt.getShape().begin(), rt.getShape().end()));
  if (!shape.ok())
    return emitShapeError(loc, shape.error);
  Type element = boolResult ? Type(IntegerType::get(lhs.getContext(), 1)) : lt.getElementType();
  inferred.push_back(RankedTensorType::get(shape.shape, element));
  return success();
}

LogicalResult inferReduceResult(std::optional<Location> loc, Type input,
                                llvm::ArrayRef<int64_t> axes, bool keepdims,
                                llvm::SmallVectorImpl<Type> &inferred) {
  auto t = llvm::dyn_cast<RankedTensorType>(input);
  if (!t)
    return emitShapeError(loc, "input must be a ranked tensor");
  shapes::Inferred shape =
      shapes::reduce(shapes::Shape(t.getShape().begin(), t.getShape().end()), shapes::Shape(axes.begin(), axes.end()), keepdims);
  if (!shape.ok())
    return emitShapeError(loc, shape.error);
  inferred.push_back(RankedTensorType::get(shape.shape, t.getElementType()));
  return success();
}

} // namespace cpc
