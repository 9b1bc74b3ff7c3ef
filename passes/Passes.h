//===- Passes.h - cpc passes ----------------------------------------------===//
#ifndef CPC_PASSES_PASSES_H
#define CPC_PASSES_PASSES_H

#include "dialects/cpc/CpcDialect.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/Pass/Pass.h"
#include "mlir/Pass/PassOptions.h"

// The cases of the option enums (the dialect's, CpcAttrs.td) for llvm::cl, shared by the passes'
// options, the pipelines' and the tools'.
#define CPC_PRECISION_VALUES                                                                             \
  clEnumValN(::cpc::Precision::FP32, "fp32", "f32 throughout"),                                        \
      clEnumValN(::cpc::Precision::BF16, "bf16", "bf16 matmuls and convolutions, f32 master weights"),   \
      clEnumValN(::cpc::Precision::FP16, "fp16", "fp16 the same, with dynamic loss scaling")
#define CPC_RECOMPUTE_MODE_VALUES                                                                        \
  clEnumValN(::cpc::RecomputeMode::None, "none", "keep every activation the backward reads"),           \
      clEnumValN(::cpc::RecomputeMode::Selective, "selective",                                          \
                 "recompute what is cheap (no GEMM, attention or collective) in the backward"),         \
      clEnumValN(::cpc::RecomputeMode::Full, "full", "recompute each segment's forward in the backward"),     \
      clEnumValN(::cpc::RecomputeMode::Auto, "auto",                                                    \
                 "recompute the values cheapest per byte until recompute-bytes are freed")
#define CPC_TENSOR_PARALLEL_MODE_VALUES                                                                  \
  clEnumValN(::cpc::TensorParallelMode::OneD, "1d", "Megatron: one tp axis"),                           \
      clEnumValN(::cpc::TensorParallelMode::TwoD, "2d", "Optimus: tp = q*q"),                           \
      clEnumValN(::cpc::TensorParallelMode::TwoHalfD, "2.5d", "Tesseract: tp = depth*q*q"),             \
      clEnumValN(::cpc::TensorParallelMode::ThreeD, "3d", "tp = q*q*q")

namespace cpc {
struct CostProfile;
#define GEN_PASS_DECL
#include "passes/Passes.h.inc"

#define GEN_PASS_REGISTRATION
#include "passes/Passes.h.inc"

/// Adds the import clean-up pipeline that `cpc import` runs: fusions, then canonicalization
/// (registered as `cpc-import-pipeline`).
void addImportCleanupPasses(mlir::OpPassManager &pm);


/// Options of the training pipeline: the recipe's optimizer keys and the parallel layout. The
/// names are those of the passes' options.
struct TrainingPipelineOptions : mlir::PassPipelineOptions<TrainingPipelineOptions> {
  Option<int64_t> accumulation{*this, "accumulation", llvm::cl::desc("Microbatches per step"), llvm::cl::init(1)};
  Option<double> clipGradNorm{*this, "clip-grad-norm", llvm::cl::desc("Global-norm clip (0 = off)"),
                              llvm::cl::init(0.0)};
  Option<double> beta1{*this, "beta1", llvm::cl::desc("AdamW beta1"), llvm::cl::init(0.9)};
  Option<double> beta2{*this, "beta2", llvm::cl::desc("AdamW beta2"), llvm::cl::init(0.999)};
  Option<double> epsilon{*this, "epsilon", llvm::cl::desc("AdamW epsilon"), llvm::cl::init(1e-8)};
  Option<double> weightDecay{*this, "weight-decay", llvm::cl::desc("Decoupled weight decay"), llvm::cl::init(0.0)};
  ListOption<std::string> noWeightDecay{*this, "no-weight-decay",
                                        llvm::cl::desc("Regexes of parameters without weight decay")};
  Option<bool> defaultNoDecay{*this, "default-no-decay",
                              llvm::cl::desc("No weight decay on 1-D parameters and names ending in .bias"),
                              llvm::cl::init(true)};
  Option<int64_t> dataParallel{*this, "dp", llvm::cl::desc("Data-parallel ranks"), llvm::cl::init(1)};
  Option<int64_t> zeroStage{*this, "zero", llvm::cl::desc("ZeRO stage over dp (0-3)"), llvm::cl::init(0)};
  Option<int64_t> tensorParallel{*this, "tp", llvm::cl::desc("Tensor-parallel ranks (Megatron 1D)"), llvm::cl::init(1)};
  Option<TensorParallelMode> tensorParallelMode{*this, "tp-mode", llvm::cl::desc("Tensor parallelism: 1d, 2d, 2.5d or 3d"),
                                                llvm::cl::init(TensorParallelMode::OneD),
                                                llvm::cl::values(CPC_TENSOR_PARALLEL_MODE_VALUES)};
  Option<int64_t> tensorParallelDepth{*this, "tp-depth", llvm::cl::desc("2.5d: the depth"), llvm::cl::init(1)};
  ListOption<std::string> shard{*this, "shard", llvm::cl::desc("Manual parameter splits: REGEX=SPEC")};
  Option<int64_t> pipelineStages{*this, "pp", llvm::cl::desc("Pipeline ranks"), llvm::cl::init(1)};
  Option<int64_t> virtualStages{*this, "virtual-stages", llvm::cl::desc("Model chunks per pipeline rank"),
                                llvm::cl::init(1)};
  ListOption<std::string> pipelineSplit{*this, "pp-split",
                                        llvm::cl::desc("Hand cut points: the first op of each chunk but the first")};
  Option<Precision> precision{*this, "precision", llvm::cl::desc("fp32, bf16 or fp16 (mixed precision)"),
                              llvm::cl::init(Precision::FP32), llvm::cl::values(CPC_PRECISION_VALUES)};
  // fp16's dynamic loss scaling (torch GradScaler's defaults; Colossal's naive AMP: interval
  // 1000, hysteresis 2).
  Option<double> lossScale{*this, "loss-scale", llvm::cl::desc("fp16: the initial loss scale"),
                           llvm::cl::init(65536.0)};
  Option<double> growthFactor{*this, "growth-factor", llvm::cl::desc("fp16: scale x this on growth"),
                              llvm::cl::init(2.0)};
  Option<double> backoffFactor{*this, "backoff-factor", llvm::cl::desc("fp16: scale x this on overflow"),
                               llvm::cl::init(0.5)};
  Option<int64_t> growthInterval{*this, "growth-interval", llvm::cl::desc("fp16: clean steps before growth"),
                                 llvm::cl::init(2000)};
  Option<int64_t> hysteresis{*this, "hysteresis", llvm::cl::desc("fp16: overflows before the first backoff"),
                             llvm::cl::init(1)};
  Option<RecomputeMode> recompute{*this, "recompute",
                                  llvm::cl::desc("Activation recompute: none, selective or full"),
                                  llvm::cl::init(RecomputeMode::None), llvm::cl::values(CPC_RECOMPUTE_MODE_VALUES)};
  Option<int64_t> recomputeBytes{*this, "recompute-bytes",
                                 llvm::cl::desc("recompute=auto: activation bytes per microbatch to free"),
                                 llvm::cl::init(0)};
  Option<bool> sequenceParallel{*this, "sp", llvm::cl::desc("Sequence parallelism over tp"), llvm::cl::init(false)};
  Option<int64_t> deviceMemory{*this, "device-memory",
                               llvm::cl::desc("tp-search: bytes per rank for parameters and optimizer states (0: none)"),
                               llvm::cl::init(0)};
  Option<bool> tensorParallelSearch{*this, "tp-search",
                                    llvm::cl::desc("1d: every op's layout over tp by search, not the Megatron patterns"),
                                    llvm::cl::init(false)};
  Option<std::string> profile{*this, "profile",
                              llvm::cl::desc("Cost profile (cpc calibrate) for stage cuts and the search")};
};

/// Options of the inference pipeline: the parallel layout of the model's forward (names as in
/// the training pipeline's options).
struct InferencePipelineOptions : mlir::PassPipelineOptions<InferencePipelineOptions> {
  Option<int64_t> dataParallel{*this, "dp", llvm::cl::desc("Data-parallel ranks"), llvm::cl::init(1)};
  Option<int64_t> tensorParallel{*this, "tp", llvm::cl::desc("Tensor-parallel ranks (Megatron 1D)"), llvm::cl::init(1)};
  ListOption<std::string> shard{*this, "shard", llvm::cl::desc("Manual parameter splits: REGEX=SPEC")};
  Option<bool> tensorParallelSearch{*this, "tp-search",
                                    llvm::cl::desc("Every op's layout over tp by search, not the Megatron patterns"),
                                    llvm::cl::init(false)};
  Option<int64_t> deviceMemory{*this, "device-memory",
                               llvm::cl::desc("tp-search: bytes per rank for the parameters (0: none)"),
                               llvm::cl::init(0)};
  Option<int64_t> pipelineStages{*this, "pp", llvm::cl::desc("Pipeline ranks"), llvm::cl::init(1)};
  ListOption<std::string> pipelineSplit{*this, "pp-split",
                                        llvm::cl::desc("Hand cut points: the first op of each chunk but the first")};
  Option<std::string> profile{*this, "profile",
                              llvm::cl::desc("Cost profile (cpc calibrate) for stage cuts and the search")};
};

/// The side q of the grid a tensor-parallel mode makes of `tp` ranks: 2d q*q, 2.5d depth*q*q,
/// 3d q*q*q (1d: tp); 0 when `tp` is no such number with q >= 2.
int64_t tensorParallelSide(TensorParallelMode mode, int64_t tp, int64_t depth);

/// The training pipeline's options that can refuse one another.
enum class TrainingOption { Accumulation, DataParallel, Zero, TensorParallel, TensorParallelMode, TensorParallelDepth,
                            SequenceParallel, TensorParallelSearch, DeviceMemory };

/// How a caller names the options it was given, so that one check words its refusals in the
/// caller's terms: the pipeline's own (`tp`, `tp=6`: cpc-opt), or a tool's (`--tp`, `--tp 6`,
/// or the config key a value came from: cpc compile).
class OptionSpelling {
public:
  virtual ~OptionSpelling() = default;
  /// The option's name: "tp".
  virtual std::string name(TrainingOption option) const;
  /// The option set to `value`: "tp=6".
  virtual std::string setting(TrainingOption option, const std::string &value) const;
};

/// The option combinations the training pipeline cannot build, in one line spelled by
/// `spelling`; "" when they fit. cpc-opt's registered pipeline and cpc compile both refuse
/// through it.
std::string trainingOptionsProblem(const TrainingPipelineOptions &options, const OptionSpelling &spelling);

/// The option combinations the inference pipeline cannot build ("" when they fit), spelled by
/// `spelling` as trainingOptionsProblem spells them.
std::string inferenceOptionsProblem(const InferencePipelineOptions &options, const OptionSpelling &spelling);

/// The passes `cpc compile` runs on an imported model in inference mode, registered as
/// `cpc-inference-pipeline`: the model function marked as the inference program, then (with a
/// layout) the pipeline stages, tensor and data parallelism and the pipeline split, then the
/// kernel fusions the training pipeline ends with.
void buildInferencePipeline(mlir::OpPassManager &pm, const InferencePipelineOptions &options);

/// The passes `cpc compile` runs on an imported model in training mode, registered as
/// `cpc-training-pipeline` so that `cpc-opt` reproduces the IR a plan is built from.
void buildTrainingPipeline(mlir::OpPassManager &pm, const TrainingPipelineOptions &options);

/// The tensor-parallel, ZeRO and data-parallel passes of the training pipeline.
void addShardingPasses(mlir::OpPassManager &pm, const TrainingPipelineOptions &options);

/// Registers the named pipelines (cpc-opt, and every tool that parses pipelines).
void registerCpcPipelines();

/// Builds `@<name>_grad` from the loss function `@<name>` (what cpc-autodiff runs; also used by
/// passes that price a model's backward before it exists); emits a diagnostic on failure.
mlir::LogicalResult differentiate(mlir::func::FuncOp forward, double lossScale);

/// Estimated seconds of one run of `funcName`'s data ops on one rank under `profile` (and, with
/// `backward`, of their gradient ops), as cpc-pipeline-stages prices them.
double modelSeconds(mlir::ModuleOp module, llvm::StringRef funcName, const CostProfile &profile, bool backward);
} // namespace cpc

#endif
