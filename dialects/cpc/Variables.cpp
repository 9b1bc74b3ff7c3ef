//===- Variables.cpp - declaring, reading and writing cpc.variable --------===//
#include "dialects/cpc/Variables.h"

using namespace mlir;

namespace cpc {

VariableOp findVariable(ModuleOp module, StringRef name) {
  return findVariable(module, StringAttr::get(module.getContext(), name));
}

VariableOp findVariable(ModuleOp module, StringAttr name) {
  // A typed scan: the generic symbol lookup reads every op's name through the inherent
  // attribute interface (by string), which was a tenth of cpc plan's time on MAE ViT-L.
  for (VariableOp variable : module.getOps<VariableOp>())
    if (variable.getSymNameAttr() == name)
      return variable;
  return {};
}

/// Where the next variable is declared: after the last one, else at the module's start.
static OpBuilder declarationPoint(ModuleOp module) {
  OpBuilder b(module.getContext());
  b.setInsertionPointToStart(module.getBody());
  // From the end: the functions come after the variables, so this stops after a few ops (a scan
  // from the start per declaration made declaring a model's states quadratic).
  for (Operation &op : llvm::reverse(*module.getBody()))
    if (llvm::isa<VariableOp>(op)) {
      b.setInsertionPointAfter(&op);
      break;
    }
  return b;
}

VariableOp declareVariable(ModuleOp module, StringRef name, RankedTensorType type, std::optional<StateRole> role,
                           bool trainable) {
  if (VariableOp existing = findVariable(module, name))
    return existing;
  OpBuilder b = declarationPoint(module);
  StateRoleAttr roleAttr = role ? StateRoleAttr::get(module.getContext(), *role) : StateRoleAttr();
  return b.create<VariableOp>(module.getLoc(), name, type, roleAttr, trainable);
}

StateOp readState(OpBuilder &b, Location loc, StateRole role, StringRef name, RankedTensorType type,
                  std::optional<double> init) {
  auto module = b.getInsertionBlock()->getParentOp()->getParentOfType<ModuleOp>();
  VariableOp variable = declareVariable(module, name, type, role);
  if (init && !variable.getInitAttr())
    variable.setInitAttr(b.getF64FloatAttr(*init));
  return b.create<StateOp>(loc, variable);
}

AssignOp assignVariable(OpBuilder &b, Location loc, Value value, StringRef name) {
  return b.create<AssignOp>(loc, value, FlatSymbolRefAttr::get(b.getContext(), name));
}

SmallVector<Operation *> variableAccesses(ModuleOp module, VariableOp variable) {
  SmallVector<Operation *> accesses;
  if (std::optional<SymbolTable::UseRange> uses = SymbolTable::getSymbolUses(variable, module))
    for (const SymbolTable::SymbolUse &use : *uses)
      accesses.push_back(use.getUser());
  return accesses;
}

VariableOp cloneVariable(VariableOp variable, StringRef name) {
  OpBuilder b = declarationPoint(variable->getParentOfType<ModuleOp>());
  auto copy = llvm::cast<VariableOp>(b.clone(*variable));
  copy.setSymName(name);
  return copy;
}

} // namespace cpc
