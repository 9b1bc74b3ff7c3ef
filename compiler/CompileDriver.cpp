//===- CompileDriver.cpp - a model file to a plan file: what `cpc compile` does -===//
#include "compiler/CompileDriver.h"
#include "compiler/CompileReports.h"
#include "compiler/LayoutSearch.h"
#include "dialects/cpc/Roles.h"
#include "passes/Passes.h"
#include "passes/Sharding.h"
#include "runtime/TrainRecipe.h"

#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/Verifier.h"
#include "mlir/Pass/PassManager.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/raw_ostream.h"

#include <algorithm>
#include <chrono>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <limits>
#include <sstream>
#include <cmath>

namespace cpc {

namespace {

/// --timing: the wall time of each phase of a compile, printed to stderr in one line at the end.
class PhaseClock {
public:
  explicit PhaseClock(bool enabled) : enabled_(enabled) {}
  bool enabled() const { return enabled_; }
  /// The time since the previous mark (or the start) was spent in `phase`.
  void mark(const char *phase) {
    auto now = std::chrono::steady_clock::now();
    phases_.emplace_back(phase, std::chrono::duration<double>(now - last_).count());
    last_ = now;
  }
  void print() const {
    if (!enabled_)
      return;
    double total = 0;
    std::cerr << "timing:";
    for (const auto &[phase, seconds] : phases_) {
      std::cerr << " " << phase << " " << std::fixed << std::setprecision(3) << seconds << " s,";
      total += seconds;
    }
    std::cerr << " total " << total << " s, peak memory " << peakResidentBytes() / 1000000 << " MB\n"
              << std::defaultfloat;
  }

  /// This process image's peak resident memory (VmHWM: unlike getrusage's maxrss, it does not
  /// count the image of the parent that started us).
  static int64_t peakResidentBytes() {
    std::ifstream status("/proc/self/status");
    for (std::string line; std::getline(status, line);)
      if (line.rfind("VmHWM:", 0) == 0)
        return std::stoll(line.substr(6)) * 1024; // "VmHWM:   123456 kB"
    return 0;
  }

private:
  bool enabled_;
  std::chrono::steady_clock::time_point last_ = std::chrono::steady_clock::now();
  std::vector<std::pair<const char *, double>> phases_;
};
/// The mesh axes the plan's batch is split over (cpc-data-parallel's).
std::vector<std::string> batchAxesOf(mlir::ModuleOp module) {
  auto mesh = module.lookupSymbol<MeshOp>("mesh");
  if (!mesh)
    return {};
  MeshAxes axes = batchAxes(Mesh(mesh));
  return std::vector<std::string>(axes.begin(), axes.end());
}

/// Whether @main's first result is a scalar float (a loss): then training is the default.
bool returnsScalarLoss(mlir::ModuleOp module) {
  auto main = module.lookupSymbol<mlir::func::FuncOp>("main");
  if (!main || main.getNumResults() == 0)
    return false;
  auto t = llvm::dyn_cast<mlir::RankedTensorType>(main.getResultTypes()[0]);
  return t && t.getRank() == 0 && llvm::isa<mlir::FloatType>(t.getElementType());
}

/// The batch size of the graph: dim 0 shared by its (non-scalar) inputs.
int64_t graphBatch(mlir::ModuleOp module) {
  auto main = module.lookupSymbol<mlir::func::FuncOp>("main");
  int64_t batch = -1;
  for (mlir::Type t : main.getArgumentTypes()) {
    auto rt = llvm::cast<mlir::RankedTensorType>(t);
    if (rt.getRank() == 0)
      continue;
    if (batch >= 0 && rt.getDimSize(0) != batch)
      throw CompileRequestError("graph inputs disagree on the batch size (dim 0): " + std::to_string(batch) + " and " +
                       std::to_string(rt.getDimSize(0)));
    batch = rt.getDimSize(0);
  }
  return batch;
}

/// Runs a registered pipeline, built into `pm`, on `module`; its passes' notes go to stderr, one
/// line each, and a failure throws with the first diagnostic.
void runPipeline(mlir::MLIRContext &context, mlir::ModuleOp module, mlir::PassManager &pm, const char *what,
                 bool timing, bool quiet, bool verifyEachPass) {
  if (timing)
    pm.enableTiming();
  pm.enableVerifier(verifyEachPass);
  std::string diagnostic;
  mlir::ScopedDiagnosticHandler handler(&context, [&](mlir::Diagnostic &diag) {
    if (diag.getSeverity() == mlir::DiagnosticSeverity::Remark) { // the passes' notes: one line each
      std::string where;
      if (auto name = llvm::dyn_cast<mlir::NameLoc>(diag.getLocation()))
        where = name.getName().str() + ": ";
      if (!quiet)
        std::cerr << "cpc: note: " << where << diag.str() << "\n";
      return mlir::success();
    }
    if (diagnostic.empty())
      diagnostic = diag.str();
    return mlir::success();
  });
  if (mlir::failed(pm.run(module)) || (!verifyEachPass && mlir::failed(mlir::verify(module))))
    throw std::runtime_error(std::string("the ") + what + " pipeline failed: " + diagnostic);
}

/// Where a diagnostic points, for one line: the op's name (a node of the model) or file:line:col.
std::string locationText(mlir::Location loc) {
  if (auto name = llvm::dyn_cast<mlir::NameLoc>(loc))
    return name.getName().str();
  if (auto file = llvm::dyn_cast<mlir::FileLineColLoc>(loc))
    return file.getFilename().str() + ":" + std::to_string(file.getLine()) + ":" + std::to_string(file.getColumn());
  std::string text;
  llvm::raw_string_ostream os(text);
  loc.print(os);
  return os.str();
}

/// buildPlan, its diagnostic (IR the plan cannot hold) thrown as one line naming the op.
Plan buildPlanOrThrow(mlir::MLIRContext &context, mlir::ModuleOp module, std::shared_ptr<const WeightStore> weights,
                      const std::string &source, const PlanOptions &options) {
  std::string diagnostic;
  mlir::ScopedDiagnosticHandler handler(&context, [&](mlir::Diagnostic &diag) {
    if (diagnostic.empty())
      diagnostic = locationText(diag.getLocation()) + ": " + diag.str();
    return mlir::success();
  });
  mlir::FailureOr<Plan> plan = buildPlan(module, std::move(weights), source, options);
  if (mlir::failed(plan))
    throw std::runtime_error("cannot build the plan: " + diagnostic);
  return std::move(*plan);
}

/// What cpc-opt runs to reproduce a pipeline: the registered pipeline with its options, then
/// the passes it expands to.
std::string pipelineText(const std::string &registered, mlir::PassManager &pm) {
  std::string text;
  llvm::raw_string_ostream os(text);
  os << registered << "\n  passes: --pass-pipeline='";
  pm.printAsTextualPipeline(os);
  os << "'";
  return os.str();
}

/// Runs registered pipeline `name` (the `what` pipeline, in its errors) as `build` makes it with
/// `options` (printed as cpc-opt takes them when --print-pipeline asks); returns the functions it leaves with a phase, in module
/// order: the programs of the plan.
template <typename Options>
std::vector<std::string> runNamedPipeline(mlir::MLIRContext &context, mlir::ModuleOp module, const std::string &name,
                                          const char *what, Options &options, void (*build)(mlir::OpPassManager &, const Options &),
                                          const CompileRequest &request, std::ostream &out) {
  mlir::PassManager pm(&context, mlir::ModuleOp::getOperationName());
  build(pm, options);
  std::string named;
  llvm::raw_string_ostream namedOs(named);
  options.print(namedOs); // "{key=value ...}"
  std::string inner = llvm::StringRef(namedOs.str()).trim().drop_front().drop_back().trim().str();
  std::string text = pipelineText("--" + name + (inner.empty() ? "" : "='" + inner + "'"), pm);
  runPipeline(context, module, pm, what, request.timing, request.quiet, request.verifyEachPass);
  if (request.printPipeline)
    out << "pipeline: " << text << "\n";
  std::vector<std::string> functions;
  for (auto func : module.getOps<mlir::func::FuncOp>())
    if (getPhase(func))
      functions.push_back(func.getSymName().str());
  return functions;
}

/// The training pipeline's options from the recipe and the parallel flags.
void setPipelineOptions(TrainingPipelineOptions &options, const TrainRecipe &recipe, int64_t dataParallel,
                        int64_t zeroStage) {
  options.accumulation = recipe.accumulation;
  options.clipGradNorm = recipe.clipGradNorm;
  options.beta1 = recipe.beta1;
  options.beta2 = recipe.beta2;
  options.epsilon = recipe.epsilon;
  options.weightDecay = recipe.weightDecay;
  options.noWeightDecay = recipe.noWeightDecay;
  options.defaultNoDecay = !recipe.decayNormsAndBiases;
  options.dataParallel = dataParallel;
  options.zeroStage = zeroStage;
  options.precision = *symbolizePrecision(recipe.precision); // the recipe checked it
  options.lossScale = recipe.initialScale;
  options.growthFactor = recipe.growthFactor;
  options.backoffFactor = recipe.backoffFactor;
  options.growthInterval = recipe.growthInterval;
  options.hysteresis = recipe.hysteresis;
}

/// Writes `module` as MLIR text (generic-form free, as cpc-opt prints it).
void writeModule(mlir::ModuleOp module, const std::string &path) {
  std::error_code error;
  llvm::raw_fd_ostream out(path, error);
  if (error)
    throw std::runtime_error(path + ": cannot write: " + error.message());
  module.print(out);
  out << "\n"; // as cpc-opt ends its output
}

/// cpc compile's words for the training pipeline's options: the flag, or the config file's key
/// when the value came from there (then the refusal names the file too).
class CompileSpelling : public OptionSpelling {
public:
  explicit CompileSpelling(std::string configPath) : configPath_(std::move(configPath)) {}
  bool tensorParallelFromConfig = false, tensorModeFromConfig = false, tensorDepthFromConfig = false;

  std::string name(TrainingOption option) const override {
    switch (option) {
    case TrainingOption::Accumulation: return "gradient accumulation (gradient_accumulation x --microbatches)";
    case TrainingOption::DataParallel: return "--dp";
    case TrainingOption::Zero: return "--zero";
    case TrainingOption::TensorParallel: return flagOrKey(tensorParallelFromConfig, "--tp", "parallel.tensor.size");
    case TrainingOption::TensorParallelMode:
      return flagOrKey(tensorModeFromConfig, "--tp-mode", "parallel.tensor.mode");
    case TrainingOption::TensorParallelDepth:
      return flagOrKey(tensorDepthFromConfig, "--tp-depth", "parallel.tensor.depth");
    case TrainingOption::SequenceParallel: return "--sp";
    case TrainingOption::TensorParallelSearch: return "--tp-search";
    case TrainingOption::DeviceMemory: return "--device-memory";
    }
    return OptionSpelling::name(option);
  }
  std::string setting(TrainingOption option, const std::string &value) const override {
    std::string spelled = name(option);
    return spelled.rfind("--", 0) == 0 ? spelled + " " + value : spelled + " = " + value;
  }
  /// `problem` as one line: prefixed with the config file when it names one of its keys.
  std::string refusal(const std::string &problem) const {
    return mentionedConfig_ ? configPath_ + ": " + problem : problem;
  }

private:
  std::string flagOrKey(bool fromConfig, const char *flag, const char *key) const {
    if (!fromConfig)
      return flag;
    mentionedConfig_ = true;
    return std::string("key '") + key + "'";
  }
  std::string configPath_;
  mutable bool mentionedConfig_ = false;
};

/// The recipe: defaults, then the config file, then the --set overrides and --precision.
TrainRecipe resolveRecipe(const CompileRequest &request) {
  TrainRecipe recipe;
  if (!request.configPath.empty())
    recipe.loadFile(request.configPath);
  if (!recipe.unusedKeys.empty()) { // never silently ignored
    std::string keys;
    for (const std::string &key : recipe.unusedKeys)
      keys += (keys.empty() ? "" : ", ") + key;
    std::cerr << "cpc: note: " << request.configPath << ": keys cpc does not use: " << keys << "\n";
  }
  for (const std::string &kv : request.overrides) {
    size_t eq = kv.find('=');
    if (eq == std::string::npos || eq == 0)
      throw CompileRequestError("--set expects KEY=VALUE, got '" + kv + "'");
    std::string key = kv.substr(0, eq);
    nlohmann::json value;
    try {
      value = nlohmann::json::parse(kv.substr(eq + 1));
    } catch (const nlohmann::json::parse_error &) {
      value = kv.substr(eq + 1); // a bare string such as cosine
    } catch (const nlohmann::json::exception &) { // e.g. a number beyond double's range
      throw ConfigError("--set " + key + ": key '" + key + "': '" + kv.substr(eq + 1) + "' is out of range");
    }
    recipe.apply({{key, value}}, "--set " + key);
  }
  if (request.precision)
    recipe.precision = stringifyPrecision(*request.precision).str();
  if (request.seed)
    recipe.seed = *request.seed;
  return recipe;
}

/// A flag's value, or the config's when the flag is not given; a flag that contradicts a value
/// the config sets is refused.
int64_t flagOrConfig(std::optional<int64_t> flag, int64_t config, bool configSets, const std::string &flagName,
                     const std::string &key, const std::string &configPath) {
  if (flag && configSets && *flag != config)
    throw CompileRequestError(flagName + " " + std::to_string(*flag) + " disagrees with " + key + " " +
                              std::to_string(config) + " in " + configPath);
  return flag ? *flag : config;
}

/// The tensor-parallel options from the flags, else the config; `spelling` learns which values
/// came from the config.
void resolveTensorParallel(const CompileRequest &request, const TrainRecipe &recipe, TrainingPipelineOptions &options,
                           CompileSpelling &spelling) {
  const std::string &config = request.configPath;
  options.tensorParallel = flagOrConfig(request.tensorParallel, recipe.tensorParallel, recipe.tensorParallel > 1,
                                        "--tp", "parallel.tensor.size", config);
  options.tensorParallelDepth = flagOrConfig(request.tensorDepth, recipe.tensorDepth, recipe.tensorDepth > 0,
                                             "--tp-depth", "parallel.tensor.depth", config);
  std::optional<TensorParallelMode> configMode = symbolizeTensorParallelMode(recipe.tensorMode); // checked by the recipe
  if (request.tensorMode && configMode && *request.tensorMode != *configMode)
    throw CompileRequestError("--tp-mode " + stringifyTensorParallelMode(*request.tensorMode).str() +
                              " disagrees with parallel.tensor.mode " + recipe.tensorMode + " in " + config);
  TensorParallelMode mode = request.tensorMode ? *request.tensorMode : configMode.value_or(TensorParallelMode::OneD);
  options.tensorParallelMode = mode;
  spelling.tensorParallelFromConfig = !request.tensorParallel && recipe.tensorParallel > 1;
  spelling.tensorModeFromConfig = !request.tensorMode && configMode;
  spelling.tensorDepthFromConfig = !request.tensorDepth && recipe.tensorDepth > 0;
  if (mode == TensorParallelMode::TwoHalfD && options.tensorParallelDepth == 0)
    throw CompileRequestError(spelling.refusal(spelling.setting(TrainingOption::TensorParallelMode, "2.5d") +
                                               " needs a depth (--tp-depth D or parallel.tensor.depth)"));
  options.tensorParallelDepth = std::max<int64_t>(options.tensorParallelDepth, 1);
  options.sequenceParallel = request.sequenceParallel;
  options.tensorParallelSearch = request.tensorParallelSearch;
  options.deviceMemory = request.deviceMemory.value_or(0);
  options.profile = request.profilePath;
  std::vector<std::string> rules = recipe.shardRules; // the config's policy first: --shard overrides it
  rules.insert(rules.end(), request.shardRules.begin(), request.shardRules.end());
  for (std::string &rule : rules) // the pipeline's lists split at commas: SPEC dims go as ':'
    std::replace(rule.begin() + rule.rfind('='), rule.end(), ',', ':');
  options.shard = rules;
}

/// The pipeline stages and schedule from the flags, else the config; nullopt without stages.
std::optional<PipelineSchedule> resolvePipeline(const CompileRequest &request, const TrainRecipe &recipe,
                                                TrainingPipelineOptions &options) {
  int64_t stages = flagOrConfig(request.pipelineStages, recipe.pipelineStages, recipe.pipelineStages > 1, "--pp",
                                "parallel.pipeline", request.configPath);
  PipelineScheduleKind kind = request.schedule.value_or(PipelineScheduleKind::OneFOneB);
  int64_t virtualStages =
      request.virtualStages.value_or(kind == PipelineScheduleKind::Interleaved && stages > 1 ? 2 : 1);
  std::optional<PipelineSchedule> schedule;
  if (stages > 1) {
    try {
      schedule = buildPipelineSchedule(kind, stages, virtualStages, recipe.accumulation);
      if (!request.debugSchedule.empty())
        replaceScheduleActions(*schedule, request.debugSchedule);
    } catch (const RuntimeError &e) {
      throw CompileRequestError(e.what());
    }
  } else if (!request.debugSchedule.empty() || !request.pipelineSplit.empty() || virtualStages > 1) {
    throw CompileRequestError("--virtual-stages, --pp-split and --debug-schedule need --pp N (N > 1)");
  }
  options.pipelineStages = stages;
  options.virtualStages = schedule ? virtualStages : 1;
  if (!request.pipelineSplit.empty()) {
    std::vector<std::string> cuts;
    for (llvm::StringRef cut : llvm::split(request.pipelineSplit, ','))
      cuts.push_back(cut.str());
    options.pipelineSplit = cuts;
  }
  return schedule;
}

/// The training pipeline's options for `request`, checked by the pipeline's own check (in the
/// words of the flags and keys given) and against the microbatch of `microbatch` samples.
std::optional<PipelineSchedule> resolveTraining(const CompileRequest &request, const TrainRecipe &recipe,
                                                int64_t microbatch, TrainingPipelineOptions &options) {
  setPipelineOptions(options, recipe, request.dataParallel, request.zeroStage);
  CompileSpelling spelling(request.configPath);
  resolveTensorParallel(request, recipe, options, spelling);
  options.recompute = request.recompute.value_or(RecomputeMode::None);
  options.recomputeBytes = request.recomputeBytes;
  std::optional<PipelineSchedule> schedule = resolvePipeline(request, recipe, options);
  if (std::string problem = trainingOptionsProblem(options, spelling); !problem.empty())
    throw CompileRequestError(spelling.refusal(problem));
  if (request.dataParallel > 1 && microbatch % request.dataParallel)
    throw CompileRequestError("--dp " + std::to_string(request.dataParallel) + " does not divide the microbatch of " +
                              std::to_string(microbatch) + " samples");
  TensorParallelMode mode = options.tensorParallelMode;
  if (mode != TensorParallelMode::OneD) {
    // 2D / 2.5D split each microbatch over dp x depth x q rows of ranks, 3D over dp x q x q.
    int64_t q = tensorParallelSide(mode, options.tensorParallel, options.tensorParallelDepth);
    bool threeD = mode == TensorParallelMode::ThreeD;
    int64_t rows = request.dataParallel * (threeD ? q * q : options.tensorParallelDepth * q);
    if (microbatch % rows)
      throw CompileRequestError(spelling.refusal(
          spelling.setting(TrainingOption::TensorParallelMode, stringifyTensorParallelMode(mode).str()) +
          " splits each microbatch over " + std::to_string(rows) +
          (threeD ? " groups of ranks (dp x q x q)" : " rows of ranks (dp x depth x q)") + ", which do not divide its " +
          std::to_string(microbatch) + " samples"));
  }
  return schedule;
}

/// Builds the training step of `module` as `request` and its `recipe` ask; returns the plan's
/// training metadata (and sets the functions `plan` lowers).
nlohmann::json compileTraining(const CompileRequest &request, TrainRecipe recipe, mlir::MLIRContext &context,
                               mlir::ModuleOp module, PlanOptions &plan, std::ostream &out) {
  if (!returnsScalarLoss(module))
    throw CompileRequestError("--mode train needs a graph whose first output is a scalar loss");
  int64_t microbatch = graphBatch(module);
  if (request.microbatches) // --microbatches is NUM_MICRO_BATCHES; both multiply gradient_accumulation
    recipe.microBatches = *request.microbatches;
  recipe.accumulation *= recipe.microBatches;
  recipe.microBatches = 1;
  if (recipe.totalBatchSize == 0)
    recipe.totalBatchSize = std::max<int64_t>(microbatch, 1) * recipe.accumulation;
  recipe.validate(microbatch, request.configPath.empty() ? "config" : request.configPath);
  TrainingPipelineOptions options;
  std::optional<PipelineSchedule> schedule = resolveTraining(request, recipe, microbatch, options);
  plan.functions =
      runNamedPipeline(context, module, "cpc-training-pipeline", "training", options, buildTrainingPipeline, request, out);
  nlohmann::json training = {
      {"recipe", recipe.toJson()}, {"microbatch", microbatch}, {"programs", plan.functions},
      {"data_parallel", request.dataParallel}, {"tensor_parallel", (int64_t)options.tensorParallel},
      {"zero", request.zeroStage}, {"batch_axes", batchAxesOf(module)}};
  if (options.tensorParallelMode != TensorParallelMode::OneD)
    training["tensor_mode"] = stringifyTensorParallelMode(options.tensorParallelMode).str();
  if (schedule) {
    training["pipeline"] = schedule->toJson();
    printStageTable(module, *schedule, out);
  }
  return training;
}

/// An inference plan takes the layout flags (dp, tp, pp) but none of the training step's.
void refuseTrainingFlags(const CompileRequest &r) {
  if (r.zeroStage > 0)
    throw CompileRequestError("--zero shards optimizer states: it applies to training plans (--mode train)");
  if (r.syncBatchNorm)
    throw CompileRequestError("--sync-bn applies to training plans (--mode train): inference normalizes by the "
                              "running statistics");
  if (r.precision && *r.precision != Precision::FP32)
    throw CompileRequestError("--precision applies to training plans (--mode train)");
  if (r.recompute && *r.recompute != RecomputeMode::None)
    throw CompileRequestError("--recompute trades the backward's memory for time: it applies to training plans "
                              "(--mode train)");
  if (!r.configPath.empty() || !r.overrides.empty())
    throw CompileRequestError("--config and --set describe training; they do not apply to --mode infer");
  if (r.sequenceParallel || (r.tensorMode && *r.tensorMode != TensorParallelMode::OneD) || r.tensorDepth)
    throw CompileRequestError("--mode infer splits tensors as Megatron's 1d layout (--tp, --tp-search, --shard); "
                              "--tp-mode 2d/2.5d/3d, --tp-depth and --sp apply to training plans");
  if ((r.schedule && *r.schedule != PipelineScheduleKind::GPipe) || r.virtualStages || !r.debugSchedule.empty())
    throw CompileRequestError("--mode infer runs its pipeline stages forward only (every forward in microbatch "
                              "order): --schedule 1f1b/interleaved, --virtual-stages and --debug-schedule apply to "
                              "training plans");
}

/// Builds the inference program of `module` in the layout `request` asks for; returns the plan's
/// inference metadata (and sets the functions `plan` lowers).
nlohmann::json compileInference(const CompileRequest &request, mlir::MLIRContext &context, mlir::ModuleOp module,
                                PlanOptions &plan, std::ostream &out) {
  refuseTrainingFlags(request);
  int64_t microbatches = request.microbatches.value_or(1);
  // The batch matters only where it is split (a graph of one rank may take inputs of any shapes).
  int64_t microbatch = request.dataParallel > 1 || microbatches > 1 ? graphBatch(module) : 0;
  InferencePipelineOptions options;
  options.dataParallel = request.dataParallel;
  options.tensorParallel = request.tensorParallel.value_or(1);
  options.shard = request.shardRules;
  for (std::string &rule : options.shard) // the pipeline's lists split at commas: SPEC dims go as ':'
    std::replace(rule.begin() + rule.rfind('='), rule.end(), ',', ':');
  options.tensorParallelSearch = request.tensorParallelSearch;
  options.deviceMemory = request.deviceMemory.value_or(0);
  options.pipelineStages = request.pipelineStages.value_or(1);
  options.profile = request.profilePath;
  for (llvm::StringRef cut : llvm::split(request.pipelineSplit, ','))
    if (!cut.empty())
      options.pipelineSplit.push_back(cut.str());
  CompileSpelling spelling("");
  if (std::string problem = inferenceOptionsProblem(options, spelling); !problem.empty())
    throw CompileRequestError(problem);
  if (request.dataParallel > 1 && (microbatch < 1 || microbatch % request.dataParallel))
    throw CompileRequestError("--dp " + std::to_string(request.dataParallel) + " does not divide the model's batch of " +
                              std::to_string(microbatch) + " samples");
  std::optional<PipelineSchedule> schedule;
  try {
    if (options.pipelineStages > 1)
      schedule = buildPipelineSchedule(PipelineScheduleKind::Forward, options.pipelineStages, 1, microbatches);
    else if (!request.pipelineSplit.empty())
      throw CompileRequestError("--pp-split needs --pp N (N > 1)");
    else if (microbatches > kMaxMicrobatches)
      throw CompileRequestError("--microbatches " + std::to_string(microbatches) + " is beyond " +
                                std::to_string(kMaxMicrobatches));
  } catch (const RuntimeError &e) {
    throw CompileRequestError(e.what());
  }
  std::vector<std::string> outputs; // the model's, in its order (a pipeline's stages return them apart)
  auto main = module.lookupSymbol<mlir::func::FuncOp>("main");
  for (unsigned i = 0; i < main.getNumResults(); ++i) {
    auto name = main.getResultAttrOfType<mlir::StringAttr>(i, "cpc.name");
    outputs.push_back(name ? name.getValue().str() : "output" + std::to_string(i));
  }
  plan.functions =
      runNamedPipeline(context, module, "cpc-inference-pipeline", "inference", options, buildInferencePipeline, request, out);
  nlohmann::json inference = {{"microbatches", microbatches},
                              {"programs", plan.functions},
                              {"data_parallel", request.dataParallel},
                              {"tensor_parallel", (int64_t)options.tensorParallel},
                              {"batch_axes", batchAxesOf(module)},
                              {"outputs", outputs}};
  if (microbatch > 0)
    inference["microbatch"] = microbatch;
  if (schedule) {
    inference["pipeline"] = schedule->toJson();
    printStageTable(module, *schedule, out);
  }
  return inference;
}

/// The closing summary: the predicted peaks and the plan's size.
void printSummary(const CompileRequest &request, const Plan &plan, PlanMode mode, double seconds, std::ostream &out) {
  size_t steps = 0;
  for (const auto &p : plan.programs)
    steps += p.steps.size();
  if (plan.runMetadata().contains("peak_bytes_per_rank")) {
    out << "predicted peak per rank (with the schedule's activations in flight):";
    for (const auto &bytes : plan.runMetadata()["peak_bytes_per_rank"])
      out << " " << bytes.get<int64_t>();
    out << " B\n";
  }
  if (plan.runMetadata().contains("predicted_step")) {
    const nlohmann::json &t = plan.runMetadata()["predicted_step"];
    out << "predicted step time " << 1e3 * t.value("total_s", 0.0) << " ms (compute " << 1e3 * t.value("compute_s", 0.0)
        << ", communication " << 1e3 * t.value("communication_s", 0.0) << ", pipeline idle "
        << 1e3 * t.value("idle_s", 0.0) << " ms; profile " << t.value("profile", "built-in") << ")\n";
  }
  out << "compiled " << request.model << " -> " << request.output << " (" << planModeName(mode) << "): " << steps
      << " steps, arena " << plan.arenaBytesOfRank(0) << " B, predicted peak " << plan.predictedPeakBytes << " B ("
      << seconds << " s)\n";
}

} // namespace

namespace {
ImportedModel importModel(const CompileRequest &request, mlir::MLIRContext &context, const ImportOptions &options) {
  return request.importCache ? request.importCache->import(context, request.model, options)
                             : importOnnxFile(context, request.model, options);
}

/// The import options of `request`: its own plus the recipe's frozen patterns and seed.
ImportOptions importOptionsFor(const CompileRequest &request, const TrainRecipe &recipe) {
  ImportOptions options = request.import;
  for (const std::string &pattern : recipe.frozen)
    options.frozenPatterns.push_back(pattern);
  options.randomSeed = (uint64_t)recipe.seed;
  // Each data-parallel rank's BatchNorm normalizes by its own rows' statistics (torch DDP);
  // --sync-bn by the whole batch's (SyncBatchNorm).
  options.batchStatisticGroups = request.syncBatchNorm ? 1 : request.dataParallel;
  return options;
}

/// compileModel's plan, built and not yet written; its phases marked on `clock`.
Plan buildModelPlan(const CompileRequest &request, std::ostream &out, PhaseClock &clock) {
  TrainRecipe recipe = resolveRecipe(request);
  ImportOptions importOptions = importOptionsFor(request, recipe);
  // Function-level passes run on the functions in parallel, unless the caller compiles several
  // plans at once (cpc plan), where more threads only contend.
  mlir::MLIRContext context(request.parallelPasses ? mlir::MLIRContext::Threading::ENABLED
                                                   : mlir::MLIRContext::Threading::DISABLED);
  ImportedModel model = importModel(request, context, importOptions);
  for (const std::string &warning : model.warnings)
    if (!request.quiet)
      std::cerr << "cpc: warning: " << warning << "\n";
  clock.mark("import");
  if (request.printPipeline) // what `cpc import` needs to write the IR this plan starts from
    out << "import: --seed " << importOptions.randomSeed << " --bn-groups " << importOptions.batchStatisticGroups
        << "\n";
  PlanOptions plan = request.plan;
  plan.mode = request.mode.value_or(returnsScalarLoss(*model.module) ? PlanMode::Train : PlanMode::Infer);
  if (plan.mode == PlanMode::Train) {
    plan.training = compileTraining(request, recipe, context, *model.module, plan, out);
  } else {
    plan.inference = compileInference(request, context, *model.module, plan, out);
  }
  if (request.dumpSharding || request.explainSharding)
    printShardingTable(*model.module, plan.functions, out, /*variablesOnly=*/!request.dumpSharding);
  if (!request.dumpIrPath.empty())
    writeModule(*model.module, request.dumpIrPath);
  clock.mark("pipeline");
  Plan built = buildPlanOrThrow(context, *model.module, model.weights, request.model, plan);
  clock.mark("plan");
  return built;
}

/// --recompute auto: the plan that fits --device-memory (with the layout search's margin) at
/// the least recompute. None first; else the bytes to free start at the excess and grow by
/// what each try still exceeds (the arena's packing and the microbatches in flight make the
/// peak fall by other than the bytes freed), up to everything the backward can recompute.
Plan buildWithinBudget(const CompileRequest &request, std::ostream &out, PhaseClock &clock) {
  bool automatic = request.recompute == RecomputeMode::Auto && request.mode.value_or(PlanMode::Train) == PlanMode::Train;
  if (!automatic)
    return buildModelPlan(request, out, clock);
  if (!request.deviceMemory || *request.deviceMemory <= 0)
    throw CompileRequestError("--recompute auto recomputes what the plan must to fit --device-memory BYTES: give "
                              "the budget (or --recompute none, selective or full)");
  auto fits = [&](const Plan &p) { return (double)p.predictedPeakBytes * (1 + kPeakMargin) <= (double)*request.deviceMemory; };
  int64_t budget = (int64_t)((double)*request.deviceMemory / (1 + kPeakMargin));
  CompileRequest trial = request; // the first try (none) warns as asked; the others are quiet
  if (!trial.importCache) // the model is imported once for all the tries
    trial.importCache = std::make_shared<ImportCache>();
  if (!request.tensorParallelSearch) // the budget is this search's; the pipeline's is the tp search's
    trial.deviceMemory.reset();
  auto attempt = [&](RecomputeMode mode, int64_t bytes, std::string &text) {
    trial.recompute = mode;
    trial.recomputeBytes = bytes;
    std::ostringstream captured;
    Plan plan = buildModelPlan(trial, captured, clock);
    text = captured.str();
    trial.quiet = true;
    return plan;
  };
  std::string text;
  Plan plan = attempt(RecomputeMode::None, 0, text);
  // A try that does not lower the peak (another point of the step holds it, or the arena packs
  // the freed bytes no better) doubles what the next frees; beyond the plain peak there is
  // nothing left to free.
  int64_t plain = plan.predictedPeakBytes, bytes = 0, step = 0, previous = std::numeric_limits<int64_t>::max();
  for (int tries = 0; !fits(plan) && tries < 16 && bytes <= plain; ++tries) {
    step = plan.predictedPeakBytes < previous ? std::max<int64_t>(plan.predictedPeakBytes - budget, 1) : 2 * step;
    previous = plan.predictedPeakBytes;
    bytes += step;
    plan = attempt(RecomputeMode::Auto, bytes, text);
  }
  if (!fits(plan))
    throw CompileRequestError("--device-memory " + std::to_string(*request.deviceMemory) + ": the plan needs " +
                              std::to_string(plan.predictedPeakBytes) + " B per rank (+" +
                              std::to_string((int)std::lround(kPeakMargin * 100)) +
                              "% margin) with as much recompute as lowers its peak (" + std::to_string(plain) +
                              " B without recompute)");
  out << text;
  if (!request.quiet)
    out << "recompute auto: " << bytes << " B of activations per microbatch freed to fit --device-memory "
        << *request.deviceMemory << ": predicted peak " << plan.predictedPeakBytes << " B (" << plain
        << " B without recompute)\n";
  return plan;
}
} // namespace

ModelSummary summarizeModel(const CompileRequest &request) {
  mlir::MLIRContext context;
  ImportedModel model = importModel(request, context, importOptionsFor(request, resolveRecipe(request)));
  ModelSummary summary;
  summary.mode = request.mode.value_or(returnsScalarLoss(*model.module) ? PlanMode::Train : PlanMode::Infer);
  summary.runSeconds = modelSeconds(*model.module, "main", request.plan.profile, summary.mode == PlanMode::Train);
  return summary;
}

Plan compilePlan(const CompileRequest &request, std::ostream &out) {
  PhaseClock clock(false);
  return buildWithinBudget(request, out, clock);
}

void compileModel(const CompileRequest &request, std::ostream &out) {
  auto start = std::chrono::steady_clock::now();
  PhaseClock clock(request.timing);
  Plan built = buildWithinBudget(request, out, clock);
  writePlan(built, request.output);
  clock.mark("write");
  clock.print();
  printSummary(request, built, built.mode,
               std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), out);
}

/// Applies --debug-schedule "R=F0.0,B0.0;R2=...": rank R's list replaced, then re-validated.
void replaceScheduleActions(PipelineSchedule &schedule, const std::string &spec) {
  nlohmann::json j = schedule.toJson();
  for (llvm::StringRef part : llvm::split(spec, ';')) {
    auto [rank, list] = part.split('=');
    unsigned r = 0;
    if (rank.trim().getAsInteger(10, r) || r >= (unsigned)schedule.stages || list.empty())
      throw CompileRequestError("--debug-schedule expects R=ACTION,... with R a pipeline rank, got '" + part.str() + "'");
    nlohmann::json actions = nlohmann::json::array();
    for (llvm::StringRef a : llvm::split(list, ','))
      actions.push_back(a.trim().str());
    j["actions"][r] = actions;
  }
  schedule = PipelineSchedule::fromJson(j);
}

} // namespace cpc
