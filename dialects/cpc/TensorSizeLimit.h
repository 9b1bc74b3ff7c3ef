//===- TensorSizeLimit.h - the op trait that bounds every tensor's size ---===//
#ifndef CPC_DIALECTS_CPC_TENSORSIZELIMIT_H
#define CPC_DIALECTS_CPC_TENSORSIZELIMIT_H

#include "mlir/IR/OpDefinition.h"

namespace cpc {

/// Fails (with a diagnostic on `op`) when an operand or result of `op` is a tensor larger than
/// kMaxTensorBytes, or whose element count overflows.
mlir::LogicalResult verifyTensorSizes(mlir::Operation *op);
/// Bytes of a statically shaped tensor type, or nullopt when it is above kMaxTensorBytes.
std::optional<int64_t> tensorTypeBytes(mlir::ShapedType type);

namespace OpTrait {
template <typename ConcreteType>
class TensorSizeLimit : public mlir::OpTrait::TraitBase<ConcreteType, TensorSizeLimit> {
public:
  static mlir::LogicalResult verifyTrait(mlir::Operation *op) { return verifyTensorSizes(op); }
};
} // namespace OpTrait

} // namespace cpc

#endif
