//===- PlanBuilder.h - lower cpc IR to an execution plan ------------------===//
#ifndef CPC_COMPILER_PLANBUILDER_H
#define CPC_COMPILER_PLANBUILDER_H

#include "frontends/onnx/OnnxImporter.h"
#include "runtime/Plan.h"

#include "mlir/IR/BuiltinOps.h"

namespace cpc {

struct PlanOptions {
  std::string mode = "infer";
  /// Let elementwise ops write over an input that dies at that op.
  bool inPlace = true;
};

/// Lowers `@main` of `module` to a one-rank plan: a linear schedule of kernel steps, reshapes as
/// views, a liveness-based arena layout, and the parameters' initial values (read from `weights`)
/// and constants in the blob. Throws RuntimeError on IR it cannot lower.
Plan buildPlan(mlir::ModuleOp module, const WeightStore &weights, const std::string &source,
               const PlanOptions &options = {});

} // namespace cpc

#endif
