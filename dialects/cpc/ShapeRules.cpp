//===- ShapeRules.cpp -----------------------------------------------------===//
#include "dialects/cpc/ShapeRules.h"

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
  size_t rank = std::max(a.size(), b.size());
  llvm::SmallVector<int64_t> out(rank);
  for (size_t i = 0; i < rank; ++i) {
    int64_t da = i < rank - a.size() ? 1 : a[i - (rank - a.size())];
    int64_t db = i < rank - b.size() ? 1 : b[i - (rank - b.size())];
    if (da != db && da != 1 && db != 1)
      return std::nullopt;
    out[i] = da == 1 ? db : da;
  }
  return out;
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

static std::string shapeString(llvm::ArrayRef<int64_t> shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i)
    s += (i ? "," : "") + std::to_string(shape[i]);
  return s + "]";
}

LogicalResult inferBroadcastResult(std::optional<Location> loc, Type lhs, Type rhs,
                                   bool boolResult, llvm::SmallVectorImpl<Type> &inferred) {
  auto lt = llvm::dyn_cast<RankedTensorType>(lhs);
  auto rt = llvm::dyn_cast<RankedTensorType>(rhs);
  if (!lt || !rt)
    return emitShapeError(loc, "operands must be ranked tensors");
  if (lt.getElementType() != rt.getElementType())
    return emitShapeError(loc, "operand element types differ");
  auto shape = broadcastShapes(lt.getShape(), rt.getShape());
  if (!shape)
    return emitShapeError(loc, "shapes " + shapeString(lt.getShape()) + " and " +
                                   shapeString(rt.getShape()) + " do not broadcast");
  Type element = boolResult ? Type(IntegerType::get(lhs.getContext(), 1)) : lt.getElementType();
  inferred.push_back(RankedTensorType::get(*shape, element));
  return success();
}

LogicalResult inferReduceResult(std::optional<Location> loc, Type input,
                                llvm::ArrayRef<int64_t> axes, bool keepdims,
                                llvm::SmallVectorImpl<Type> &inferred) {
  auto t = llvm::dyn_cast<RankedTensorType>(input);
  if (!t)
    return emitShapeError(loc, "input must be a ranked tensor");
  int64_t rank = t.getRank();
  for (size_t i = 0; i < axes.size(); ++i) {
    if (axes[i] < 0 || axes[i] >= rank)
      return emitShapeError(loc, "reduction axis " + llvm::Twine(axes[i]) +
                                     " out of range for rank " + llvm::Twine(rank));
    if (i && axes[i] <= axes[i - 1])
      return emitShapeError(loc, "reduction axes must be sorted and unique");
  }
  llvm::SmallVector<int64_t> shape;
  for (int64_t d = 0; d < rank; ++d) {
    bool reduced = llvm::is_contained(axes, d);
    if (!reduced)
      shape.push_back(t.getDimSize(d));
    else if (keepdims)
      shape.push_back(1);
  }
  inferred.push_back(RankedTensorType::get(shape, t.getElementType()));
  return success();
}

} // namespace cpc
