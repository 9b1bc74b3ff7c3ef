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
#include "passes/Sharding.h"

#include "mlir/IR/Builders.h"

namespace cpc {
#define GEN_PASS_DEF_CPCDATAPARALLEL
#include "passes/Passes.h.inc"
} // namespace cpc

using namespace mlir;
using namespace cpc;

namespace {

/// Dim 0 of every user input (not lr/step) is split over the batch axes (dp, and 2D / 2.5D
/// tensor parallelism's tp_dep and tp_row); accumulators are partial over them.
void seedBatch(func::FuncOp func, const Mesh &mesh) {
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
    func.setArgAttr(arg.getArgNumber(), kArgShardingAttr, l.toAttr(mesh.ref()));
  }
  // Gradient accumulators hold each rank's sum of its microbatches' gradients: partial over dp.
  func.walk([&](StateOp state) {
    if (state.getRole() != StateRole::GradAccumulator)
      return;
    Layout l = Layout::whole(state.getType().getRank());
    l.partial = batch;
    state->setAttr(kResultShardingsAttr, ArrayAttr::get(func.getContext(), {l.toAttr(mesh.ref())}));
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
        functionsOrPhases(module, funcs, {Phase::TrainStep, Phase::Accumulate, Phase::Apply});
    if (failed(targets))
      return signalPassFailure();
    for (func::FuncOp func : *targets) {
      if (!batchAxes(mesh).empty()) // with none (1D tensor parallelism alone) only propagation and partitioning run
        seedBatch(func, mesh);
      if (failed(propagateShardings(func, mesh)) || failed(partitionFunction(func, mesh)))
        return signalPassFailure();
    }
  }
};

} // namespace
