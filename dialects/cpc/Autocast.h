//===- Autocast.h - the mixed-precision class of each op (op traits) -------===//
//
// cpc-mixed-precision follows torch.autocast's op lists. The class of an op is an ODS trait:
// AutocastLowPrecision (matmul, conv: compute in the 16-bit type), AutocastFullPrecision
// (softmax, layer norm, sums and means, exp/log/pow and friends: compute in f32); every other
// op computes in the widest float type among its operands.
//
#ifndef CPC_DIALECTS_CPC_AUTOCAST_H
#define CPC_DIALECTS_CPC_AUTOCAST_H

#include "mlir/IR/OpDefinition.h"

namespace cpc::OpTrait {

template <typename ConcreteType>
class AutocastLowPrecision : public mlir::OpTrait::TraitBase<ConcreteType, AutocastLowPrecision> {};

template <typename ConcreteType>
class AutocastFullPrecision : public mlir::OpTrait::TraitBase<ConcreteType, AutocastFullPrecision> {};

} // namespace cpc::OpTrait

#endif
