//===- Plan.cpp - cpc plan: its flags (the work is compiler/LayoutSearch) -===//
#include "compiler/LayoutSearch.h"
#include "passes/Passes.h"
#include "runtime/CostProfile.h"
#include "tools/cpc/Commands.h"
#include "tools/cpc/Flags.h"

#include "llvm/ADT/StringExtras.h"

#include <iostream>

namespace cpc::tools {

namespace cl = llvm::cl;

namespace {
const char *kPlanUsage = R"(Usage: cpc plan MODEL.onnx --devices N [options]

Enumerates every layout of the model on N devices that cpc builds (meshes dp x tp x pp of N
ranks, tensor parallelism 1d and, where tp is a square or a cube, 2d and 3d; ZeRO 0-3 over dp;
1F1B and GPipe schedules; the precisions and recompute modes asked for), compiles each as cpc compile would on the
same global batch (the model's batch x --microbatches: accumulation without stages,
microbatches with them) and prints them ranked by predicted step time (compute, communication,
pipeline idle on the slowest rank) with the predicted peak memory and bytes sent per rank and
step; layouts over --device-memory or that do not build are listed with why. Beyond 24 layouts
each mesh (dp x tp x pp) is compiled once, its other ZeRO stages and schedules estimated from it
(marked ~), and the 4 best compiled; a pipeline mesh whose fill and drain alone put it above the
best layout found so far is not compiled (listed with its bound). cpc compile --auto --devices N
compiles the first.

Options:
  --devices N                Ranks to lay the model out on (required)
  --device-memory BYTES      Memory per rank: a layout fits when its predicted peak does with 2%
                             to spare (what the prediction does not count; default: no budget)
  --profile FILE             Cost profile (cpc calibrate; default: built-in rates)
  --microbatches M           Microbatches per step: the global batch (default: the config's
                             gradient_accumulation, or 2 x N without a config)
  --precisions fp32,bf16     Precisions to try (default fp32)
  --recomputes none,full     Activation recompute modes to try (none, selective, full, auto;
                             default none): under a tight --device-memory, recompute can fit a
                             faster mesh; auto recomputes what each layout needs to fit it
  --exhaustive               Compile every layout (default: up to 24; beyond, each mesh once, its
                             other ZeRO stages and schedules estimated, the 4 best compiled)
  --explain                  Then say why the first layout (and why not the fastest tensor-
                             parallel one, when the first is not): per variable the layout its
                             sharding search chose, its bytes per rank and what each other layout
                             would change; per resharding its collective's bytes and time; stages
  --config CFG.json, --set KEY=VALUE, --mode train|infer, --input-shape NAME=AxB, --frozen REGEX,
  --seed N                   As for cpc compile
)";

/// The choices of a comma-separated `list` given to `flag` (`expected`: how the choices are spelled).
template <typename Choice>
std::vector<Choice> parseChoices(const std::string &list, const std::string &flag, const std::string &expected,
                                 std::optional<Choice> (*symbolize)(llvm::StringRef)) {
  std::vector<Choice> choices;
  for (llvm::StringRef name : llvm::split(list, ',')) {
    std::optional<Choice> choice = symbolize(name.trim());
    if (!choice)
      throw UsageError(flag + " expects " + expected + " separated by commas, got '" + name.str() + "'");
    choices.push_back(*choice);
  }
  return choices;
}
} // namespace

int runPlan(int argc, char **argv) {
  if (printedHelp(argc, argv, kPlanUsage))
    return 0;
  static cl::SubCommand sub("plan", "Rank the layouts of a model on N devices");
  auto in = cl::sub(sub);
  cl::list<std::string> positionals(cl::Positional, in, cl::desc("MODEL.onnx"));
  cl::opt<std::string> config("config", in), profile("profile", in), precisions("precisions", in, cl::init("fp32")),
      recomputes("recomputes", in, cl::init("none"));
  cl::list<std::string> overrides("set", in), inputShapes("input-shape", in), frozen("frozen", in);
  cl::opt<Count> devices("devices", in), microbatches("microbatches", in);
  cl::opt<int64_t> deviceMemory("device-memory", in, cl::init(0)), seed("seed", in);
  cl::opt<bool> explain("explain", in), exhaustive("exhaustive", in);
  cl::opt<PlanMode, false, ChoiceParser<PlanMode>> mode(
      "mode", in, cl::values(clEnumValN(PlanMode::Train, "train", ""), clEnumValN(PlanMode::Infer, "infer", "")));
  parseSubcommandFlags(argc, argv, sub);
  LayoutSearchRequest request;
  request.base.model = onePositional(positionals, "plan", "model");
  if (!devices.getNumOccurrences())
    throw UsageError("'cpc plan' needs --devices N");
  if (deviceMemory < 0)
    throw UsageError("--device-memory expects bytes >= 0, got " + std::to_string(deviceMemory));
  request.devices = devices.getValue().value;
  request.deviceMemory = deviceMemory;
  request.precisions = parseChoices<Precision>(precisions, "--precisions", "fp32, bf16 or fp16", symbolizePrecision);
  request.recomputes =
      parseChoices<RecomputeMode>(recomputes, "--recomputes", "none, selective, full or auto", symbolizeRecomputeMode);
  if (deviceMemory == 0 && llvm::is_contained(request.recomputes, RecomputeMode::Auto))
    throw UsageError("--recomputes auto recomputes what each layout needs to fit --device-memory BYTES: give the "
                     "budget");
  request.exhaustive = exhaustive;
  CompileRequest &base = request.base;
  if (mode.getNumOccurrences())
    base.mode = mode;
  base.configPath = config;
  base.overrides.assign(overrides.begin(), overrides.end());
  for (const std::string &shape : inputShapes)
    parseInputShapeFlag(shape, base.import);
  base.import.frozenPatterns.assign(frozen.begin(), frozen.end());
  // The global batch every layout runs: the config's (its accumulation), else 2N microbatches.
  if (microbatches.getNumOccurrences())
    base.microbatches = microbatches.getValue().value;
  else if (base.configPath.empty() && base.overrides.empty())
    base.microbatches = 2 * request.devices;
  if (seed.getNumOccurrences())
    base.seed = seed;
  if (profile.getNumOccurrences()) {
    base.plan.profile = CostProfile::load(profile);
    base.profilePath = profile;
  }
  std::vector<RankedLayout> layouts = searchLayouts(request);
  std::cout << base.model << " on " << request.devices << " device" << (request.devices > 1 ? "s" : "") << ", "
            << (base.microbatches ? std::to_string(*base.microbatches) + " microbatches per step"
                                  : std::string("the config's batch per step"))
            << ", profile " << base.plan.profile.source << ": "
            << layouts.size() << " layouts\n";
  printLayoutTable(layouts, std::cout);
  if (llvm::any_of(layouts, [](const RankedLayout &l) { return l.estimated; }))
    std::cout << "  ~: estimated from its mesh's compile (ZeRO 0, 1F1B), not compiled (--exhaustive compiles "
                 "every layout)\n";
  if (explain && !layouts.empty() && layouts.front().valid) {
    // The first layout, and where it has no sharding search, the fastest that has one: what
    // its search chose and what its reshardings cost say why it lost.
    auto searched = llvm::find_if(layouts, [](const RankedLayout &l) { return l.valid && l.request.tensorParallelSearch; });
    std::vector<std::vector<RankedLayout>::iterator> explained{layouts.begin()};
    if (searched != layouts.end() && searched != layouts.begin())
      explained.push_back(searched);
    for (auto it : explained) {
      CompileRequest request = it->request;
      request.explainSharding = true;
      std::cout << "\n" << (it == layouts.begin() ? "why " : "why not ") << it->name << " (rank "
                << (it - layouts.begin()) + 1 << "):\n";
      compilePlan(request, std::cout);
    }
  }
  return 0;
}

} // namespace cpc::tools
