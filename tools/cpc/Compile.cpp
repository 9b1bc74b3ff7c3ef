//===- Compile.cpp - cpc compile: ONNX -> execution plan ------------------===//
#include "compiler/PlanBuilder.h"
#include "dialects/cpc/Roles.h"
#include "passes/Passes.h"
#include "passes/Sharding.h"
#include "runtime/PipelineSchedule.h"
#include "runtime/TrainRecipe.h"
#include "tools/cpc/Commands.h"

#include "mlir/IR/MLIRContext.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Transforms/Passes.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/raw_ostream.h"

#include <chrono>
#include <fstream>
#include <optional>
#include <iomanip>
#include <set>
#include <iostream>

namespace cpc::tools {

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
const char *kCompileUsage = R"(Usage: cpc compile MODEL.onnx -o PLAN.bin [options]

Options:
  -o FILE                    Where to write the plan (required)
  --mode train|infer         train: the training step (default when the graph's first output is
                             a scalar loss); infer: the forward computation
  --config CFG.json          Training recipe (Colossal-AI keys: TOTAL_BATCH_SIZE, LR, WEIGHT_DECAY,
                             NUM_EPOCHS, WARMUP_EPOCHS, gradient_accumulation, clip_grad_norm,
                             NUM_MICRO_BATCHES, parallel, fp16; cpc keys: BETAS, EPS, MIN_LR,
                             lr_schedule, STEPS_PER_EPOCH, frozen, no_weight_decay)
  --set KEY=VALUE            Override one config key (VALUE is JSON, e.g. --set LR=1e-3); repeatable
  --input-shape NAME=AxBxC   Static shape for a graph input with symbolic dims (repeatable)
  --frozen REGEX             Treat matching parameters as frozen (repeatable)
  --zero 0|1|2|3             ZeRO stage with --dp: 1 shards the optimizer states and the update over
                             the data-parallel ranks, 2 also reduce-scatters the gradients, 3 also
                             stores the parameters as per-rank blocks, all-gathered before each use
                             (with --tp: each tp block split over dp along a dim tp left whole)
  --precision fp32|bf16|fp16 Mixed precision (training; or the config's fp16.mode / precision):
                             matmul and conv in 16-bit, softmax, norms, losses, sums and exp/log
                             in f32, f32 master weights and optimizer states; fp16 scales the
                             loss dynamically and skips a step whose gradients overflow
  --device cpu|cuda          What the plan runs on (default cpu): cuda keeps every tensor in GPU
                             memory and runs the CUDA kernels (cuBLASLt, cuDNN, own) and NCCL
                             collectives; cpc-run binds local rank r to GPU r
  --synthetic-weights        Leave the parameters' values out of the plan: cpc-run starts from
                             deterministic pseudo-random values (std 0.02), the same for every
                             layout. For benchmarks of models too large to move with their weights
  --dump-sharding            Print each split or partial value: global shape, sharding, local shape
  --print-pipeline           Print the registered pipeline run on the imported model (training or
                             inference): with `cpc import`, cpc-opt reproduces the plan's IR
  --dump-ir FILE             Write the IR the plan is built from
  --timing                   Print the wall time of each phase (import, pipeline, plan, write) and
                             MLIR's per-pass timing of the training pipeline to stderr
  --dp N                     Data parallelism over N ranks (training): each rank takes 1/N of
                             every microbatch; gradients are all-reduced
  --tp N                     Tensor parallelism over N ranks (training; Megatron 1D, or the config's
                             parallel.tensor.size): MLPs split column- then row-parallel. The mesh
                             is dp x tp, rank = dp index * N + tp index (a dp group's tp ranks are
                             neighbours); the tp ranks of one dp group read the same samples
  --tp-mode 1d|2d|2.5d|3d    Tensor-parallel layout (or the config's parallel.tensor.mode): 1d is
                             Megatron's; 2d (Optimus, --tp q*q) splits activations [b/q, s, h/q]
                             and weights [in/q, out/q] over a q x q grid (mesh dp x tp_row x
                             tp_col) and multiplies by SUMMA; 2.5d (Tesseract, --tp d*q*q) adds a
                             depth axis tp_dep that splits the batch, weights replicated over it;
                             3d (--tp q*q*q, mesh dp x tp_wt x tp_in x tp_out) splits activations
                             [b/q^2, s, h/q] and weights [in/q^2, out/q]: all-gathers, a local
                             GEMM and a reduce-scatter per matmul
  --tp-depth D               2.5d: the depth d (or parallel.tensor.depth)
  --sp                       Sequence parallelism with --tp: LayerNorm and residual regions split along
                             the sequence over tp; each block's all-reduces become all-gather +
                             reduce-scatter
  --shard REGEX=SPEC         Split the parameters whose name matches REGEX as SPEC, one entry per
                             dim: '-' (whole) or mesh axes joined by '*', e.g. 'fc1\.weight=tp,-'
                             (repeatable; overrides the Megatron choice and the config's
                             parallel.tensor.shard policy)
  --pp N                     Pipeline parallelism over N ranks (training; or the config's
                             parallel.pipeline): the model is cut into N stages balanced by cost
                             (a table of the stages is printed), each stage its own programs;
                             the mesh is pp x dp x tp (a stage's ranks are neighbours)
  --microbatches M           Microbatches per step (NUM_MICRO_BATCHES; multiplies
                             gradient_accumulation): global batch = M x the model's batch
  --schedule gpipe|1f1b|interleaved
                             The pipeline schedule (default 1f1b)
  --virtual-stages V         Model chunks per pipeline rank (interleaved; default 2 there)
  --pp-split NAME,...        Cut the stages by hand: before the first op whose name contains
                             each NAME (N - 1 names, or N x V - 1 with --virtual-stages)
  --debug-schedule R=A,...   Replace pipeline rank R's action list (F<chunk>.<mb>, B<chunk>.<mb>;
                             ';' between ranks), e.g. to see the no-hang check refuse a schedule
  --debug-unchecked          Write the plan even if the no-hang check fails (to test cpc-run's)
  --no-inplace               Never let an op write its result over an input
)";

/// The option enums by their names, which the flags and the config have checked.
TensorParallelMode tensorModeNamed(const std::string &name) {
  std::optional<TensorParallelMode> mode = symbolizeTensorParallelMode(name);
  if (!mode)
    throw UsageError("tensor-parallel mode '" + name + "' is not 1d, 2d, 2.5d or 3d");
  return *mode;
}
Precision precisionNamed(const std::string &name) {
  std::optional<Precision> precision = symbolizePrecision(name);
  if (!precision)
    throw UsageError("precision '" + name + "' is not fp32, bf16 or fp16");
  return *precision;
}

/// The tensor-parallel mode and depth from the flags, else the config; checks that tp fits the
/// mode (2d: q*q, 2.5d: depth*q*q, 3d: q*q*q, with q >= 2) in one line naming the flags or the config's
/// keys. Returns q (1 for 1d).
int64_t resolveTensorMode(std::string &mode, int64_t &depth, int64_t tp, bool tpFromFlag, const TrainRecipe &recipe,
                          const std::string &configPath) {
  if (!mode.empty() && !recipe.tensorMode.empty() && mode != recipe.tensorMode)
    throw UsageError("--tp-mode " + mode + " disagrees with parallel.tensor.mode " + recipe.tensorMode + " in " +
                     configPath);
  if (depth > 0 && recipe.tensorDepth > 0 && depth != recipe.tensorDepth)
    throw UsageError("--tp-depth " + std::to_string(depth) + " disagrees with parallel.tensor.depth " +
                     std::to_string(recipe.tensorDepth) + " in " + configPath);
  bool modeFromFlag = !mode.empty(), depthFromFlag = depth > 0;
  if (mode.empty())
    mode = recipe.tensorMode.empty() ? "1d" : recipe.tensorMode;
  if (depth == 0)
    depth = recipe.tensorDepth;
  // Where a problem is: the flag, or the config's key.
  auto where = [&](bool fromFlag, const std::string &flag, const std::string &key) {
    return fromFlag ? flag : configPath + ": key '" + key + "'";
  };
  if (depth > 0 && mode != "2.5d")
    throw UsageError(where(depthFromFlag, "--tp-depth", "parallel.tensor.depth") +
                     ": a depth belongs to the 2.5d mode, not to " + mode);
  if (mode == "1d")
    return 1;
  std::string modeAt = where(modeFromFlag, "--tp-mode " + mode, "parallel.tensor.mode");
  if (mode == "2.5d" && depth == 0)
    throw UsageError(modeAt + ": 2.5d needs a depth (--tp-depth D or parallel.tensor.depth)");
  int64_t d = std::max<int64_t>(depth, 1), q = tensorParallelSide(tensorModeNamed(mode), tp, d);
  if (q == 0 && mode == "3d")
    throw UsageError(modeAt + ": 3d needs " + std::string(tpFromFlag ? "--tp" : "parallel.tensor.size") +
                     " = q*q*q with q >= 2 (8, 27, 64, ...), got " + std::to_string(tp));
  if (q == 0)
    throw UsageError(modeAt + ": " + mode + " needs " + (tpFromFlag ? "--tp" : "parallel.tensor.size") + " = " +
                     (mode == "2d" ? "q*q" : std::to_string(d) + "*q*q") + " with q >= 2 (" +
                     (mode == "2d" ? "4, 9, 16" : std::to_string(4 * d) + ", " + std::to_string(9 * d)) +
                     ", ...), got " + std::to_string(tp));
  depth = d;
  return q;
}

/// The mesh axes the plan's batch is split over (cpc-data-parallel's).
std::vector<std::string> batchAxesOf(mlir::ModuleOp module) {
  auto mesh = module.lookupSymbol<MeshOp>("mesh");
  if (!mesh)
    return {};
  MeshAxes axes = batchAxes(Mesh(mesh));
  return std::vector<std::string>(axes.begin(), axes.end());
}

/// The value of a --dp/--tp flag: a number of ranks in [1, 4096].
int64_t parseRanks(const std::string &flag, const std::string &v) {
  char *end = nullptr;
  long long n = std::strtoll(v.c_str(), &end, 10);
  if (v.empty() || *end || n < 1 || n > 4096)
    throw UsageError(flag + " expects a positive number of ranks, got '" + v + "'");
  return n;
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
      throw UsageError("graph inputs disagree on the batch size (dim 0): " + std::to_string(batch) + " and " +
                       std::to_string(rt.getDimSize(0)));
    batch = rt.getDimSize(0);
  }
  return batch;
}

/// Runs a registered pipeline, built into `pm`, on `module`; its passes' notes go to stderr, one
/// line each, and a failure throws with the first diagnostic.
void runPipeline(mlir::MLIRContext &context, mlir::ModuleOp module, mlir::PassManager &pm, const char *what,
                 bool timing) {
  if (timing)
    pm.enableTiming();
  std::string diagnostic;
  mlir::ScopedDiagnosticHandler handler(&context, [&](mlir::Diagnostic &diag) {
    if (diag.getSeverity() == mlir::DiagnosticSeverity::Remark) { // the passes' notes: one line each
      std::string where;
      if (auto name = llvm::dyn_cast<mlir::NameLoc>(diag.getLocation()))
        where = name.getName().str() + ": ";
      std::cerr << "cpc: note: " << where << diag.str() << "\n";
      return mlir::success();
    }
    if (diagnostic.empty())
      diagnostic = diag.str();
    return mlir::success();
  });
  if (mlir::failed(pm.run(module)))
    throw std::runtime_error(std::string("the ") + what + " pipeline failed: " + diagnostic);
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

/// Runs the training pipeline; returns its text (see pipelineText).
std::string runTrainingPipeline(mlir::MLIRContext &context, mlir::ModuleOp module,
                                TrainingPipelineOptions &options, bool timing) {
  mlir::PassManager pm(&context, mlir::ModuleOp::getOperationName());
  buildTrainingPipeline(pm, options);
  std::string named;
  llvm::raw_string_ostream namedOs(named);
  options.print(namedOs); // "{key=value ...}"
  std::string text = pipelineText(
      "--cpc-training-pipeline='" + llvm::StringRef(namedOs.str()).trim().drop_front().drop_back().trim().str() + "'", pm);
  runPipeline(context, module, pm, "training", timing);
  return text;
}

/// Runs the inference pipeline; returns its text.
std::string runInferencePipeline(mlir::MLIRContext &context, mlir::ModuleOp module, bool timing) {
  mlir::PassManager pm(&context, mlir::ModuleOp::getOperationName());
  buildInferencePipeline(pm);
  std::string text = pipelineText("--cpc-inference-pipeline", pm);
  runPipeline(context, module, pm, "inference", timing);
  return text;
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
  options.dataParallel = dataParallel;
  options.zeroStage = zeroStage;
  options.precision = precisionNamed(recipe.precision);
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

std::string typeString(mlir::Type t) {
  std::string s;
  llvm::raw_string_ostream os(s);
  t.print(os);
  return s;
}

/// Global shape of a local value laid out as `sharding` on `mesh`.
std::string globalShape(mlir::RankedTensorType local, ShardingAttr sharding, MeshOp mesh) {
  std::string s = "[";
  for (int64_t d = 0; d < local.getRank(); ++d) {
    int64_t parts = 1;
    for (llvm::StringRef axis : sharding.getAxesOfDim(d))
      parts *= mesh.getAxisSize(axis);
    s += (d ? "x" : "") + std::to_string(local.getDimSize(d) * parts);
  }
  return s + "]";
}

std::string shardingString(ShardingAttr sharding) {
  std::string s = "[";
  for (unsigned d = 0; d < sharding.getDimAxes().size(); ++d) {
    auto axes = sharding.getAxesOfDim(d);
    s += d ? ", " : "";
    s += axes.empty() ? "-" : llvm::join(axes, "*");
  }
  s += "]";
  auto partial = sharding.getPartialAxisNames();
  if (!partial.empty())
    s += " partial(" + llvm::join(partial, ",") + ")";
  return s;
}

/// The --dump-sharding table: every input, variable and op result that is split or partial.
void printShardingTable(mlir::ModuleOp module, const std::vector<std::string> &functions) {
  auto mesh = module.lookupSymbol<MeshOp>("mesh");
  if (mesh) {
    std::cout << "sharding over mesh @" << mesh.getSymName().str() << " (";
    for (auto [i, size] : llvm::enumerate(mesh.getShape()))
      std::cout << (i ? " x " : "") << llvm::cast<mlir::StringAttr>(mesh.getAxisNames()[i]).getValue().str() << "="
                << size;
    std::cout << ")\n";
  } else {
    std::cout << "sharding:\n";
    std::cout << "  one rank: every value is whole\n";
    return;
  }
  auto row = [](const std::string &fn, const std::string &value, const std::string &global, const std::string &sh,
                const std::string &local) {
    std::cout << "  " << std::left << std::setw(12) << fn << std::setw(52) << value.substr(0, 51) << std::setw(18)
              << global << std::setw(22) << sh << local << "\n";
  };
  row("function", "value", "global shape", "sharding", "local shape");
  for (const std::string &name : functions) {
    auto func = module.lookupSymbol<mlir::func::FuncOp>(name);
    if (!func)
      continue;
    for (auto arg : func.getArguments()) {
      auto sharding = func.getArgAttrOfType<ShardingAttr>(arg.getArgNumber(), "cpc.sharding");
      auto argName = func.getArgAttrOfType<mlir::StringAttr>(arg.getArgNumber(), "cpc.name");
      if (!sharding)
        continue;
      auto t = llvm::cast<mlir::RankedTensorType>(arg.getType());
      row(name, "input " + (argName ? argName.getValue().str() : std::string("?")), globalShape(t, sharding, mesh),
          shardingString(sharding), typeString(t));
    }
    std::set<std::string> variablesShown; // a variable may be read at several places
    func.walk([&](mlir::Operation *op) {
      auto shardings = op->getAttrOfType<mlir::ArrayAttr>("cpc.shardings");
      // Variables stored split (tensor parallelism) carry their layout as `sharding`.
      if (!shardings && llvm::isa<ParameterOp, StateOp>(op))
        if (auto stored = op->getAttrOfType<ShardingAttr>("sharding"))
          shardings = mlir::ArrayAttr::get(op->getContext(), {stored});
      if (!shardings)
        return;
      std::string label = op->getName().getStringRef().str();
      if (auto nameLoc = llvm::dyn_cast<mlir::NameLoc>(op->getLoc()))
        label += " " + nameLoc.getName().str();
      // Stored blocks of parameters and optimizer states (tensor parallelism, ZeRO).
      if (auto param = llvm::dyn_cast<ParameterOp>(op))
        label = "param " + param.getName().str();
      else if (auto state = llvm::dyn_cast<StateOp>(op))
        label = "state " + state.getName().str();
      if (llvm::isa<ParameterOp, StateOp>(op) && !variablesShown.insert(label).second)
        return;
      for (auto [i, attr] : llvm::enumerate(shardings)) {
        auto sharding = llvm::cast<ShardingAttr>(attr);
        auto t = llvm::cast<mlir::RankedTensorType>(op->getResult(i).getType());
        row(name, label, globalShape(t, sharding, mesh),
            shardingString(sharding), typeString(t));
      }
    });
  }
}

/// Applies --debug-schedule "R=F0.0,B0.0;R2=...": rank R's list replaced, then re-validated.
void replaceActions(PipelineSchedule &schedule, const std::string &spec) {
  nlohmann::json j = schedule.toJson();
  for (llvm::StringRef part : llvm::split(spec, ';')) {
    auto [rank, list] = part.split('=');
    unsigned r = 0;
    if (rank.trim().getAsInteger(10, r) || r >= (unsigned)schedule.stages || list.empty())
      throw UsageError("--debug-schedule expects R=ACTION,... with R a pipeline rank, got '" + part.str() + "'");
    nlohmann::json actions = nlohmann::json::array();
    for (llvm::StringRef a : llvm::split(list, ','))
      actions.push_back(a.trim().str());
    j["actions"][r] = actions;
  }
  schedule = PipelineSchedule::fromJson(j);
}

/// The stage table: per chunk its pipeline rank, ops, estimated FLOPs, parameter and boundary bytes.
void printStageTable(mlir::ModuleOp module, const PipelineSchedule &schedule) {
  auto table = module->getAttrOfType<mlir::ArrayAttr>("cpc.pipeline_chunks");
  if (!table)
    return;
  std::cout << "pipeline: " << schedule.stages << " stages x " << schedule.virtualStages << " chunks, "
            << schedule.microbatches << " microbatches, " << scheduleName(schedule.kind) << ", bubble "
            << std::fixed << std::setprecision(3) << schedule.bubbleFraction() << std::defaultfloat << "\n";
  std::cout << "  chunk  rank     ops        GFLOP   est. fwd ms   param bytes  in bytes  first op\n";
  for (mlir::Attribute a : table) {
    auto d = llvm::cast<mlir::DictionaryAttr>(a);
    auto get = [&](const char *k) { return llvm::cast<mlir::IntegerAttr>(d.get(k)).getInt(); };
    double flops = llvm::cast<mlir::FloatAttr>(d.get("flops")).getValueAsDouble();
    double seconds = llvm::cast<mlir::FloatAttr>(d.get("seconds")).getValueAsDouble();
    std::cout << "  " << std::setw(5) << get("chunk") << std::setw(6) << get("chunk") % schedule.stages
              << std::setw(8) << get("ops") << std::setw(13) << std::setprecision(4) << flops / 1e9
              << std::setw(14) << std::setprecision(4) << seconds * 1e3 << std::setw(14) << get("parameter_bytes") << std::setw(10) << get("boundary_bytes") << "  "
              << llvm::cast<mlir::StringAttr>(d.get("first_op")).getValue().str() << "\n";
  }
}

} // namespace

int runCompile(int argc, char **argv) {
  std::string input, output, mode, configPath;
  int64_t dataParallel = 1, tensorParallel = 0; // 0: from the config
  std::string tensorMode;                        // empty: from the config
  int64_t tensorDepth = 0;                       // 0: from the config
  int64_t pipelineStages = 0, microbatches = 0, virtualStages = 0;
  std::string scheduleName = "1f1b", debugSchedule, pipelineSplit, precision;
  std::vector<std::string> shardRules;
  bool dumpSharding = false, printPipeline = false, sequenceParallel = false, timing = false;
  std::string dumpIrPath;
  int64_t zeroStage = 0;
  std::vector<std::string> overrides;
  ImportOptions importOptions;
  PlanOptions planOptions;
  for (int i = 2; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--help" || arg == "-h") {
      std::cout << kCompileUsage;
      return 0;
    } else if (arg == "-o") {
      output = takeValue(argc, argv, i);
    } else if (arg == "--mode") {
      mode = takeValue(argc, argv, i);
    } else if (arg == "--config") {
      configPath = takeValue(argc, argv, i);
    } else if (arg == "--zero") {
      std::string v = takeValue(argc, argv, i);
      if (v != "0" && v != "1" && v != "2" && v != "3")
        throw UsageError("--zero expects 0, 1, 2 or 3, got '" + v + "'");
      zeroStage = std::stoi(v);
    } else if (arg == "--dump-sharding") {
      dumpSharding = true;
    } else if (arg == "--timing") {
      timing = true;
    } else if (arg == "--print-pipeline") {
      printPipeline = true;
    } else if (arg == "--dump-ir") {
      dumpIrPath = takeValue(argc, argv, i);
    } else if (arg == "--dp") {
      dataParallel = parseRanks("--dp", takeValue(argc, argv, i));
    } else if (arg == "--tp") {
      tensorParallel = parseRanks("--tp", takeValue(argc, argv, i));
    } else if (arg == "--tp-mode") {
      tensorMode = takeValue(argc, argv, i);
      if (tensorMode != "1d" && tensorMode != "2d" && tensorMode != "2.5d" && tensorMode != "3d")
        throw UsageError("--tp-mode expects 1d, 2d, 2.5d or 3d, got '" + tensorMode + "'");
    } else if (arg == "--tp-depth") {
      tensorDepth = parseRanks("--tp-depth", takeValue(argc, argv, i));
    } else if (arg == "--pp") {
      pipelineStages = parseRanks("--pp", takeValue(argc, argv, i));
    } else if (arg == "--microbatches") {
      microbatches = parseRanks("--microbatches", takeValue(argc, argv, i));
    } else if (arg == "--virtual-stages") {
      virtualStages = parseRanks("--virtual-stages", takeValue(argc, argv, i));
    } else if (arg == "--schedule") {
      scheduleName = takeValue(argc, argv, i);
      if (scheduleName != "gpipe" && scheduleName != "1f1b" && scheduleName != "interleaved")
        throw UsageError("--schedule expects gpipe, 1f1b or interleaved, got '" + scheduleName + "'");
    } else if (arg == "--pp-split") {
      pipelineSplit = takeValue(argc, argv, i);
    } else if (arg == "--debug-schedule") {
      debugSchedule = takeValue(argc, argv, i);
    } else if (arg == "--debug-unchecked") {
      planOptions.checkSchedule = false;
      std::cerr << "cpc compile: warning: --debug-unchecked writes the plan even if some rank would wait "
                   "forever (cpc-run still refuses such a plan)\n";
    } else if (arg == "--precision") {
      precision = takeValue(argc, argv, i);
      if (precision != "fp32" && precision != "bf16" && precision != "fp16")
        throw UsageError("--precision expects fp32, bf16 or fp16, got '" + precision + "'");
    } else if (arg == "--device") {
      std::string v = takeValue(argc, argv, i);
      auto device = parseDeviceKind(v);
      if (!device)
        throw UsageError("--device expects cpu or cuda, got '" + v + "'");
      planOptions.device = *device;
    } else if (arg == "--sp") {
      sequenceParallel = true;
    } else if (arg == "--shard") {
      std::string v = takeValue(argc, argv, i);
      if (v.find('=') == std::string::npos || v[0] == '=')
        throw UsageError("--shard expects REGEX=SPEC, got '" + v + "'");
      shardRules.push_back(v);
    } else if (arg == "--set") {
      overrides.push_back(takeValue(argc, argv, i));
    } else if (arg == "--no-inplace") {
      planOptions.inPlace = false;
    } else if (arg == "--synthetic-weights") {
      planOptions.syntheticParameters = true;
    } else if (parseImportOption(argc, argv, i, importOptions)) {
    } else if (!arg.empty() && arg[0] == '-') {
      throw UsageError("unknown option '" + arg + "' for 'cpc compile' (see cpc compile --help)");
    } else if (input.empty()) {
      input = arg;
    } else {
      throw UsageError("more than one model given ('" + input + "' and '" + arg + "')");
    }
  }
  if (input.empty())
    throw UsageError("'cpc compile' needs a model file (see cpc compile --help)");
  if (output.empty())
    throw UsageError("'cpc compile' needs -o PLAN.bin");
  if (!mode.empty() && mode != "infer" && mode != "train")
    throw UsageError("--mode " + mode + " is not a mode (use train or infer)");

  // The recipe: defaults, then the config file, then --set overrides.
  TrainRecipe recipe;
  if (!configPath.empty())
    recipe.loadFile(configPath);
  for (const std::string &kv : overrides) {
    size_t eq = kv.find('=');
    if (eq == std::string::npos || eq == 0)
      throw UsageError("--set expects KEY=VALUE, got '" + kv + "'");
    nlohmann::json value;
    try {
      value = nlohmann::json::parse(kv.substr(eq + 1));
    } catch (const nlohmann::json::parse_error &) {
      value = kv.substr(eq + 1); // a bare string such as cosine
    } catch (const nlohmann::json::exception &) { // e.g. a number beyond double's range
      throw ConfigError("--set " + kv.substr(0, eq) + ": key '" + kv.substr(0, eq) + "': '" + kv.substr(eq + 1) +
                        "' is out of range");
    }
    recipe.apply({{kv.substr(0, eq), value}}, "--set " + kv.substr(0, eq));
  }
  if (!precision.empty())
    recipe.precision = precision;
  for (const auto &pattern : recipe.frozen)
    importOptions.frozenPatterns.push_back(pattern);

  auto start = std::chrono::steady_clock::now();
  mlir::MLIRContext context;
  context.disableMultithreading();
  PhaseClock clock(timing);
  ImportedModel model = importOnnxFile(context, input, importOptions);
  clock.mark("import");
  if (mode.empty())
    mode = returnsScalarLoss(*model.module) ? "train" : "infer";
  planOptions.mode = *findPlanMode(mode); // checked with the flags
  nlohmann::json training;
  if (mode == "train") {
    if (!returnsScalarLoss(*model.module))
      throw UsageError("--mode train needs a graph whose first output is a scalar loss");
    int64_t microbatch = graphBatch(*model.module);
    if (microbatches > 0) // --microbatches is NUM_MICRO_BATCHES; both multiply gradient_accumulation
      recipe.microBatches = microbatches;
    recipe.accumulation *= recipe.microBatches;
    recipe.microBatches = 1;
    if (recipe.totalBatchSize == 0)
      recipe.totalBatchSize = std::max<int64_t>(microbatch, 1) * recipe.accumulation;
    recipe.validate(microbatch, configPath.empty() ? "config" : configPath);
    if (dataParallel > 1 && microbatch % dataParallel)
      throw UsageError("--dp " + std::to_string(dataParallel) + " does not divide the microbatch of " +
                       std::to_string(microbatch) + " samples");
    if (dataParallel == 1 && zeroStage > 0)
      throw UsageError("--zero shards over data-parallel ranks: use it with --dp N (N > 1)");
    if (tensorParallel > 0 && recipe.tensorParallel > 1 && tensorParallel != recipe.tensorParallel)
      throw UsageError("--tp " + std::to_string(tensorParallel) + " disagrees with parallel.tensor.size " +
                       std::to_string(recipe.tensorParallel) + " in " + configPath);
    bool tpFromFlag = tensorParallel > 0;
    if (tensorParallel == 0)
      tensorParallel = recipe.tensorParallel;
    int64_t columns = resolveTensorMode(tensorMode, tensorDepth, tensorParallel, tpFromFlag, recipe, configPath);
    // 2D / 2.5D split each microbatch over dp x depth x q rows of ranks, 3D over dp x q x q.
    int64_t rows = dataParallel * (tensorMode == "3d" ? columns * columns : std::max<int64_t>(tensorDepth, 1) * columns);
    if (tensorMode != "1d" && microbatch % rows)
      throw UsageError("--tp-mode " + tensorMode + " splits each microbatch over " + std::to_string(rows) +
                       (tensorMode == "3d" ? " groups of ranks (dp x q x q)" : " rows of ranks (dp x depth x q)") +
                       ", which do not divide its " + std::to_string(microbatch) + " samples");
    if (pipelineStages > 0 && recipe.pipelineStages > 1 && pipelineStages != recipe.pipelineStages)
      throw UsageError("--pp " + std::to_string(pipelineStages) + " disagrees with parallel.pipeline " +
                       std::to_string(recipe.pipelineStages) + " in " + configPath);
    if (pipelineStages == 0)
      pipelineStages = recipe.pipelineStages;
    PipelineScheduleKind kind = parseScheduleName(scheduleName);
    if (virtualStages == 0)
      virtualStages = kind == PipelineScheduleKind::Interleaved && pipelineStages > 1 ? 2 : 1;
    std::optional<PipelineSchedule> schedule;
    if (pipelineStages > 1) {
      try {
        schedule = buildPipelineSchedule(kind, pipelineStages, virtualStages, recipe.accumulation);
        if (!debugSchedule.empty())
          replaceActions(*schedule, debugSchedule);
      } catch (const RuntimeError &e) {
        throw UsageError(e.what());
      }
    } else if (!debugSchedule.empty() || !pipelineSplit.empty() || virtualStages > 1) {
      throw UsageError("--virtual-stages, --pp-split and --debug-schedule need --pp N (N > 1)");
    }
    TrainingPipelineOptions pipeline;
    setPipelineOptions(pipeline, recipe, dataParallel, zeroStage);
    pipeline.tensorParallel = tensorParallel;
    pipeline.tensorParallelMode = tensorModeNamed(tensorMode);
    pipeline.tensorParallelDepth = tensorDepth;
    std::vector<std::string> rules = recipe.shardRules; // the config's policy first: --shard overrides it
    rules.insert(rules.end(), shardRules.begin(), shardRules.end());
    for (std::string &rule : rules) // the pipeline's lists split at commas: SPEC dims go as ':'
      std::replace(rule.begin() + rule.rfind('='), rule.end(), ',', ':');
    pipeline.shard = rules;
    if (sequenceParallel && recipe.accumulation > 1)
      throw UsageError("--sp with gradient accumulation or pipeline microbatches is not available yet (the "
                       "gradient accumulators would be split two ways); use --sp with one microbatch per step");
    if (sequenceParallel && tensorMode != "1d")
      throw UsageError("--sp is Megatron's sequence parallelism: use it with --tp-mode 1d");
    if (sequenceParallel && tensorParallel < 2)
      throw UsageError("--sp splits the sequence over the tensor-parallel ranks: use it with --tp N (N > 1)");
    pipeline.sequenceParallel = sequenceParallel;
    pipeline.pipelineStages = pipelineStages;
    pipeline.virtualStages = schedule ? virtualStages : 1;
    if (!pipelineSplit.empty()) {
      std::vector<std::string> cuts;
      for (llvm::StringRef cut : llvm::split(pipelineSplit, ','))
        cuts.push_back(cut.str());
      pipeline.pipelineSplit = cuts;
    }
    std::string pipelineText = runTrainingPipeline(context, *model.module, pipeline, timing);
    if (printPipeline)
      std::cout << "pipeline: " << pipelineText << "\n";
    planOptions.functions.clear(); // the training functions, found by their phase, in module order
    for (auto func : model.module->getOps<mlir::func::FuncOp>())
      if (getPhase(func))
        planOptions.functions.push_back(func.getSymName().str());
    training = {{"recipe", recipe.toJson()}, {"microbatch", microbatch}, {"programs", planOptions.functions},
                {"data_parallel", dataParallel}, {"tensor_parallel", tensorParallel}, {"zero", zeroStage},
                {"batch_axes", batchAxesOf(*model.module)}};
    if (tensorMode != "1d")
      training["tensor_mode"] = tensorMode;
    if (schedule) {
      training["pipeline"] = schedule->toJson();
      printStageTable(*model.module, *schedule);
    }
    planOptions.training = training;
  } else if (dataParallel > 1) {
    throw UsageError("--dp applies to training plans (--mode train)");
  } else if (pipelineStages > 1 || microbatches > 0) {
    throw UsageError("--pp and --microbatches apply to training plans (--mode train)");
  } else if (tensorParallel > 1 || !shardRules.empty() || sequenceParallel || !tensorMode.empty() || tensorDepth) {
    throw UsageError("--tp, --tp-mode, --tp-depth, --sp and --shard apply to training plans (--mode train)");
  } else if (zeroStage > 0) {
    throw UsageError("--zero applies to training plans (--mode train)");
  } else if (!precision.empty() && precision != "fp32") {
    throw UsageError("--precision applies to training plans (--mode train)");
  } else if (!configPath.empty() || !overrides.empty()) {
    throw UsageError("--config and --set describe training; they do not apply to --mode infer");
  }
  if (mode != "train") { // the training pipeline ends with the same fusions
    std::string pipelineText = runInferencePipeline(context, *model.module, timing);
    if (printPipeline)
      std::cout << "pipeline: " << pipelineText << "\n";
  }
  if (dumpSharding)
    printShardingTable(*model.module, planOptions.functions);
  if (!dumpIrPath.empty())
    writeModule(*model.module, dumpIrPath);
  clock.mark("pipeline");
  Plan plan = buildPlan(*model.module, model.weights, input, planOptions);
  clock.mark("plan");
  writePlan(plan, output);
  clock.mark("write");
  clock.print();
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  size_t steps = 0;
  for (const auto &p : plan.programs)
    steps += p.steps.size();
  if (plan.training.contains("peak_bytes_per_rank")) {
    std::cout << "predicted peak per rank (with the schedule's activations in flight):";
    for (const auto &bytes : plan.training["peak_bytes_per_rank"])
      std::cout << " " << bytes.get<int64_t>();
    std::cout << " B\n";
  }
  std::cout << "compiled " << input << " -> " << output << " (" << mode << "): " << steps << " steps, arena "
            << plan.arenaBytesOfRank(0) << " B, predicted peak " << plan.predictedPeakBytes << " B (" << seconds
            << " s)\n";
  return 0;
}

} // namespace cpc::tools
