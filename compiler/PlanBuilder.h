//===- PlanBuilder.h - lower cpc IR to an execution plan ------------------===//
#ifndef CPC_COMPILER_PLANBUILDER_H
#define CPC_COMPILER_PLANBUILDER_H

#include "frontends/onnx/OnnxImporter.h"
#include "runtime/Plan.h"

#include "mlir/IR/BuiltinOps.h"

namespace cpc {

struct PlanOptions {
  PlanMode mode = PlanMode::Infer;
  /// What the plan runs on: its buffers live in that device's memory (cpc-run binds each rank to
  /// a GPU for cuda).
  DeviceKind device = DeviceKind::Cpu;
  /// The functions to lower, each into one program of the same name (run in this order).
  std::vector<std::string> functions = {"main"};
  /// Let elementwise ops write over an input that dies at that op, and producers of assigned
  /// values write straight into the variable.
  bool inPlace = true;
  /// Refuse a plan in which some rank would wait forever (off only to test the runtime's check).
  bool checkSchedule = true;
  /// Built to be priced, never written (cpc plan's mesh compiles): a plan without pipeline stages
  /// skips the no-hang simulation, which changes none of its predictions (with stages it gives
  /// the buffered sends' peak); the compile that writes the layout runs it.
  bool priceOnly = false;
  /// Leave the parameters' initial values out of the plan (cpc compile --synthetic-weights):
  /// cpc-run fills them with deterministic pseudo-random values. For benchmarks of models whose
  /// weights are too large to move to where the plan runs.
  bool syntheticParameters = false;
  /// What the plan's predicted step time is priced with (cpc compile --profile).
  CostProfile profile = CostProfile::builtIn();
  /// The plan's training metadata (its pipeline schedule is what the no-hang check simulates).
  nlohmann::json training = nlohmann::json::object();
  /// An inference plan's metadata (microbatches, batch axes, its forward pipeline schedule).
  nlohmann::json inference = nlohmann::json::object();
};

/// Lowers the functions of `module` to a one-rank plan: per function a linear schedule of kernel
/// steps, reshapes as views, a liveness-based arena layout; parameters (initial values read from
/// `weights`) and states are persistent buffers shared by all programs; constants live in the
/// blob. The blob is left as pieces made on demand (Plan::blobPieces): writePlan streams the
/// weights from `weights` into the file, so they are never held twice. IR it cannot lower fails
/// with a diagnostic at the op (the weights' own read errors still throw RuntimeError).
mlir::FailureOr<Plan> buildPlan(mlir::ModuleOp module, std::shared_ptr<const WeightStore> weights, const std::string &source,
                                const PlanOptions &options = {});

} // namespace cpc

#endif
