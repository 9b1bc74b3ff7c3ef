//===- Pipelines.cpp - pass pipelines shared by the tools -----------------===//
#include "passes/Passes.h"

#include "mlir/Pass/PassManager.h"
#include "mlir/Transforms/Passes.h"

using namespace mlir;

void cpc::addImportCleanupPasses(OpPassManager &pm) {
  pm.addPass(createCpcFoldLayerNorm());
  pm.addPass(createCpcFuseGelu());
  pm.addPass(mlir::createCanonicalizerPass());
  pm.addPass(mlir::createCSEPass());
}
