//===- Inspect.cpp - cpc inspect: describe a plan -------------------------===//
#include "runtime/ModelState.h"
#include "runtime/Device.h"
#include "runtime/Plan.h"
#include "runtime/PipelineSchedule.h"
#include "runtime/ScheduleCheck.h"
#include "tools/cpc/Commands.h"

#include <algorithm>
#include <iomanip>
#include <iostream>
#include <map>
#include <set>

namespace cpc::tools {

namespace {
const char *kInspectUsage = R"(Usage: cpc inspect PLAN.bin [--json | --schedule]

Prints what a plan holds: ranks, ops by kind, buffers, predicted peak memory, parameter bytes,
inputs and outputs with shapes. --json prints the same as one JSON object (with every step).
--schedule prints each rank's communication, program by program, in the order the rank issues
it (collectives with their groups, sends and receives with their peers and channels), and
whether the ranks' lists pair up (the check cpc compile runs before writing a plan); for a
pipeline, first each pipeline rank's list of actions (F<chunk>.<microbatch> forward,
B<chunk>.<microbatch> backward, then its update) and the schedule's idle share.
)";

std::string mib(int64_t bytes) {
  std::ostringstream os;
  os << std::fixed << std::setprecision(2) << bytes / 1048576.0 << " MiB (" << bytes << " B)";
  return os.str();
}
/// Each rank's communication per program, and the check's verdict.
int printSchedule(const Plan &plan) {
  if (plan.training.is_object() && plan.training.contains("pipeline")) {
    PipelineSchedule s = PipelineSchedule::fromJson(plan.training["pipeline"]);
    std::cout << "pipeline schedule " << scheduleName(s.kind) << ": " << s.stages << " stages x " << s.virtualStages
              << " chunks, " << s.microbatches << " microbatches; idle share with equal stages "
              << (s.virtualStages > 1 ? "(P-1)/(V*M+P-1)" : "(P-1)/(M+P-1)") << " = " << s.bubbleFraction() << "\n"
              << s.format();
    for (int64_t r = 0; r < s.stages; ++r)
      std::cout << "  pipeline rank " << r << " holds the activations of at most " << s.peakInFlight(r)
                << " microbatch chunk" << (s.peakInFlight(r) == 1 ? "" : "s") << "\n";
  }
  std::set<std::string> names;
  for (const RankProgram &p : plan.programs)
    names.insert(p.name);
  for (const std::string &name : names) {
    std::cout << "program " << name << ":\n";
    std::vector<std::vector<CommAction>> ranks = commActions(plan, name);
    for (size_t r = 0; r < ranks.size(); ++r) {
      std::cout << "  rank " << r << ": " << ranks[r].size() << " communication step"
                << (ranks[r].size() == 1 ? "" : "s") << "\n";
      for (const CommAction &a : ranks[r]) {
        std::cout << "    " << a.what;
        if (a.kind == CommAction::Kind::Collective) {
          std::cout << " over {";
          for (size_t i = 0; i < a.group.size(); ++i)
            std::cout << (i ? "," : "") << a.group[i];
          std::cout << "}";
        } else {
          std::cout << (a.kind == CommAction::Kind::Send ? " to rank " : " from rank ") << a.peer << " channel "
                    << a.channel;
        }
        std::cout << (a.loc.empty() ? "" : "  (" + a.loc + ")") << "\n";
      }
    }
  }
  std::string problem = checkPlanSchedule(plan);
  std::cout << (problem.empty() ? "schedule check: every collective and transfer pairs up; no rank can wait forever"
                                : "schedule check FAILED: " + problem)
            << "\n";
  return problem.empty() ? 0 : 1;
}

} // namespace

int runInspect(int argc, char **argv) {
  std::string path;
  bool json = false, schedule = false;
  for (int i = 2; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--help" || arg == "-h") {
      std::cout << kInspectUsage;
      return 0;
    } else if (arg == "--json") {
      json = true;
    } else if (arg == "--schedule") {
      schedule = true;
    } else if (!arg.empty() && arg[0] == '-') {
      throw UsageError("unknown option '" + arg + "' for 'cpc inspect'");
    } else if (path.empty()) {
      path = arg;
    } else {
      throw UsageError("more than one plan given");
    }
  }
  if (path.empty())
    throw UsageError("'cpc inspect' needs a plan file");
  Plan plan = readPlan(path);
  if (schedule)
    return printSchedule(plan);

  std::map<std::string, int> opCounts;
  for (const auto &program : plan.programs)
    for (const auto &step : program.steps)
      opCounts[opName(step.op)]++;
  std::map<std::string, int> bufferCounts;
  for (const auto &b : plan.buffers)
    bufferCounts[b.aliasOf >= 0 ? "view" : bufferKindName(b.kind)]++;
  // Parameters stored as blocks: over the batch (data-parallel) axes (ZeRO-3), over others
  // (tensor parallelism); one may be both.
  std::vector<std::string> batchAxes = plan.zeroAxes();
  int64_t trainable = 0, overBatch = 0, overModel = 0, parameterCount = 0;
  for (const auto &b : plan.buffers)
    if (b.kind == BufferKind::Parameter && b.aliasOf < 0) {
      parameterCount++;
      bool batch = false, model = false;
      for (const auto &axes : b.shardDims)
        for (const std::string &axis : axes)
          (std::find(batchAxes.begin(), batchAxes.end(), axis) != batchAxes.end() ? batch : model) = true;
      overBatch += batch;
      overModel += model;
      if (b.trainable)
        trainable += numElements(b.sharded() ? b.globalShape : b.shape);
    }

  if (json) {
    nlohmann::json j = plan.metadata();
    j["summary"] = {{"ops", opCounts},
                    {"buffers", bufferCounts},
                    {"parameter_bytes", plan.bytesOfKind(BufferKind::Parameter)},
                    {"constant_bytes", plan.bytesOfKind(BufferKind::Constant)},
                    {"trainable_parameters", trainable}};
    if (plan.mode == PlanMode::Train)
      j["summary"]["model_states"] = modelStateBytes(plan).toJson();
    j["summary"]["missing_kernels"] = missingKernels(plan);
    j["summary"]["cuda_built"] = cudaBackendBuilt();
    std::cout << j.dump(1) << "\n";
    return 0;
  }
  auto describe = [&](const NamedBuffer &n) {
    const BufferDesc &b = plan.buffers[n.buffer];
    return n.name + ": " + dtypeName(b.dtype) + shapeString(b.shape);
  };
  std::cout << "plan " << path << " (format version " << plan.version << ")\n"
            << "  source: " << plan.source << "\n  mode: " << planModeName(plan.mode) << "\n  device: " << deviceKindName(plan.device)
            << (plan.device == DeviceKind::Cuda ? " (one GPU per rank, tensors in GPU memory)" : "")
            << "\n  ranks: " << plan.worldSize << "\n";
  // Each name once (pipeline programs each bind their own copy); hand-overs between a rank's
  // programs are counted, not listed.
  for (const auto *list : {&plan.inputs, &plan.outputs}) {
    std::cout << (list == &plan.inputs ? "  inputs:\n" : "  outputs:\n");
    std::set<std::string> shown;
    int64_t handOvers = 0, handOverBytes = 0;
    for (const auto &n : *list) {
      if (n.isTransfer()) {
        ++handOvers;
        handOverBytes += plan.buffers[n.buffer].bytes();
      } else if (shown.insert(n.name).second) {
        std::cout << "    " << describe(n) << "\n";
      }
    }
    if (handOvers)
      std::cout << "    (and " << handOvers << " hand-overs between a rank's pipeline programs, " << handOverBytes
                << " B per microbatch)\n";
  }
  for (const auto &program : plan.programs) {
    std::cout << "  rank " << program.rank;
    for (const auto &[axis, coordinate] : program.coordinates)
      std::cout << " at " << axis << "=" << coordinate;
    std::cout << ", program " << program.name << ": " << program.steps.size() << " steps, arena "
              << mib(program.arenaBytes) << "\n";
  }
  if (plan.mode == PlanMode::Train && plan.training.contains("pipeline")) {
    PipelineSchedule s = PipelineSchedule::fromJson(plan.training["pipeline"]);
    std::cout << "  pipeline: " << s.stages << " stages x " << s.virtualStages << " chunks, " << s.microbatches
              << " microbatches, schedule " << scheduleName(s.kind) << " (cpc inspect --schedule lists it)\n";
  }
  if (plan.mode == PlanMode::Train && plan.training.contains("recipe")) {
    const nlohmann::json &recipe = plan.training["recipe"];
    std::string precision = recipe.value("precision", "fp32");
    if (precision != "fp32") {
      std::cout << "  precision: " << precision << " mixed precision (16-bit matmul/conv, f32 master weights and "
                << "optimizer states)\n    values the programs compute, by element type:";
      // Element types of the arena's values: what the ops compute in (all of them, not live at once).
      std::map<std::string, int64_t> computed;
      for (const BufferDesc &b : plan.buffers)
        if (b.kind == BufferKind::Arena && b.aliasOf < 0)
          computed[dtypeName(b.dtype)] += b.bytes();
      for (const auto &[type, bytes] : computed)
        std::cout << " " << type << " " << mib(bytes);
      std::cout << "\n";
      if (precision == "fp16" && recipe.contains("fp16")) {
        const nlohmann::json &f = recipe["fp16"];
        std::cout << "  loss scaling: initial " << f.value("initial_scale", 0.0) << ", x" << f.value("growth_factor", 0.0)
                  << " after " << f.value("growth_interval", 0) << " clean steps, x" << f.value("backoff_factor", 0.0)
                  << " on an overflow (hysteresis " << f.value("hysteresis", 0) << "); an overflowing step is skipped\n";
      }
    }
    std::cout << "  training: microbatch " << plan.training.value("microbatch", 0) << ", recipe "
              << plan.training["recipe"].dump() << "\n";
  }
  std::vector<std::string> missing = missingKernels(plan);
  if (plan.device == DeviceKind::Cuda && !cudaBackendBuilt())
    std::cout << "  kernels: this cpc was built without CUDA (it cannot run or check this plan's kernels)\n";
  else if (missing.empty())
    std::cout << "  kernels: every step has a " << deviceKindName(plan.device) << " kernel\n";
  else {
    std::cout << "  kernels missing on " << deviceKindName(plan.device) << ":";
    for (const std::string &m : missing)
      std::cout << " " << m << ";";
    std::cout << "\n";
  }
  std::cout << "  ops by kind:\n";
  for (const auto &[op, count] : opCounts)
    std::cout << "    " << op << ": " << count << "\n";
  std::cout << "  buffers:";
  for (const auto &[kind, count] : bufferCounts)
    std::cout << " " << kind << " " << count;
  std::cout << "\n  parameters: " << mib(plan.bytesOfKind(BufferKind::Parameter)) << ", " << trainable
            << " trainable elements" << (plan.hasSyntheticParameters() ? " (synthetic: values made by cpc-run, none in the plan)" : "")
            << "\n  optimizer and accumulator state: " << mib(plan.bytesOfKind(BufferKind::State))
            << "\n  constants: " << mib(plan.bytesOfKind(BufferKind::Constant))
            << "\n  predicted peak memory per rank: " << mib(plan.predictedPeakBytes) << "\n";
  if (plan.mode == PlanMode::Train) {
    ModelStateBytes states = modelStateBytes(plan);
    int64_t tensorParallel = plan.training.value("tensor_parallel", 1);
    std::cout << "  data parallel: " << states.ranks << " rank" << (states.ranks > 1 ? "s" : "") << ", ZeRO stage "
              << states.zeroStage;
    if (overBatch)
      std::cout << " (" << overBatch << " of " << parameterCount
                << " parameters stored as per-rank blocks, gathered before use)";
    if (overModel && tensorParallel > 1)
      std::cout << "\n  tensor parallel: " << tensorParallel << " ranks (" << overModel << " of " << parameterCount
                << " parameters split over tp: each rank stores and updates its block)";
    std::cout << "\n  " << states.summary() << "\n";
  }
  return 0;
}

} // namespace cpc::tools
