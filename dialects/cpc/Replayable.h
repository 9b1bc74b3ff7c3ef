//===- Replayable.h - ops that may run again with the same result ---------===//
//
// Activation recompute (cpc-recompute) runs forward ops a second time in the backward. That is
// sound for an op without memory effects, for a group collective (every rank of the group runs
// the copy at the same point of the same program) and for an op marked Replayable in ODS: one
// whose effects only order it, such as counter-based random numbers (a pure function of seed,
// step and microbatch).
//
#ifndef CPC_DIALECTS_CPC_REPLAYABLE_H
#define CPC_DIALECTS_CPC_REPLAYABLE_H

#include "dialects/cpc/PlanTraits.h"

#include "mlir/IR/OpDefinition.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"

namespace cpc::OpTrait {

template <typename ConcreteType>
class Replayable : public mlir::OpTrait::TraitBase<ConcreteType, Replayable> {};

} // namespace cpc::OpTrait

namespace cpc {

/// Whether running `op` again on the same operands gives the same results and changes nothing else.
inline bool isReplayable(mlir::Operation *op) {
  return mlir::isMemoryEffectFree(op) || op->hasTrait<OpTrait::GroupCollective>() ||
         op->hasTrait<OpTrait::Replayable>();
}

} // namespace cpc

#endif
