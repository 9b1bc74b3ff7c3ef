//===- DataParallel.cpp - batch sharding: propagation and partitioning ----===//
//
// Data parallelism as sharding: split the batch dim of the inputs over the `dp` mesh axis,
// then the two general passes do the rest: cpc-propagate-sharding over the ops' factor rules
// (ShardingRules.cpp) and cpc-partition into the per-rank program. Partial sums come from
// splitting reduction factors; an all-reduce is inserted only where a partial sum meets an op
// that is not linear in it, a result or an assign.
//
#include "dialects/cpc/Roles.h"
#include "passes/Passes.h"
#include "passes/MatMulStrategies.h"
#include "passes/Sharding.h"

#include "mlir/IR/Builders.h"

namespace cpc {
#define GEN_PASS_DEF_CPCDATAPARALLEL
#include "passes/Passes.h.inc"
} // namespace cpc

using namespace mlir;
using namespace cpc;

/// Dim 0 of every user input (not lr/step) is split over the batch axes (dp, and 2D / 2.5D
/// tensor parallelism's tp_dep and tp_row); accumulators are partial over them.
void cpc::seedBatch(func::FuncOp func, const Mesh &mesh) {
  MeshAxes batch = batchAxes(mesh);
  int64_t size = mesh.parts(batch);
  for (BlockArgument arg : func.getArguments()) {
    if (getRuntimeInput(func, arg.getArgNumber()))
      continue;
    auto t = llvm::cast<RankedTensorType>(arg.getType());
    if (t.getRank() == 0 || t.getDimSize(0) % size)
      continue;
    Layout l = Layout::whole(t.getRank());
    l.dims[0] = batch;
    // 3D: in the tier of the weights, so that each Linear's result rows come from the 3D matmul
    // (they alternate between tp_in and tp_out), never from the batch passed through it.
    func.setArgAttr(arg.getArgNumber(), kArgShardingAttr, l.toAttr(mesh.ref(), has3DAxes(mesh) ? 1 : 0));
  }
  // Gradient accumulators hold each rank's sum of its microbatches' gradients: partial over the
  // batch axes that only split the batch (dp, tp_dep), not those over which 2D and 3D weight
  // gradients come out split (tp_row, tp_wt, tp_in; the gradients that are partial over them, of
  // biases and norms, are summed over them per microbatch).
  MeshAxes partial = batch;
  llvm::erase_if(partial, [&](const std::string &a) { return a != "dp" && mesh.roleOf(a) != MeshAxisRole::TensorDepth; });
  if (partial.empty())
    return;
  auto module = func->getParentOfType<ModuleOp>();
  std::optional<SymbolTable> variables; // one scan of the module, not one per state read
  if (module)
    variables.emplace(module);
  func.walk([&](StateOp state) {
    VariableOp variable = variables ? variables->lookup<VariableOp>(state.getNameAttr().getAttr()) : state.getVariable();
    if (!variable || variable.getRole() != StateRole::GradAccumulator)
      return;
    Layout l = Layout::whole(state.getType().getRank());
    l.partial = partial;
    state->setAttr(kResultShardingsAttr, ArrayAttr::get(func.getContext(), {l.toAttr(mesh.ref())}));
  });
}

namespace {

/// States that an earlier function laid out get that layout here (a seed propagation keeps).
void seedStates(func::FuncOp func, const llvm::StringMap<ShardingAttr> &layouts) {
  func.walk([&](StateOp state) {
    auto it = layouts.find(state.getName());
    if (it != layouts.end())
      state->setAttr(kResultShardingsAttr, ArrayAttr::get(func.getContext(), {it->second}));
  });
}

struct CpcDataParallelPass : cpc::impl::CpcDataParallelBase<CpcDataParallelPass> {
  using CpcDataParallelBase::CpcDataParallelBase;
  void runOnOperation() override {
    ModuleOp module = getOperation();
    if (size < 1) {
      module.emitError("data-parallel size must be >= 1");
      return signalPassFailure();
    }
    FailureOr<MeshOp> meshOp = getOrCreateMesh(module, {{"dp", size}});
    if (failed(meshOp))
      return signalPassFailure();
    Mesh mesh(*meshOp);
    FailureOr<SmallVector<func::FuncOp>> targets =
        functionsOrPhases(module, funcs, kShardedPhases);
    if (failed(targets))
      return signalPassFailure();
    // A state read by several functions (a gradient accumulator: written by @accumulate, read
    // by @apply) is laid out in all of them as propagation laid it out in the first.
    llvm::StringMap<ShardingAttr> stateLayouts;
    VariableSplits splits;
    for (func::FuncOp func : *targets) {
      if (!batchAxes(mesh).empty()) // with none (1D tensor parallelism alone) only propagation and partitioning run
        seedBatch(func, mesh);
      seedStates(func, stateLayouts);
      if (failed(propagateShardings(func, mesh)))
        return signalPassFailure();
      func.walk([&](StateOp state) {
        if (auto list = state->getAttrOfType<ArrayAttr>(kResultShardingsAttr))
          stateLayouts.try_emplace(state.getName(), llvm::cast<ShardingAttr>(list[0]));
      });
      if (failed(partitionFunction(func, mesh, splits)))
        return signalPassFailure();
    }
  }
};

} // namespace
