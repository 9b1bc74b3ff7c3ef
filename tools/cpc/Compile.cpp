//===- Compile.cpp - cpc compile: its flags (the work is compiler/CompileDriver) ===//
#include "compiler/CompileDriver.h"
#include "compiler/LayoutSearch.h"
#include "passes/Passes.h"
#include "tools/cpc/Commands.h"
#include "tools/cpc/Flags.h"

#include <cstring>
#include <iostream>

namespace cpc::tools {

namespace cl = llvm::cl;

namespace {

const char *kCompileUsage = R"(Usage: cpc compile MODEL.onnx -o PLAN.bin [options]

Options:
  -o FILE                    Where to write the plan (required)
  --mode train|infer         train: the training step (default when the graph's first output is
                             a scalar loss); infer: the forward computation
  --config CFG.json          Training recipe (Colossal-AI keys: TOTAL_BATCH_SIZE, LR, WEIGHT_DECAY,
                             NUM_EPOCHS, WARMUP_EPOCHS, gradient_accumulation, clip_grad_norm,
                             NUM_MICRO_BATCHES, parallel, fp16; cpc keys: BETAS, EPS, MIN_LR,
                             lr_schedule, STEPS_PER_EPOCH, frozen, no_weight_decay, decay_norms_and_biases)
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
  --recompute none|selective|full|auto
                             Activation recompute (training): full keeps only the values between
                             segments of the forward (about a residual block each, chosen to
                             minimise activation memory) and runs each segment's forward again in
                             the backward; selective runs again only what is cheap (no GEMM,
                             attention or collective); auto (with --device-memory) runs again the
                             values cheapest per byte until the plan fits the budget. Losses are
                             bit-identical to none
  --device cpu|cuda          What the plan runs on (default cpu): cuda keeps every tensor in GPU
                             memory and runs the CUDA kernels (cuBLASLt, cuDNN, own) and NCCL
                             collectives; cpc-run binds local rank r to GPU r
  --synthetic-weights        Leave the parameters' values out of the plan: cpc-run starts from
                             deterministic pseudo-random values (std 0.02), the same for every
                             layout. For benchmarks of models too large to move with their weights
  --profile FILE             The cost profile (`cpc calibrate`) that prices the pipeline stage cuts,
                             the sharding search and the plan's predicted step time (default:
                             built-in rates)
  --dump-sharding            Print each split or partial value: global shape, sharding, local shape
  --print-pipeline           Print the registered pipeline run on the imported model (training or
                             inference) and the import's flags: with `cpc import` and those flags,
                             cpc-opt reproduces the plan's IR
  --dump-ir FILE             Write the IR the plan is built from
  --timing                   Print the wall time of each phase (import, pipeline, plan, write) and
                             MLIR's per-pass timing of the training pipeline to stderr
  --seed N                   The seed of the model's random ops (Dropout's masks; or the config's
                             `seed`, default 0); inference plans take it too
  --dp N                     Data parallelism over N ranks: each rank takes 1/N of every
                             microbatch; gradients are all-reduced (inference: the outputs'
                             rows are all-gathered)
  --sync-bn                  With --dp: BatchNorm normalizes by the statistics of the whole batch,
                             all-reduced over the dp ranks (SyncBatchNorm); without it each
                             rank's by its own rows', as torch DDP (running statistics: rank 0's)
  --tp N                     Tensor parallelism over N ranks (Megatron 1D, or the config's
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
  --tp-search                1d tensor parallelism's layout by search, not by the Megatron patterns:
                             every op's strategy over tp (its sharding rule's factors) and every
                             parameter's split chosen to least step time (compute plus the
                             collectives), solved as a 0-1 program (COIN-OR CBC)
  --device-memory BYTES      With --tp-search: what each rank may hold of parameters and optimizer
                             states; weights then stay whole where that fits and is cheaper
                             (without it every weight that feeds a contraction is split). With
                             --auto or --recompute auto: the memory per rank (a plan fits with 2%
                             to spare)
  --auto --devices N         Choose the layout of N devices by search (cpc plan's first: mesh,
                             ZeRO stage, schedule, by predicted step time under --profile and
                             within --device-memory); --dp/--tp/--pp/--zero are then not given
  --shard REGEX=SPEC         Split the parameters whose name matches REGEX as SPEC, one entry per
                             dim: '-' (whole) or mesh axes joined by '*', e.g. 'fc1\.weight=tp,-'
                             (repeatable; overrides the Megatron choice and the config's
                             parallel.tensor.shard policy)
  --pp N                     Pipeline parallelism over N ranks (or the config's
                             parallel.pipeline): the model is cut into N stages balanced by cost
                             (a table of the stages is printed), each stage its own programs;
                             the mesh is pp x dp x tp (a stage's ranks are neighbours)
  --microbatches M           Microbatches per step (NUM_MICRO_BATCHES; multiplies
                             gradient_accumulation): global batch = M x the model's batch
                             (inference: per run; the outputs are concatenated along dim 0)
  --schedule gpipe|1f1b|interleaved
                             The training pipeline's schedule (default 1f1b; inference runs
                             every forward in microbatch order)
  --virtual-stages V         Model chunks per pipeline rank (interleaved; default 2 there)
  --pp-split NAME,...        Cut the stages by hand: before the first op whose name contains
                             each NAME (N - 1 names, or N x V - 1 with --virtual-stages)
  --debug-schedule R=A,...   Replace pipeline rank R's action list (F<chunk>.<mb>, B<chunk>.<mb>;
                             ';' between ranks), e.g. to see the no-hang check refuse a schedule
  --debug-unchecked          Write the plan even if the no-hang check fails (to test cpc-run's)
  --no-inplace               Never let an op write its result over an input
)";

/// --zero's stages: what each shards over the data-parallel ranks.
enum class ZeroStage { None, OptimizerStates, Gradients, Parameters };

std::optional<int64_t> given(const cl::opt<Count> &flag) {
  return flag.getNumOccurrences() ? std::optional<int64_t>(flag.getValue().value) : std::nullopt;
}
template <class E> std::optional<E> given(const cl::opt<E, false, ChoiceParser<E>> &flag) {
  return flag.getNumOccurrences() ? std::optional<E>(flag) : std::nullopt;
}

} // namespace

// Over 80 lines: one declaration and one copy into the request per flag, kept in one place.
int runCompile(int argc, char **argv) {
  if (printedHelp(argc, argv, kCompileUsage))
    return 0;
  static cl::SubCommand sub("compile", "Compile a model into an execution plan");
  // The flags, for this subcommand only (see Flags.h); kCompileUsage describes them.
  auto in = cl::sub(sub);
  cl::list<std::string> positionals(cl::Positional, in, cl::desc("MODEL.onnx"));
  cl::opt<std::string> output("o", in), config("config", in), ppSplit("pp-split", in), profile("profile", in),
      debugSchedule("debug-schedule", in), dumpIr("dump-ir", in);
  cl::list<std::string> overrides("set", in), inputShapes("input-shape", in), frozen("frozen", in), shard("shard", in);
  cl::opt<int64_t> deviceMemory("device-memory", in);
  cl::opt<Count> dp("dp", in, cl::init(Count{1})), tp("tp", in), tpDepth("tp-depth", in), pp("pp", in),
      microbatches("microbatches", in), virtualStages("virtual-stages", in), devices("devices", in);
  cl::opt<int64_t> seed("seed", in);
  cl::opt<bool> autoLayout("auto", in), syncBn("sync-bn", in), sp("sp", in), tpSearch("tp-search", in), dumpSharding("dump-sharding", in), printPipeline("print-pipeline", in),
      timing("timing", in), noInplace("no-inplace", in), syntheticWeights("synthetic-weights", in),
      debugUnchecked("debug-unchecked", in);
  cl::opt<PlanMode, false, ChoiceParser<PlanMode>> mode(
      "mode", in, cl::values(clEnumValN(PlanMode::Train, "train", ""), clEnumValN(PlanMode::Infer, "infer", "")));
  cl::opt<TensorParallelMode, false, ChoiceParser<TensorParallelMode>> tpMode(
      "tp-mode", in, cl::values(CPC_TENSOR_PARALLEL_MODE_VALUES));
  cl::opt<ZeroStage, false, ChoiceParser<ZeroStage>> zero(
      "zero", in, cl::init(ZeroStage::None),
      cl::values(clEnumValN(ZeroStage::None, "0", ""), clEnumValN(ZeroStage::OptimizerStates, "1", ""),
                 clEnumValN(ZeroStage::Gradients, "2", ""), clEnumValN(ZeroStage::Parameters, "3", "")));
  cl::opt<PipelineScheduleKind, false, ChoiceParser<PipelineScheduleKind>> schedule(
      "schedule", in, cl::init(PipelineScheduleKind::OneFOneB),
      cl::values(clEnumValN(PipelineScheduleKind::GPipe, "gpipe", ""),
                 clEnumValN(PipelineScheduleKind::OneFOneB, "1f1b", ""),
                 clEnumValN(PipelineScheduleKind::Interleaved, "interleaved", "")));
  cl::opt<Precision, false, ChoiceParser<Precision>> precision("precision", in, cl::values(CPC_PRECISION_VALUES));
  cl::opt<RecomputeMode, false, ChoiceParser<RecomputeMode>> recompute("recompute", in,
                                                                     cl::values(CPC_RECOMPUTE_MODE_VALUES));
  cl::opt<DeviceKind, false, ChoiceParser<DeviceKind>> device(
      "device", in, cl::values(clEnumValN(DeviceKind::Cpu, "cpu", ""), clEnumValN(DeviceKind::Cuda, "cuda", "")));
  parseSubcommandFlags(argc, argv, sub);
  std::string model = onePositional(positionals, "compile", "model");
  if (output.empty())
    throw UsageError("'cpc compile' needs -o PLAN.bin");
  CompileRequest request;
  request.model = model;
  request.output = output;
  request.mode = given(mode);
  request.configPath = config;
  request.overrides.assign(overrides.begin(), overrides.end());
  for (const std::string &shape : inputShapes)
    parseInputShapeFlag(shape, request.import);
  request.import.frozenPatterns.assign(frozen.begin(), frozen.end());
  for (const std::string &rule : shard)
    if (rule.find('=') == std::string::npos || rule[0] == '=')
      throw UsageError("--shard expects REGEX=SPEC, got '" + rule + "'");
  request.shardRules.assign(shard.begin(), shard.end());
  request.dataParallel = dp.getValue().value;
  request.zeroStage = static_cast<int64_t>(zero.getValue());
  request.tensorParallel = given(tp);
  request.tensorMode = given(tpMode);
  request.tensorDepth = given(tpDepth);
  request.sequenceParallel = sp;
  request.tensorParallelSearch = tpSearch;
  if (deviceMemory.getNumOccurrences())
    request.deviceMemory = deviceMemory;
  request.syncBatchNorm = syncBn;
  request.pipelineStages = given(pp);
  request.microbatches = given(microbatches);
  request.virtualStages = given(virtualStages);
  request.schedule = given(schedule);
  request.pipelineSplit = ppSplit;
  request.debugSchedule = debugSchedule;
  request.precision = given(precision);
  request.recompute = given(recompute);
  if (seed.getNumOccurrences()) {
    if (seed < 0)
      throw UsageError("--seed expects a number >= 0, got " + std::to_string(seed));
    request.seed = seed;
  }
  if (profile.getNumOccurrences()) {
    request.plan.profile = CostProfile::load(profile);
    request.profilePath = profile;
  }
  request.plan.device = device;
  request.plan.inPlace = !noInplace;
  request.plan.syntheticParameters = syntheticWeights;
  request.plan.checkSchedule = !debugUnchecked;
  if (debugUnchecked)
    std::cerr << "cpc compile: warning: --debug-unchecked writes the plan even if some rank would wait "
                 "forever (cpc-run still refuses such a plan)\n";
  request.dumpSharding = dumpSharding;
  request.printPipeline = printPipeline;
  request.timing = timing;
  request.dumpIrPath = dumpIr;
  if (autoLayout || devices.getNumOccurrences()) {
    if (!autoLayout || !devices.getNumOccurrences())
      throw UsageError("--auto and --devices N go together: the layout of N devices by search");
    if (dp.getNumOccurrences() || tp.getNumOccurrences() || pp.getNumOccurrences() || zero.getNumOccurrences() ||
        tpMode.getNumOccurrences() || tpDepth.getNumOccurrences() || schedule.getNumOccurrences())
      throw UsageError("--auto chooses --dp, --tp, --tp-mode, --pp, --schedule and --zero: give none of them");
    LayoutSearchRequest search;
    search.devices = devices.getValue().value;
    search.deviceMemory = request.deviceMemory.value_or(0); // the layout's budget, not the tp search's
    request.deviceMemory.reset();
    if (!request.microbatches && request.configPath.empty() && request.overrides.empty())
      request.microbatches = 2 * search.devices; // as cpc plan: without a config, 2N microbatches
    if (request.precision)
      search.precisions = {*request.precision};
    if (request.recompute)
      search.recomputes = {*request.recompute};
    search.base = request;
    std::vector<RankedLayout> layouts = searchLayouts(search);
    if (layouts.empty() || !layouts.front().valid)
      throw UsageError("--auto: no layout of " + std::to_string(search.devices) + " devices fits" +
                       (layouts.empty() ? std::string() : " (" + layouts.front().name + ": " + layouts.front().rejected + ")"));
    const RankedLayout &best = layouts.front();
    std::string flags;
    for (const std::string &f : best.flags)
      flags += " " + f;
    std::cout << "auto: " << best.name << " (" << (flags.empty() ? " no flags" : flags.substr(1)) << "), the fastest of "
              << layouts.size() << " layouts: predicted " << best.seconds * 1e3 << " ms per step, "
              << best.peakBytes << " B peak per rank (cpc plan lists them all)\n";
    request = best.request;
    request.quiet = false; // the layout's own compile, not one of the search's
    request.parallelPasses = search.base.parallelPasses;
    request.verifyEachPass = search.base.verifyEachPass;
  }
  compileModel(request, std::cout);
  return 0;
}

} // namespace cpc::tools
