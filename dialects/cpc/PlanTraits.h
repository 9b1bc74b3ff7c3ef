//===- PlanTraits.h - op traits that the runtime reads too ----------------===//
//
// Marker traits (Cpc_PlanTrait in CpcBase.td): the compiler asks op->hasTrait<>(), the runtime
// and the kernels read the same facts from the generated op table (kernels/OpKind.h).
//
#ifndef CPC_DIALECTS_CPC_PLANTRAITS_H
#define CPC_DIALECTS_CPC_PLANTRAITS_H

#include "mlir/IR/OpDefinition.h"

namespace cpc::OpTrait {

template <typename ConcreteType>
class GroupCollective : public mlir::OpTrait::TraitBase<ConcreteType, GroupCollective> {};
template <typename ConcreteType>
class CombiningCollective : public mlir::OpTrait::TraitBase<ConcreteType, CombiningCollective> {};
template <typename ConcreteType>
class PointToPoint : public mlir::OpTrait::TraitBase<ConcreteType, PointToPoint> {};
template <typename ConcreteType>
class RankDependent : public mlir::OpTrait::TraitBase<ConcreteType, RankDependent> {};
template <typename ConcreteType>
class MayRunInPlace : public mlir::OpTrait::TraitBase<ConcreteType, MayRunInPlace> {};

} // namespace cpc::OpTrait

#endif
