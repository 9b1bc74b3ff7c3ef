//===- TensorSizeLimit.cpp ------------------------------------------------===//
#include "dialects/cpc/TensorSizeLimit.h"
#include "support/CheckedSize.h"

#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/Diagnostics.h"

using namespace mlir;

namespace cpc {

static int64_t elementBytes(ShapedType type) {
  Type element = type.getElementType();
  return element.isIntOrFloat() ? (element.getIntOrFloatBitWidth() + 7) / 8 : 8;
}

std::optional<int64_t> tensorTypeBytes(ShapedType type) {
  return checkedTensorBytes(type.getShape(), elementBytes(type));
}

static LogicalResult checkValue(Operation *op, Value value, const char *kind, unsigned index) {
  auto type = llvm::dyn_cast<RankedTensorType>(value.getType());
  if (!type || !type.hasStaticShape() || tensorTypeBytes(type))
    return success();
  return op->emitOpError() << kind << " #" << index << ": "
                           << tensorSizeProblem(type.getShape(), elementBytes(type));
}

LogicalResult verifyTensorSizes(Operation *op) {
  for (auto [i, operand] : llvm::enumerate(op->getOperands()))
    if (failed(checkValue(op, operand, "operand", i)))
      return failure();
  for (auto [i, result] : llvm::enumerate(op->getResults()))
    if (failed(checkValue(op, result, "result", i)))
      return failure();
  return success();
}

} // namespace cpc
