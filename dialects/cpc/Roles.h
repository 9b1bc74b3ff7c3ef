//===- Roles.h - reading and writing the role attributes of training IR ---===//
//
// What a function, an argument or a state variable is for is an attribute (CpcAttrs.td:
// PhaseAttr, RuntimeInputAttr, StateRoleAttr), set where it is created (cpc-build-train-step)
// and read by every later layer through these helpers; names are only labels.
//
#ifndef CPC_DIALECTS_CPC_ROLES_H
#define CPC_DIALECTS_CPC_ROLES_H

#include "dialects/cpc/CpcDialect.h"
#include "dialects/cpc/Variables.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinOps.h"
#include "llvm/ADT/StringSet.h"

#include <optional>

namespace cpc {

/// Function attribute holding a PhaseAttr; argument attribute holding a RuntimeInputAttr.
inline constexpr llvm::StringLiteral kPhaseAttrName = "cpc.phase";
inline constexpr llvm::StringLiteral kRuntimeInputAttrName = "cpc.runtime";

inline std::optional<Phase> getPhase(mlir::func::FuncOp func) {
  if (auto attr = func->getAttrOfType<PhaseAttr>(kPhaseAttrName))
    return attr.getValue();
  return std::nullopt;
}

inline void setPhase(mlir::func::FuncOp func, Phase phase) {
  func->setAttr(kPhaseAttrName, PhaseAttr::get(func.getContext(), phase));
}

/// The phases of the functions that data and tensor parallelism shard: a training step's
/// (before a pipeline cuts them) and an inference program.
inline constexpr Phase kShardedPhases[] = {Phase::TrainStep, Phase::Accumulate, Phase::Apply, Phase::Infer};

/// The function of `module` marked with `phase`, or null.
inline mlir::func::FuncOp findPhase(mlir::ModuleOp module, Phase phase) {
  for (auto func : module.getOps<mlir::func::FuncOp>())
    if (getPhase(func) == phase)
      return func;
  return nullptr;
}

inline std::optional<RuntimeInput> getRuntimeInput(mlir::func::FuncOp func, unsigned arg) {
  if (auto attr = func.getArgAttrOfType<RuntimeInputAttr>(arg, kRuntimeInputAttrName))
    return attr.getValue();
  return std::nullopt;
}

inline void setRuntimeInput(mlir::func::FuncOp func, unsigned arg, RuntimeInput input) {
  func.setArgAttr(arg, kRuntimeInputAttrName, RuntimeInputAttr::get(func.getContext(), input));
}

// Dynamic loss scaling (fp16): the scaler's state variables (their roles identify them; the
// names label them in the plan and in IR).
inline constexpr llvm::StringLiteral kLossScaleStateName = "amp.loss_scale";
inline constexpr llvm::StringLiteral kGrowthTrackerStateName = "amp.growth_tracker";
inline constexpr llvm::StringLiteral kOverflowTrackerStateName = "amp.overflow_tracker";

/// A read of the loss-scale state, which starts at `initialScale`.
inline StateOp readLossScale(mlir::OpBuilder &b, mlir::Location loc, double initialScale) {
  auto type = mlir::RankedTensorType::get({}, b.getF32Type());
  return readState(b, loc, StateRole::LossScale, kLossScaleStateName, type, initialScale);
}

// Pipeline parallelism. Op attributes: the model chunk of a forward op (`cpc.stage`, i64, set
// by cpc-pipeline-stages), which autodiff copies onto the ops of the op's gradient and marks
// `cpc.backward`. Function attributes of the split programs: the chunk a forward or backward
// function computes and the pipeline rank (the mesh's pp coordinate) that runs it. Argument and
// result attribute `cpc.transfer` (i64 channel): a value one program of a rank hands to a later
// one of the same microbatch (saved activations, chunks of one rank), which the runtime keeps.
inline constexpr llvm::StringLiteral kStageAttrName = "cpc.stage";
inline constexpr llvm::StringLiteral kBackwardAttrName = "cpc.backward";
inline constexpr llvm::StringLiteral kPipelineChunkAttrName = "cpc.pipeline_chunk";
inline constexpr llvm::StringLiteral kPipelineRankAttrName = "cpc.pipeline_rank";
inline constexpr llvm::StringLiteral kTransferAttrName = "cpc.transfer";

// Activation recompute. Op attribute `cpc.recompute_segment` (i64, set by
// cpc-recompute-segments): the run of forward ops a forward op belongs to, which autodiff copies
// onto the op's gradient ops (marked `cpc.backward`, as for stages); cpc-recompute runs each
// segment's forward again in the backward from the values that cross into it.
inline constexpr llvm::StringLiteral kRecomputeSegmentAttrName = "cpc.recompute_segment";

/// The op labels that say where a forward op's work belongs (its pipeline chunk, its recompute
/// segment): autodiff copies them onto the op's gradient ops; they do not change what the op
/// computes.
inline constexpr llvm::StringLiteral kPlacementLabels[] = {kStageAttrName, kRecomputeSegmentAttrName};

/// Whether attribute `name` is a placement label or the backward mark that comes with them.
inline bool isPlacementLabel(llvm::StringRef name) {
  return name == kBackwardAttrName || llvm::is_contained(kPlacementLabels, name);
}

inline std::optional<int64_t> getRecomputeSegment(mlir::Operation *op) {
  if (auto attr = op->getAttrOfType<mlir::IntegerAttr>(kRecomputeSegmentAttrName))
    return attr.getInt();
  return std::nullopt;
}

inline std::optional<int64_t> getStage(mlir::Operation *op) {
  if (auto attr = op->getAttrOfType<mlir::IntegerAttr>(kStageAttrName))
    return attr.getInt();
  return std::nullopt;
}

/// The pipeline rank that runs `func` (none: every rank).
inline std::optional<int64_t> getPipelineRank(mlir::func::FuncOp func) {
  if (auto attr = func->getAttrOfType<mlir::IntegerAttr>(kPipelineRankAttrName))
    return attr.getInt();
  return std::nullopt;
}

/// The functions named in `names`, or, when it is empty, those of `phases` in module order.
/// Emits an error on `module` and fails for a name that is no function.
inline mlir::FailureOr<llvm::SmallVector<mlir::func::FuncOp>>
functionsOrPhases(mlir::ModuleOp module, llvm::ArrayRef<std::string> names, llvm::ArrayRef<Phase> phases) {
  llvm::SmallVector<mlir::func::FuncOp> funcs;
  for (const std::string &name : names) {
    auto func = module.lookupSymbol<mlir::func::FuncOp>(name);
    if (!func || func.isExternal()) {
      module.emitError("no function @") << name;
      return mlir::failure();
    }
    funcs.push_back(func);
  }
  if (names.empty())
    for (auto func : module.getOps<mlir::func::FuncOp>())
      if (auto phase = getPhase(func); phase && llvm::is_contained(phases, *phase))
        funcs.push_back(func);
  return funcs;
}

/// Names of the state variables read under `root` whose role is `role` (an assign names its
/// variable; this is how a pass learns what an assign writes).
inline llvm::StringSet<> stateNamesWithRole(mlir::Operation *root, StateRole role) {
  llvm::StringSet<> names;
  root->walk([&](StateOp state) {
    if (state.getRole() == role)
      names.insert(state.getName());
  });
  return names;
}

} // namespace cpc

#endif
