//===- InferenceProgram.cpp - the model's forward as the inference program ===//
//
// An inference plan runs the imported model function as it is. This pass gives it its role
// (`cpc.phase = #cpc.phase<infer>`): the parallel passes shard the functions of a phase, the
// partitioner returns an inference program's results whole (they are the model's outputs), the
// pipeline split cuts it into forward programs, and the runtime finds it by its phase.
//
#include "dialects/cpc/Roles.h"
#include "passes/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"

namespace cpc {
#define GEN_PASS_DEF_CPCINFERENCEPROGRAM
#include "passes/Passes.h.inc"
} // namespace cpc

using namespace mlir;
using namespace cpc;

namespace {

struct CpcInferenceProgramPass : cpc::impl::CpcInferenceProgramBase<CpcInferenceProgramPass> {
  using CpcInferenceProgramBase::CpcInferenceProgramBase;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    auto func = module.lookupSymbol<func::FuncOp>(funcName);
    if (!func || func.isExternal()) {
      module.emitError("cpc-inference-program: no function @") << funcName;
      return signalPassFailure();
    }
    if (std::optional<Phase> phase = getPhase(func); phase && *phase != Phase::Infer) {
      func.emitError("cpc-inference-program: @") << funcName << " is already a " << stringifyPhase(*phase)
                                                 << " function";
      return signalPassFailure();
    }
    setPhase(func, Phase::Infer);
  }
};

} // namespace
