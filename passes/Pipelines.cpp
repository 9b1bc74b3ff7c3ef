//===- Pipelines.cpp - pass pipelines shared by the tools -----------------===//
#include "passes/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Pass/PassRegistry.h"
#include "mlir/Transforms/Passes.h"
#include "llvm/Support/ErrorHandling.h"

#include <algorithm>
#include <string>

using namespace mlir;

namespace {
/// The pass manager of the passes that work on one function at a time (nested in the module's,
/// so that they run per function; adjacent runs of them share one).
OpPassManager &perFunction(OpPassManager &pm) { return pm.nest<func::FuncOp>(); }

/// The fusions both pipelines end with, on the shapes the kernels run.
void addKernelFusions(OpPassManager &pm) {
  OpPassManager &functions = perFunction(pm);
  functions.addPass(cpc::createCpcFuseResidualNorm());
  functions.addPass(cpc::createCpcFuseEpilogues());
}
} // namespace

void cpc::addImportCleanupPasses(OpPassManager &pm) {
  OpPassManager &functions = perFunction(pm);
  functions.addPass(createCpcFoldLayerNorm());
  functions.addPass(createCpcFuseGelu());
  functions.addPass(mlir::createCanonicalizerPass());
  functions.addPass(createCpcFuseAttention()); // after canonicalization folds k's transpose into the matmul
  functions.addPass(mlir::createCSEPass());
}

namespace {
/// The training pipeline's options that lay out an inference program as `options` ask (no
/// optimizer, no ZeRO: those states do not exist in inference).
void copyLayout(const cpc::InferencePipelineOptions &options, cpc::TrainingPipelineOptions &layout) {
  layout.dataParallel = options.dataParallel;
  layout.tensorParallel = options.tensorParallel;
  layout.shard = std::vector<std::string>(options.shard.begin(), options.shard.end());
  layout.tensorParallelSearch = options.tensorParallelSearch;
  layout.deviceMemory = options.deviceMemory;
  layout.pipelineStages = options.pipelineStages;
  layout.pipelineSplit = std::vector<std::string>(options.pipelineSplit.begin(), options.pipelineSplit.end());
  layout.profile = options.profile;
}
} // namespace

std::string cpc::inferenceOptionsProblem(const InferencePipelineOptions &options, const OptionSpelling &spelling) {
  TrainingPipelineOptions layout;
  copyLayout(options, layout);
  return trainingOptionsProblem(layout, spelling);
}

void cpc::buildInferencePipeline(OpPassManager &pm, const InferencePipelineOptions &options) {
  pm.addPass(createCpcInferenceProgram());
  TrainingPipelineOptions layout;
  copyLayout(options, layout);
  int64_t stages = options.pipelineStages;
  if (stages > 1) {
    CpcPipelineStagesOptions cut;
    cut.chunks = stages;
    cut.split = layout.pipelineSplit;
    cut.profile = options.profile;
    pm.addPass(createCpcPipelineStages(cut));
  }
  if (options.tensorParallel > 1) {
    CpcHeadMajorQkvOptions heads;
    heads.tp = options.tensorParallel;
    pm.addPass(createCpcHeadMajorQkv(heads));
  }
  if (options.dataParallel > 1 || options.tensorParallel > 1 || !options.shard.empty())
    addShardingPasses(pm, layout);
  if (stages > 1) {
    CpcPipelineSplitOptions split;
    split.stages = stages;
    split.chunks = stages;
    pm.addPass(createCpcPipelineSplit(split));
  }
  addKernelFusions(pm);
}

void cpc::buildTrainingPipeline(OpPassManager &pm, const TrainingPipelineOptions &options) {
  int64_t chunks = options.pipelineStages * options.virtualStages;
  if (chunks > 1) { // labels the forward ops; autodiff carries the labels onto their gradients
    CpcPipelineStagesOptions stages;
    stages.chunks = chunks;
    stages.split = options.pipelineSplit;
    stages.profile = options.profile;
    stages.backward = true;
    pm.addPass(createCpcPipelineStages(stages));
  }
  if (options.recompute != RecomputeMode::None) // labels too, within the chunks
    pm.addPass(createCpcRecomputeSegments());
  bool summa = options.tensorParallel > 1 && options.tensorParallelMode != TensorParallelMode::OneD;
  if (options.tensorParallel > 1) { // before autodiff: gradients then come in the stored order
    CpcHeadMajorQkvOptions heads;
    heads.tp = summa ? std::max<int64_t>(tensorParallelSide(options.tensorParallelMode, options.tensorParallel,
                                                             options.tensorParallelDepth), 1)
                     : options.tensorParallel; // 2D / 3D split heads over q ranks
    pm.addPass(createCpcHeadMajorQkv(heads));
  }
  if (options.precision != Precision::FP32) { // after the rewrites that match parameter uses, before gradients
    CpcMixedPrecisionOptions mixed;
    mixed.precision = options.precision;
    pm.addPass(createCpcMixedPrecision(mixed));
  }
  if (summa) // the hidden dim is split (2D, 3D): LayerNorm as its statistics (f32 ones, after autocast)
    perFunction(pm).addPass(createCpcExpandLayerNorm());
  bool lossScaling = options.precision == Precision::FP16; // bf16 has f32's range: no scaling
  CpcAutodiffOptions autodiff;
  autodiff.lossScale = lossScaling ? options.lossScale : 0.0;
  pm.addPass(createCpcAutodiff(autodiff));
  CpcBuildTrainStepOptions step;
  step.lossScale = autodiff.lossScale;
  step.growthFactor = options.growthFactor;
  step.backoffFactor = options.backoffFactor;
  step.growthInterval = options.growthInterval;
  step.hysteresis = options.hysteresis;
  step.accumulation = options.accumulation;
  step.clipGradNorm = options.clipGradNorm;
  step.beta1 = options.beta1;
  step.beta2 = options.beta2;
  step.epsilon = options.epsilon;
  step.weightDecay = options.weightDecay;
  step.noWeightDecay = options.noWeightDecay;
  step.defaultNoDecay = options.defaultNoDecay;
  step.separateApply = chunks > 1;
  pm.addPass(createCpcBuildTrainStep(step));
  pm.addPass(mlir::createCanonicalizerPass());
  pm.addPass(mlir::createCSEPass());
  bool sharded = options.dataParallel > 1 || options.tensorParallel > 1 || !options.shard.empty();
  if (sharded)
    addShardingPasses(pm, options);
  if (options.recompute != RecomputeMode::None) { // per-rank ops (collectives too), before the pipeline split
    CpcRecomputeOptions recompute;
    recompute.mode = options.recompute;
    recompute.bytes = options.recomputeBytes;
    recompute.profile = options.profile;
    pm.addPass(createCpcRecompute(recompute));
  }
  if (!sharded && chunks == 1) {
    OpPassManager &functions = perFunction(pm);
    functions.addPass(createCpcFuseOptimizer());
    functions.addPass(createCpcGroupAdamW());
    addKernelFusions(pm);
    return;
  }
  if (chunks > 1) {
    CpcPipelineSplitOptions split;
    split.stages = options.pipelineStages;
    split.chunks = chunks;
    pm.addPass(createCpcPipelineSplit(split));
  }
  OpPassManager &functions = perFunction(pm);
  functions.addPass(createCpcBucketAllReduce());
  functions.addPass(createCpcBucketAllGather());
  functions.addPass(createCpcFuseOptimizer()); // last: on per-rank shapes, what the kernels run
  functions.addPass(createCpcGroupAdamW());
  addKernelFusions(pm);
}

void cpc::addShardingPasses(OpPassManager &pm, const TrainingPipelineOptions &options) {
  // The passes find the training functions by their cpc.phase.
  if (options.tensorParallel > 1 || !options.shard.empty()) {
    CpcTensorParallelOptions tp;
    tp.dp = options.dataParallel;
    tp.tp = options.tensorParallel;
    tp.mode = options.tensorParallelMode;
    tp.depth = options.tensorParallelDepth;
    tp.shard = options.shard;
    tp.sp = options.sequenceParallel;
    tp.search = options.tensorParallelSearch;
    tp.memoryBudget = options.deviceMemory;
    tp.profile = options.profile;
    pm.addPass(createCpcTensorParallel(tp));
  }
  // In 16-bit training, so that the norm has ZeRO's bits (cpc-zero splits it itself); an f32 norm
  // differs from ZeRO's by an ulp, which does not grow, and dp keeps its one all-reduce.
  if (options.dataParallel > 1 && options.zeroStage == 0 && options.precision != Precision::FP32) {
    CpcSplitGradNormOptions norm;
    norm.dp = options.dataParallel;
    pm.addPass(createCpcSplitGradNorm(norm));
  }
  if (options.zeroStage > 0) { // seeds only: propagation and partitioning run in cpc-data-parallel
    CpcZeroOptions zero;
    zero.stage = options.zeroStage;
    zero.dp = options.dataParallel;
    pm.addPass(createCpcZero(zero));
  }
  CpcDataParallelOptions dp;
  dp.size = options.dataParallel;
  pm.addPass(createCpcDataParallel(dp));
}

std::string cpc::OptionSpelling::name(TrainingOption option) const {
  switch (option) {
  case TrainingOption::Accumulation: return "accumulation";
  case TrainingOption::DataParallel: return "dp";
  case TrainingOption::Zero: return "zero";
  case TrainingOption::TensorParallel: return "tp";
  case TrainingOption::TensorParallelMode: return "tp-mode";
  case TrainingOption::TensorParallelDepth: return "tp-depth";
  case TrainingOption::SequenceParallel: return "sp";
  case TrainingOption::TensorParallelSearch: return "tp-search";
  case TrainingOption::DeviceMemory: return "device-memory";
  }
  llvm_unreachable("a training option without a name");
}

std::string cpc::OptionSpelling::setting(TrainingOption option, const std::string &value) const {
  return name(option) + "=" + value;
}

std::string cpc::trainingOptionsProblem(const TrainingPipelineOptions &o, const OptionSpelling &spelling) {
  using O = TrainingOption;
  auto n = [](int64_t v) { return std::to_string(v); };
  auto name = [&](O option) { return spelling.name(option); };
  auto set = [&](O option, const std::string &value) { return spelling.setting(option, value); };
  if (o.accumulation < 1)
    return name(O::Accumulation) + " must be >= 1, got " + n(o.accumulation);
  if (o.dataParallel < 1 || o.tensorParallel < 1 || o.pipelineStages < 1 || o.virtualStages < 1)
    return "dp, tp, pp and virtual-stages must be >= 1";
  if (o.zeroStage < 0 || o.zeroStage > 3)
    return name(O::Zero) + " must be 0, 1, 2 or 3, got " + n(o.zeroStage);
  if (o.zeroStage > 0 && o.dataParallel < 2)
    return set(O::Zero, n(o.zeroStage)) + " shards over data-parallel ranks: it needs " + name(O::DataParallel) +
           " > 1";
  TensorParallelMode mode = o.tensorParallelMode;
  std::string modeName = stringifyTensorParallelMode(mode).str();
  if (o.tensorParallelDepth > 1 && mode != TensorParallelMode::TwoHalfD)
    return name(O::TensorParallelDepth) + " belongs to " + set(O::TensorParallelMode, "2.5d") + ", not to " +
           set(O::TensorParallelMode, modeName);
  int64_t depth = std::max<int64_t>(o.tensorParallelDepth, 1);
  if (o.tensorParallel > 1 && mode != TensorParallelMode::OneD &&
      tensorParallelSide(mode, o.tensorParallel, depth) == 0)
    return set(O::TensorParallelMode, modeName) + " needs " + name(O::TensorParallel) + " = " +
           (mode == TensorParallelMode::ThreeD ? "q*q*q"
            : mode == TensorParallelMode::TwoD ? "q*q"
                                               : n(depth) + "*q*q") +
           " ranks with q >= 2, got " + set(O::TensorParallel, n(o.tensorParallel));
  if (o.sequenceParallel && mode != TensorParallelMode::OneD)
    return name(O::SequenceParallel) + " is Megatron's sequence parallelism: it needs " +
           set(O::TensorParallelMode, "1d");
  if (o.sequenceParallel && o.tensorParallel < 2)
    return name(O::SequenceParallel) + " splits the sequence over the tensor-parallel ranks: it needs " +
           name(O::TensorParallel) + " > 1";
  if (o.tensorParallelSearch && (o.tensorParallel < 2 || mode != TensorParallelMode::OneD || o.sequenceParallel))
    return name(O::TensorParallelSearch) + " chooses 1d tensor parallelism's layout: it needs " +
           name(O::TensorParallel) + " > 1, " + set(O::TensorParallelMode, "1d") + " and no " +
           name(O::SequenceParallel);
  if (o.deviceMemory < 0)
    return name(O::DeviceMemory) + " must be >= 0 bytes, got " + n(o.deviceMemory);
  if (o.deviceMemory > 0 && !o.tensorParallelSearch)
    return name(O::DeviceMemory) + " is a budget for the layout search: it needs " + name(O::TensorParallelSearch);
  if (o.sequenceParallel && o.accumulation > 1)
    return name(O::SequenceParallel) + " with " + name(O::Accumulation) + " > 1 is not available yet (the gradient "
           "accumulators would be split two ways)";
  return "";
}

namespace {
/// Registers pipeline `name` with options `Options` (as PassPipelineRegistration<Options>), the
/// options checked together by `problem` before `build` runs.
template <typename Options>
void registerCheckedPipeline(StringRef name, StringRef description,
                             std::string (*problem)(const Options &, const cpc::OptionSpelling &),
                             void (*build)(OpPassManager &, const Options &)) {
  std::string prefix = name.str() + ": ";
  registerPassPipeline(
      name, description,
      [=](OpPassManager &pm, StringRef text, function_ref<LogicalResult(const Twine &)> errorHandler) {
        Options options;
        if (failed(options.parseFromString(text)))
          return failure();
        if (std::string refusal = problem(options, cpc::OptionSpelling()); !refusal.empty())
          return errorHandler(prefix + refusal);
        build(pm, options);
        return success();
      },
      [](function_ref<void(const mlir::detail::PassOptions &)> handler) { handler(Options()); });
}
} // namespace

void cpc::registerCpcPipelines() {
  registerCheckedPipeline<TrainingPipelineOptions>(
      "cpc-training-pipeline",
      "The passes `cpc compile` runs on an imported model in training mode: autodiff, the "
      "training step (accumulation, clipping, AdamW), then tensor and data parallelism and ZeRO",
      trainingOptionsProblem, buildTrainingPipeline);
  registerCheckedPipeline<InferencePipelineOptions>(
      "cpc-inference-pipeline",
      "The passes `cpc compile` runs on an imported model in inference mode: the model function as the "
      "inference program, its pipeline stages, tensor and data parallelism, then the residual LayerNorm and "
      "Linear epilogue fusions",
      inferenceOptionsProblem, buildInferencePipeline);
  PassPipelineRegistration<>("cpc-import-pipeline",
                             "The clean-up `cpc import` runs on the imported graph: LayerNorm, GELU and "
                             "attention fusions, canonicalization, CSE",
                             addImportCleanupPasses);
}
