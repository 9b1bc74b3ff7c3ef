//===- SplitGradNorm.cpp - the global gradient norm's squares split over dp ===//
//
// A dp plan without ZeRO all-reduces its gradients and squares them whole on every rank for the
// global norm, summed in another order than ZeRO's blocks are (cpc-zero splits the squares as
// its updates). The pipeline runs this pass on 16-bit plans (Pipelines.cpp): In 16-bit training the norm's f32 rounding moves the clip
// by an ulp, the update by as much, and the 16-bit copies of the weights round apart within a
// few steps. Here each square reads the whole gradient through a cpc.shard (so that the split
// stays the norm's: the update and its moments are not split) and is split as ZeRO would split
// the update: each rank squares one block, one all-reduce sums the shares, and the norm has the
// same bits with and without ZeRO.
//
#include "passes/Passes.h"
#include "passes/UpdatePlacement.h"
#include "dialects/cpc/Roles.h"

namespace cpc {
#define GEN_PASS_DEF_CPCSPLITGRADNORM
#include "passes/Passes.h.inc"
} // namespace cpc

using namespace mlir;
using namespace cpc;

namespace {

struct CpcSplitGradNormPass : cpc::impl::CpcSplitGradNormBase<CpcSplitGradNormPass> {
  using CpcSplitGradNormBase::CpcSplitGradNormBase;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    if (dp < 2)
      return;
    FailureOr<SmallVector<func::FuncOp>> updating = functionsOrPhases(module, funcs, {Phase::TrainStep, Phase::Apply});
    if (failed(updating))
      return signalPassFailure();
    FailureOr<MeshOp> meshOp = getOrCreateMesh(module, {{"dp", dp}});
    if (failed(meshOp))
      return signalPassFailure();
    Mesh mesh(*meshOp);
    for (func::FuncOp func : *updating)
      func.walk([&](AdamWOp update) {
        std::optional<Layout> split = updateSplit(update, "dp", dp);
        if (!split)
          return;
        Layout whole = parameterReadLayout(update.getParam().getDefiningOp<ParameterOp>()).first;
        for (MulOp square : seedNormSquares(update, *split, mesh)) {
          OpBuilder b(square);
          auto read = b.create<ShardOp>(square.getLoc(), square.getLhs().getType(), square.getLhs(),
                                        whole.toAttr(mesh.ref(), kZeroPriority));
          square->setOperands({read.getResult(), read.getResult()});
        }
      });
  }
};

} // namespace
