//===- cpc-opt.cpp - mlir-opt with the cpc dialect and passes -------------===//
#include "dialects/cpc/CpcDialect.h"
#include "passes/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/DialectRegistry.h"
#include "mlir/Tools/mlir-opt/MlirOptMain.h"
#include "mlir/Transforms/Passes.h"

int main(int argc, char **argv) {
  mlir::DialectRegistry registry;
  registry.insert<cpc::CpcDialect, mlir::func::FuncDialect>();
  mlir::registerTransformsPasses(); // canonicalize, cse, symbol-dce, ...
  cpc::registerCpcPasses();
  cpc::registerCpcPipelines(); // cpc-training-pipeline: what `cpc compile` runs
  return mlir::asMainReturnCode(
      mlir::MlirOptMain(argc, argv, "cpc optimizer driver\n", registry));
}
