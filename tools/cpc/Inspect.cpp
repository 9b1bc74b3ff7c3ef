//===- Inspect.cpp - cpc inspect: describe a plan -------------------------===//
#include "runtime/ModelState.h"
#include "runtime/Device.h"
#include "runtime/Plan.h"
#include "runtime/PipelineSchedule.h"
#include "runtime/ScheduleCheck.h"
#include "runtime/StepTime.h"
#include "tools/cpc/Commands.h"
#include "tools/cpc/Flags.h"

#include <algorithm>
#include <cstring>
#include <iomanip>
#include <iostream>
#include <map>
#include <set>

namespace cpc::tools {

namespace {
const char *kInspectUsage = R"(Usage: cpc inspect PLAN.bin [--json | --schedule] [--profile PROFILE.json]

Prints what a plan holds: ranks, ops by kind, buffers, predicted peak memory and step time,
parameter bytes, inputs and outputs with shapes. --profile prices the step with that cost profile
(cpc calibrate) instead of the one it was compiled with. --json prints the same as one JSON object (with every step).
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
  if (std::optional<PipelineSchedule> schedule = planPipelineSchedule(plan)) {
    const PipelineSchedule &s = *schedule;
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

/// What the summary counts: ops and buffers by kind, and how parameters are stored.
struct PlanCounts {
  std::map<std::string, int> ops, buffers;
  int64_t trainable = 0, parameters = 0;
  int64_t overBatch = 0, overModel = 0; // stored as blocks over the batch axes (ZeRO-3), over others (tp)
  int64_t parameterElements = 0, overModelElements = 0; // their global sizes
};

PlanCounts countPlan(const Plan &plan) {
  PlanCounts c;
  for (const auto &program : plan.programs)
    for (const auto &step : program.steps)
      c.ops[opName(step.op)]++;
  for (const auto &b : plan.buffers)
    c.buffers[b.aliasOf >= 0 ? "view" : bufferKindName(b.kind)]++;
  std::vector<std::string> batchAxes = plan.zeroAxes();
  for (const auto &b : plan.buffers)
    if (b.kind == BufferKind::Parameter && b.aliasOf < 0) {
      c.parameters++;
      bool batch = false, model = false; // a parameter may be both
      for (const auto &axes : b.shardDims)
        for (const std::string &axis : axes)
          (std::find(batchAxes.begin(), batchAxes.end(), axis) != batchAxes.end() ? batch : model) = true;
      c.overBatch += batch;
      c.overModel += model;
      int64_t elements = numElements(b.sharded() ? b.globalShape : b.shape);
      c.parameterElements += elements;
      c.overModelElements += model ? elements : 0;
      if (b.trainable)
        c.trainable += numElements(b.sharded() ? b.globalShape : b.shape);
    }
  return c;
}

/// --json: the plan's metadata with the summary.
void printJson(const Plan &plan, const PlanCounts &c) {
  nlohmann::json j = plan.metadata();
  j["summary"] = {{"ops", c.ops},
                  {"buffers", c.buffers},
                  {"parameter_bytes", plan.bytesOfKind(BufferKind::Parameter)},
                  {"constant_bytes", plan.bytesOfKind(BufferKind::Constant)},
                  {"trainable_parameters", c.trainable},
                  {"parameter_elements", c.parameterElements},
                  {"parameter_elements_split_over_model_axes", c.overModelElements}};
  if (plan.mode == PlanMode::Train)
    j["summary"]["model_states"] = modelStateBytes(plan).toJson();
  j["summary"]["missing_kernels"] = missingKernels(plan);
  j["summary"]["cuda_built"] = cudaBackendBuilt();
  std::cout << j.dump(1) << "\n";
}

/// The plan's header: source, mode, device, ranks, inputs and outputs, programs.
void printHeader(const Plan &plan, const std::string &path) {
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
        const BufferDesc &b = plan.buffers[n.buffer];
        std::cout << "    " << n.name << ": " << dtypeName(b.dtype) << shapeString(b.shape) << "\n";
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
}

/// A mixed-precision plan's element types and loss scaling.
void printPrecision(const Plan &plan, const nlohmann::json &recipe) {
  std::string precision = recipe.value("precision", "fp32");
  if (precision == "fp32")
    return;
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

/// A plan's pipeline; a training plan's precision and recipe; an inference plan's batch.
void printRunMetadata(const Plan &plan) {
  if (std::optional<PipelineSchedule> s = planPipelineSchedule(plan))
    std::cout << "  pipeline: " << s->stages << " stages x " << s->virtualStages << " chunks, " << s->microbatches
              << " microbatches, schedule " << scheduleName(s->kind) << " (cpc inspect --schedule lists it)\n";
  if (plan.mode != PlanMode::Train) {
    if (plan.inference.contains("microbatch"))
      std::cout << "  inference: microbatch " << plan.inference.value("microbatch", 0) << " x "
                << plan.inference.value("microbatches", 1) << " microbatches, data parallel "
                << plan.inference.value("data_parallel", 1) << ", tensor parallel "
                << plan.inference.value("tensor_parallel", 1) << "\n";
    return;
  }
  if (plan.training.contains("recipe")) {
    printPrecision(plan, plan.training["recipe"]);
    std::cout << "  training: microbatch " << plan.training.value("microbatch", 0) << ", recipe "
              << plan.training["recipe"].dump() << "\n";
  }
}

/// Kernels (missing ones named), ops by kind, buffers, memory.
void printContents(const Plan &plan, const PlanCounts &c) {
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
  for (const auto &[op, count] : c.ops)
    std::cout << "    " << op << ": " << count << "\n";
  std::cout << "  buffers:";
  for (const auto &[kind, count] : c.buffers)
    std::cout << " " << kind << " " << count;
  std::cout << "\n  parameters: " << mib(plan.bytesOfKind(BufferKind::Parameter)) << ", " << c.trainable
            << " trainable elements" << (plan.hasSyntheticParameters() ? " (synthetic: values made by cpc-run, none in the plan)" : "")
            << "\n  optimizer and accumulator state: " << mib(plan.bytesOfKind(BufferKind::State))
            << "\n  constants: " << mib(plan.bytesOfKind(BufferKind::Constant))
            << "\n  predicted peak memory per rank: " << mib(plan.predictedPeakBytes) << "\n";
  if (plan.runMetadata().contains("predicted_step")) {
    const nlohmann::json &t = plan.runMetadata()["predicted_step"];
    std::cout << "  predicted step time: " << std::setprecision(4) << 1e3 * t.value("total_s", 0.0) << " ms (compute "
              << 1e3 * t.value("compute_s", 0.0) << ", communication " << 1e3 * t.value("communication_s", 0.0)
              << ", pipeline idle " << 1e3 * t.value("idle_s", 0.0) << " ms on the slowest rank; profile "
              << t.value("profile", "built-in") << ")\n" << std::defaultfloat;
  }
}

/// How many of the parameters, and of their elements, tensor parallelism splits.
void printTensorSplit(const PlanCounts &c, int64_t tensorParallel, bool training) {
  std::cout << "\n  tensor parallel: " << tensorParallel << " ranks (" << c.overModel << " of " << c.parameters
            << " parameters split over tp, " << std::fixed << std::setprecision(1)
            << 100.0 * (double)c.overModelElements / (double)c.parameterElements << "%"
            << " of their elements: each rank stores " << (training ? "and updates " : "") << "its block)"
            << std::defaultfloat;
}

/// A plan's data and tensor parallelism; a training plan's model-state bytes.
void printParallelism(const Plan &plan, const PlanCounts &c) {
  int64_t tensorParallel = plan.runMetadata().value("tensor_parallel", 1);
  if (plan.mode != PlanMode::Train) {
    int64_t dataParallel = plan.inference.value("data_parallel", 1);
    if (dataParallel > 1 || tensorParallel > 1) {
      std::cout << "  data parallel: " << dataParallel << " rank" << (dataParallel > 1 ? "s" : "");
      if (c.overModel && tensorParallel > 1)
        printTensorSplit(c, tensorParallel, false);
      std::cout << "\n";
    }
    return;
  }
  ModelStateBytes states = modelStateBytes(plan);
  std::cout << "  data parallel: " << states.ranks << " rank" << (states.ranks > 1 ? "s" : "") << ", ZeRO stage "
            << states.zeroStage;
  if (c.overBatch)
    std::cout << " (" << c.overBatch << " of " << c.parameters
              << " parameters stored as per-rank blocks, gathered before use)";
  if (c.overModel && tensorParallel > 1)
    printTensorSplit(c, tensorParallel, true);
  std::cout << "\n  " << states.summary() << "\n";
}

} // namespace

int runInspect(int argc, char **argv) {
  if (printedHelp(argc, argv, kInspectUsage))
    return 0;
  static llvm::cl::SubCommand sub("inspect", "Describe a plan");
  auto in = llvm::cl::sub(sub); // the flags, for this subcommand only (see Flags.h)
  llvm::cl::list<std::string> positionals(llvm::cl::Positional, in, llvm::cl::desc("PLAN.bin"));
  llvm::cl::opt<bool> json("json", in), schedule("schedule", in);
  llvm::cl::opt<std::string> profile("profile", in);
  parseSubcommandFlags(argc, argv, sub);
  std::string path = onePositional(positionals, "inspect", "plan");
  Plan plan = readPlan(path);
  if (profile.getNumOccurrences()) // priced again with another machine's profile
    plan.runMetadata()["predicted_step"] = predictedStepJson(plan, CostProfile::load(profile));
  if (schedule)
    return printSchedule(plan);
  PlanCounts counts = countPlan(plan);
  if (json) {
    printJson(plan, counts);
    return 0;
  }
  printHeader(plan, path);
  printRunMetadata(plan);
  printContents(plan, counts);
  printParallelism(plan, counts);
  return 0;
}

} // namespace cpc::tools
