//===- Variables.h - declaring, reading and writing cpc.variable ----------===//
//
// A model's parameters and training's states are cpc.variable symbols of the module; functions
// read them (cpc.parameter, cpc.state) and write them (cpc.assign) by symbol. Passes that make
// new variables or change one's type go through these helpers, which keep the declaration and
// its reads and writes in step.
//
#ifndef CPC_DIALECTS_CPC_VARIABLES_H
#define CPC_DIALECTS_CPC_VARIABLES_H

#include "dialects/cpc/CpcDialect.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinOps.h"

#include <optional>

namespace cpc {

/// The variable `name` of `module`, or null.
VariableOp findVariable(mlir::ModuleOp module, llvm::StringRef name);
VariableOp findVariable(mlir::ModuleOp module, mlir::StringAttr name);

/// The variable `name` of `module`; declared (after the module's other variables) as a `type`
/// state with `role` (a parameter without one) when the module has none of that name.
VariableOp declareVariable(mlir::ModuleOp module, llvm::StringRef name, mlir::RankedTensorType type,
                           std::optional<StateRole> role, bool trainable = false);

/// A read of the state `name` (declared as `type` with `role`, starting at `init`, if it is not
/// yet), at `b`'s insertion point.
StateOp readState(mlir::OpBuilder &b, mlir::Location loc, StateRole role, llvm::StringRef name,
                  mlir::RankedTensorType type, std::optional<double> init = std::nullopt);

/// Writes `value` into the variable `name`.
AssignOp assignVariable(mlir::OpBuilder &b, mlir::Location loc, mlir::Value value, llvm::StringRef name);

/// The reads and writes of `variable` in `module`'s functions, in walk order.
llvm::SmallVector<mlir::Operation *> variableAccesses(mlir::ModuleOp module, VariableOp variable);

/// A copy of `variable` named `name` (a state of a pipeline chunk, say), declared after the
/// module's other variables.
VariableOp cloneVariable(VariableOp variable, llvm::StringRef name);

} // namespace cpc

#endif
