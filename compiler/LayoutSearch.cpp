//===- LayoutSearch.cpp ---------------------------------------------------===//
#include "compiler/LayoutSearch.h"
#include "compiler/LayoutEstimate.h"
#include "passes/Passes.h"
#include "runtime/ModelState.h"
#include "runtime/StepTime.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <iomanip>
#include <limits>
#include <map>
#include <optional>
#include <mutex>
#include <sstream>
#include <thread>

namespace cpc {

namespace {

/// Runs work(0) .. work(n - 1) on up to the machine's hardware threads (each compile has its
/// own MLIR context; the import cache and the solver are locked) and returns when all are done;
/// the first exception, if any, is rethrown then.
template <typename Work> void parallelFor(size_t n, Work work) {
  size_t threads = std::min<size_t>(n, std::max(1u, std::thread::hardware_concurrency()));
  std::atomic<size_t> next{0};
  std::exception_ptr failure;
  std::mutex failureMutex;
  auto worker = [&] {
    for (size_t i; (i = next.fetch_add(1)) < n;) {
      try {
        work(i);
      } catch (...) {
        std::lock_guard<std::mutex> lock(failureMutex);
        if (!failure)
          failure = std::current_exception();
      }
    }
  };
  std::vector<std::thread> pool;
  for (size_t t = 1; t < threads; ++t)
    pool.emplace_back(worker);
  worker();
  for (std::thread &t : pool)
    t.join();
  if (failure)
    std::rethrow_exception(failure);
}

/// A layout to try: the flags that make it and what they set in the request.
struct Candidate {
  int64_t dp = 1, tp = 1, pp = 1, zero = 0;
  TensorParallelMode mode = TensorParallelMode::OneD;
  PipelineScheduleKind schedule = PipelineScheduleKind::OneFOneB;
  Precision precision = Precision::FP32;
  RecomputeMode recompute = RecomputeMode::None;

  std::string name() const {
    std::ostringstream os;
    auto part = [&](const std::string &p) { os << (os.tellp() > 0 ? " " : "") << p; };
    if (dp > 1)
      part("dp" + std::to_string(dp) + (zero ? " zero" + std::to_string(zero) : ""));
    if (tp > 1)
      part("tp" + std::to_string(tp) +
           (mode != TensorParallelMode::OneD ? " " + stringifyTensorParallelMode(mode).str() : ""));
    if (pp > 1)
      part("pp" + std::to_string(pp) + " " + scheduleName(schedule));
    if (dp == 1 && tp == 1 && pp == 1)
      part("one rank");
    if (precision != Precision::FP32)
      part(stringifyPrecision(precision).str());
    if (recompute != RecomputeMode::None)
      part("recompute " + stringifyRecomputeMode(recompute).str());
    return os.str();
  }

  std::vector<std::string> flags() const {
    std::vector<std::string> f;
    auto flag = [&](const std::string &name, const std::string &value) { f.insert(f.end(), {name, value}); };
    if (dp > 1)
      flag("--dp", std::to_string(dp));
    if (zero)
      flag("--zero", std::to_string(zero));
    if (tp > 1)
      flag("--tp", std::to_string(tp));
    if (tp > 1 && mode == TensorParallelMode::OneD)
      f.push_back("--tp-search");
    if (mode != TensorParallelMode::OneD)
      flag("--tp-mode", stringifyTensorParallelMode(mode).str());
    if (pp > 1)
      flag("--pp", std::to_string(pp));
    if (pp > 1 && schedule != PipelineScheduleKind::Forward)
      flag("--schedule", scheduleName(schedule));
    if (precision != Precision::FP32)
      flag("--precision", stringifyPrecision(precision).str());
    if (recompute != RecomputeMode::None)
      flag("--recompute", stringifyRecomputeMode(recompute).str());
    return f;
  }

  void apply(CompileRequest &r) const {
    r.dataParallel = dp;
    r.zeroStage = zero;
    r.tensorParallel = tp;
    r.tensorMode = mode;
    r.tensorParallelSearch = tp > 1 && mode == TensorParallelMode::OneD; // any graph, not the patterns
    r.pipelineStages = pp;
    r.schedule = pp > 1 && schedule != PipelineScheduleKind::Forward ? std::optional<PipelineScheduleKind>(schedule)
                                                                      : std::nullopt;
    r.precision = precision;
    r.recompute = recompute;
  }
};

/// The tensor-parallel modes `tp` ranks can form: 1d always, 2d on a square, 3d on a cube.
std::vector<TensorParallelMode> modesOf(int64_t tp) {
  std::vector<TensorParallelMode> modes{TensorParallelMode::OneD};
  if (tp > 1 && tensorParallelSide(TensorParallelMode::TwoD, tp, 1))
    modes.push_back(TensorParallelMode::TwoD);
  if (tp > 1 && tensorParallelSide(TensorParallelMode::ThreeD, tp, 1))
    modes.push_back(TensorParallelMode::ThreeD);
  return modes;
}

std::vector<Candidate> enumerate(const LayoutSearchRequest &request, PlanMode mode) {
  bool training = mode == PlanMode::Train; // inference: no ZeRO, its stages run forward only
  std::vector<Candidate> all;
  int64_t n = request.devices;
  std::vector<RecomputeMode> recomputes = training ? request.recomputes : std::vector<RecomputeMode>{RecomputeMode::None};
  for (RecomputeMode recompute : recomputes)
    for (Precision precision : request.precisions)
      for (int64_t pp = 1; pp <= n; ++pp)
        for (int64_t tp = 1; tp * pp <= n; ++tp) {
          if (n % (pp * tp))
            continue;
          int64_t dp = n / (pp * tp);
          for (TensorParallelMode tpMode : modesOf(tp))
            for (int64_t zero = 0; zero <= (dp > 1 && training ? 3 : 0); ++zero)
              for (PipelineScheduleKind schedule :
                   pp > 1 && training ? std::vector<PipelineScheduleKind>{PipelineScheduleKind::OneFOneB,
                                                                          PipelineScheduleKind::GPipe}
                   : pp > 1           ? std::vector<PipelineScheduleKind>{PipelineScheduleKind::Forward}
                                      : std::vector<PipelineScheduleKind>{PipelineScheduleKind::OneFOneB})
                all.push_back({dp, tp, pp, zero, tpMode, schedule, precision, recompute});
        }
  return all;
}

/// The layout's request: the base with `c`'s flags, no reports.
CompileRequest requestFor(const LayoutSearchRequest &request, const Candidate &c) {
  CompileRequest r = request.base;
  r.quiet = true;
  r.parallelPasses = false; // the layouts compile on the threads (parallelFor)
  r.verifyEachPass = false;
  r.dumpSharding = r.printPipeline = false;
  r.dumpIrPath.clear();
  c.apply(r);
  if (c.recompute == RecomputeMode::Auto) // it recomputes what this budget needs
    r.deviceMemory = request.deviceMemory;
  return r;
}

/// Compiles `c` on `request`'s model into `plan`; returns why not when it does not build.
/// `priceOnly`: the plan is priced, not written (PlanOptions::priceOnly).
std::optional<std::string> compileCandidate(const LayoutSearchRequest &request, const Candidate &c, Plan &plan,
                                            bool priceOnly = false) {
  std::ostringstream discard;
  try {
    CompileRequest r = requestFor(request, c);
    r.plan.priceOnly = priceOnly;
    plan = compilePlan(r, discard);
  } catch (const std::exception &e) {
    std::string why = e.what();
    return why.substr(0, why.find('\n'));
  }
  if (!plan.runMetadata().contains("predicted_step"))
    return std::string("the plan predicts no step time");
  return std::nullopt;
}

RankedLayout unpriced(const LayoutSearchRequest &request, const Candidate &c) {
  RankedLayout layout;
  layout.name = c.name();
  layout.flags = c.flags();
  layout.request = requestFor(request, c);
  return layout;
}

/// Rejects `layout` when its peak, with the margin, is over the budget.
void checkBudget(const LayoutSearchRequest &request, RankedLayout &layout) {
  layout.valid = request.deviceMemory <= 0 || (double)layout.peakBytes * (1 + kPeakMargin) <= (double)request.deviceMemory;
  if (!layout.valid)
    layout.rejected = std::string(layout.estimated ? "over budget (estimated)" : "over budget") + ": predicted peak " +
                      std::to_string(layout.peakBytes) + " B per rank + " + std::to_string(int(kPeakMargin * 100 + 0.5)) +
                      "% > " + std::to_string(request.deviceMemory) + " B";
}

/// `layout` priced as `plan` predicts it, checked against the budget.
void priceFromPlan(const LayoutSearchRequest &request, const Plan &plan, RankedLayout &layout) {
  const nlohmann::json &step = plan.runMetadata()["predicted_step"];
  layout.seconds = step.value("total_s", 0.0);
  layout.compute = step.value("compute_s", 0.0);
  layout.communication = step.value("communication_s", 0.0);
  layout.idle = step.value("idle_s", 0.0);
  layout.bytesPerStep = step.value("communication_bytes", 0.0);
  layout.peakBytes = plan.predictedPeakBytes;
  checkBudget(request, layout);
}

/// Compiles `c` on `request`'s model and prices it.
RankedLayout evaluate(const LayoutSearchRequest &request, const Candidate &c) {
  RankedLayout layout = unpriced(request, c);
  Plan plan;
  if (std::optional<std::string> why = compileCandidate(request, c, plan))
    layout.rejected = *why;
  else
    priceFromPlan(request, plan, layout);
  return layout;
}

/// The mesh of `c`: its layout at ZeRO 0 and, with stages, 1F1B (LayoutEstimate.h).
Candidate meshOf(const Candidate &c) {
  Candidate m = c;
  m.zero = 0;
  if (m.pp > 1 && m.schedule == PipelineScheduleKind::GPipe)
    m.schedule = PipelineScheduleKind::OneFOneB;
  return m;
}

/// Meshes compiled at once by estimateThenCompile, before its bounds learn from them.
constexpr size_t kMeshesPerWave = 8;

/// A mesh's compile: its own layout's exact price and what prices the others on it.
struct CompiledMesh {
  RankedLayout layout;
  MeshCost cost;
  // With stages: one run of the model through every chunk (forward, and backward when
  // training) at the plan's prices, times dp x tp: one rank's run, in the plan's own units.
  double runSeconds = 0;
};

/// CompiledMesh::runSeconds of a pipelined `plan` on mesh `c`.
double pipelineRunSeconds(const Plan &plan, const Candidate &c, const CostProfile &profile) {
  double seconds = 0;
  for (const RankProgram &p : plan.programs)
    if (p.phase == ProgramPhase::Forward || p.phase == ProgramPhase::Backward)
      seconds += programComputeSeconds(plan, p, profile);
  return seconds * (double)(c.dp * c.tp);
}

CompiledMesh compileMesh(const LayoutSearchRequest &request, const Candidate &c, bool training) {
  CompiledMesh m{unpriced(request, c), {}};
  Plan plan;
  // Priced only: cpc compile --auto proves the layout it writes.
  if (std::optional<std::string> why = compileCandidate(request, c, plan, /*priceOnly=*/true)) {
    m.layout.rejected = *why;
    return m;
  }
  priceFromPlan(request, plan, m.layout);
  if (c.pp > 1)
    m.runSeconds = pipelineRunSeconds(plan, c, request.base.plan.profile);
  m.cost.step = {m.layout.compute, m.layout.communication, m.layout.idle, m.layout.bytesPerStep, m.layout.peakBytes};
  const nlohmann::json &meta = plan.runMetadata();
  m.cost.dp = c.dp;
  m.cost.pp = c.pp;
  m.cost.training = training;
  if (training) {
    m.cost.states = modelStateBytes(plan);
    m.cost.microbatches = c.pp > 1 ? meta["pipeline"].value("microbatches", (int64_t)1)
                                   : meta["recipe"].value("gradient_accumulation", (int64_t)1);
  } else {
    m.cost.microbatches = meta.value("microbatches", (int64_t)1);
  }
  return m;
}

/// `c` on the mesh compiled as `mesh`: the mesh's own layout, or estimated from it.
RankedLayout fromMesh(const LayoutSearchRequest &request, const Candidate &c, const Candidate &meshCandidate,
                      const CompiledMesh &mesh) {
  if (meshCandidate.name() == c.name())
    return mesh.layout;
  RankedLayout layout = unpriced(request, c);
  layout.estimated = true;
  if (!mesh.layout.rejected.empty() && mesh.layout.rejected.rfind("over budget", 0) != 0) {
    layout.rejected = "as " + meshCandidate.name() + ": " + mesh.layout.rejected;
    return layout;
  }
  LayoutEstimate e = estimateLayout(mesh.cost, c.zero, c.schedule, request.base.plan.profile);
  layout.seconds = e.total();
  layout.compute = e.compute;
  layout.communication = e.communication;
  layout.idle = e.idle;
  layout.bytesPerStep = e.bytes;
  layout.peakBytes = e.peakBytes;
  checkBudget(request, layout);
  return layout;
}

/// The least step time a mesh of `pp` stages can reach: the model's work over `runs` runs
/// spread evenly over all devices, stretched by the pipeline's fill and drain, (runs + pp - 1)
/// / runs (each rank waits at least one run of every other stage). 0 without stages.
double pipelineBound(const Candidate &c, double runSeconds, int64_t runs, int64_t devices) {
  if (c.pp <= 1 || runs < 1 || runSeconds <= 0)
    return 0;
  return runSeconds * (double)(runs + c.pp - 1) / (double)devices;
}

/// The `exact` fastest valid layouts of `ranked` (index = candidate) compiled: those estimated
/// compiled at once, again while some turn out invalid (over the budget once compiled).
void compileFastest(const LayoutSearchRequest &request, const std::vector<Candidate> &all, size_t exact,
                    std::vector<RankedLayout> &ranked) {
  std::vector<size_t> byTime(ranked.size());
  for (size_t i = 0; i < byTime.size(); ++i)
    byTime[i] = i;
  std::stable_sort(byTime.begin(), byTime.end(), [&](size_t a, size_t b) {
    return ranked[a].valid != ranked[b].valid ? ranked[a].valid : ranked[a].seconds < ranked[b].seconds;
  });
  for (size_t begin = 0;;) {
    size_t valid = 0, end = begin;
    std::vector<size_t> toCompile;
    for (size_t k = 0; k < begin; ++k)
      valid += ranked[byTime[k]].valid;
    for (; end < byTime.size() && ranked[byTime[end]].valid && valid < exact; ++end, ++valid)
      if (ranked[byTime[end]].estimated)
        toCompile.push_back(byTime[end]);
    if (toCompile.empty())
      break;
    std::vector<RankedLayout> compiled(toCompile.size());
    parallelFor(toCompile.size(), [&](size_t k) { compiled[k] = evaluate(request, all[toCompile[k]]); });
    for (size_t k = 0; k < toCompile.size(); ++k)
      ranked[toCompile[k]] = std::move(compiled[k]);
    begin = end;
  }
}

/// Each mesh compiled once, its other layouts estimated from it, then the `exact` best
/// estimated compiled too. Meshes go in the order of their least possible step time; one whose
/// pipeline bound is above the best layout found so far is not compiled (Alpa prunes its stage
/// search the same way). The bound prices the model's run as the stage cut estimates it, scaled
/// down to the plans' prices when a compiled pipeline prices that run lower (never up: sharding
/// makes plans dearer, 1.0-2.2x the estimate on MAE ViT-L), at 90% for what the ratio does not
/// capture; the first pipeline mesh is always compiled, to measure it.
std::vector<RankedLayout> estimateThenCompile(const LayoutSearchRequest &request, const std::vector<Candidate> &all,
                                              const ModelSummary &model, size_t exact) {
  bool training = model.mode == PlanMode::Train;
  std::vector<std::string> meshNames; // distinct, in the candidates' order
  std::map<std::string, Candidate> meshCandidates;
  for (const Candidate &c : all)
    if (meshCandidates.emplace(meshOf(c).name(), meshOf(c)).second)
      meshNames.push_back(meshOf(c).name());
  std::map<std::string, CompiledMesh> meshes;
  std::map<std::string, std::string> pruned; // mesh -> why not compiled
  std::vector<std::optional<RankedLayout>> layouts(all.size());
  double best = std::numeric_limits<double>::infinity();
  int64_t runs = 0;             // model runs per step, from the first mesh compiled
  std::optional<double> toPlan; // plan seconds per estimated second, from the compiled pipelines
  std::string bestName;
  std::vector<std::string> order = meshNames;
  auto boundOf = [&](const std::string &name) {
    return pipelineBound(meshCandidates[name], model.runSeconds * toPlan.value_or(1.0), runs, request.devices);
  };
  for (size_t next = 0; next < order.size();) {
    // Cheapest bound first (pipelines with the fewest stages); ties keep the candidates' order.
    std::stable_sort(order.begin() + next, order.end(),
                     [&](const std::string &a, const std::string &b) { return boundOf(a) < boundOf(b); });
    // A wave of meshes compiled at once; its size, not the machine's threads, decides what the
    // next wave's bounds know, so the table is the same on every machine.
    std::vector<std::string> wave;
    for (; next < order.size() && wave.size() < kMeshesPerWave; ++next) {
      const std::string &name = order[next];
      const Candidate &mc = meshCandidates[name];
      if (double bound = boundOf(name); toPlan && 0.9 * bound > best) {
        std::ostringstream why;
        why << std::fixed << std::setprecision(1) << "not compiled: " << mc.pp << " stages idle "
            << 100.0 * (double)(mc.pp - 1) / (double)(runs + mc.pp - 1) << "% of a step of at least " << bound * 1e3
            << " ms, above " << bestName << "'s " << best * 1e3 << " ms";
        pruned[name] = why.str();
        continue;
      }
      wave.push_back(name);
    }
    std::vector<CompiledMesh> compiled(wave.size());
    parallelFor(wave.size(), [&](size_t w) { compiled[w] = compileMesh(request, meshCandidates.at(wave[w]), training); });
    for (size_t w = 0; w < wave.size(); ++w) {
      const std::string &name = wave[w];
      const CompiledMesh &mesh = meshes.emplace(name, std::move(compiled[w])).first->second;
      if (mesh.layout.rejected.empty() && runs == 0)
        runs = std::max<int64_t>(mesh.cost.microbatches, 1);
      if (mesh.runSeconds > 0 && model.runSeconds > 0)
        toPlan = std::min(toPlan.value_or(1.0), mesh.runSeconds / model.runSeconds);
      for (size_t i = 0; i < all.size(); ++i) {
        if (meshOf(all[i]).name() != name)
          continue;
        layouts[i] = fromMesh(request, all[i], meshCandidates[name], mesh);
        if (layouts[i]->valid && layouts[i]->seconds < best) {
          best = layouts[i]->seconds;
          bestName = layouts[i]->name;
        }
      }
    }
  }
  std::vector<RankedLayout> ranked;
  for (size_t i = 0; i < all.size(); ++i) {
    if (!layouts[i]) {
      layouts[i] = unpriced(request, all[i]);
      layouts[i]->estimated = true;
      layouts[i]->rejected = pruned[meshOf(all[i]).name()];
    }
    ranked.push_back(std::move(*layouts[i]));
  }
  compileFastest(request, all, exact, ranked);
  return ranked;
}

} // namespace

std::vector<RankedLayout> searchLayouts(const LayoutSearchRequest &asked) {
  if (asked.devices < 1)
    throw CompileRequestError("--devices must be >= 1");
  LayoutSearchRequest request = asked; // every layout's compile parses one import
  if (!request.base.importCache)
    request.base.importCache = std::make_shared<ImportCache>();
  ModelSummary model = summarizeModel(request.base);
  std::vector<Candidate> all = enumerate(request, model.mode);
  std::vector<RankedLayout> layouts;
  if (request.exhaustive || all.size() <= request.exhaustiveUpTo) {
    layouts.resize(all.size());
    parallelFor(all.size(), [&](size_t i) { layouts[i] = evaluate(request, all[i]); });
  } else {
    layouts = estimateThenCompile(request, all, model, request.exactLayouts);
  }
  // Compiled before estimated (cpc compile --auto takes the first), each fastest first.
  std::stable_sort(layouts.begin(), layouts.end(), [](const RankedLayout &a, const RankedLayout &b) {
    if (a.valid != b.valid)
      return a.valid;
    if (!a.valid)
      return false;
    if (a.estimated != b.estimated)
      return !a.estimated;
    if (std::abs(a.seconds - b.seconds) > 1e-9 * std::max(a.seconds, b.seconds)) // else a tie (rounding)
      return a.seconds < b.seconds;
    return a.bytesPerStep != b.bytesPerStep ? a.bytesPerStep < b.bytesPerStep : a.peakBytes < b.peakBytes;
  });
  return layouts;
}

void printLayoutTable(const std::vector<RankedLayout> &layouts, std::ostream &out) {
  size_t width = 20; // the layout column, wider for long names ("dp2 zero2 recompute full")
  for (const RankedLayout &l : layouts)
    width = std::max(width, l.name.size());
  out << "  rank  " << std::left << std::setw(width) << "layout" << std::right
      << "   step ms  compute  comm ms  idle ms  peak MB/rank  sent MB/step  flags\n";
  int rank = 0;
  for (const RankedLayout &l : layouts) {
    if (!l.valid)
      continue;
    std::string flags;
    for (const std::string &f : l.flags)
      flags += (flags.empty() ? "" : " ") + f;
    std::string shown = (l.estimated ? "~" : "") + std::to_string(++rank); // ~: estimated, not compiled
    out << "  " << std::setw(4) << shown << "  " << std::left << std::setw(width) << l.name << std::right << std::fixed
        << std::setprecision(2) << std::setw(10) << l.seconds * 1e3 << std::setw(9) << l.compute * 1e3 << std::setw(9)
        << l.communication * 1e3 << std::setw(9) << l.idle * 1e3 << std::setw(14) << l.peakBytes / 1e6 << std::setw(14)
        << l.bytesPerStep / 1e6 << "  " << (flags.empty() ? "(none)" : flags) << "\n"
        << std::defaultfloat;
  }
  for (const RankedLayout &l : layouts)
    if (!l.valid)
      out << "  rejected  " << std::left << std::setw(width) << l.name << std::right << "  " << l.rejected << "\n";
}

} // namespace cpc
