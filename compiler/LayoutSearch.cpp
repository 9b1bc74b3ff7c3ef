//===- LayoutSearch.cpp ---------------------------------------------------===//
#include "compiler/LayoutSearch.h"
#include "compiler/LayoutEstimate.h"
#include "passes/Passes.h"
#include "runtime/ModelState.h"

#include <algorithm>
#include <cmath>
#include <iomanip>
#include <map>
#include <optional>
#include <sstream>

namespace cpc {

namespace {

/// A layout to try: the flags that make it and what they set in the request.
struct Candidate {
  int64_t dp = 1, tp = 1, pp = 1, zero = 0;
  TensorParallelMode mode = TensorParallelMode::OneD;
  PipelineScheduleKind schedule = PipelineScheduleKind::OneFOneB;
  Precision precision = Precision::FP32;

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
              all.push_back({dp, tp, pp, zero, tpMode, schedule, precision});
      }
  return all;
}

/// The layout's request: the base with `c`'s flags, no reports.
CompileRequest requestFor(const LayoutSearchRequest &request, const Candidate &c) {
  CompileRequest r = request.base;
  r.quiet = true;
  r.dumpSharding = r.printPipeline = false;
  r.dumpIrPath.clear();
  c.apply(r);
  return r;
}

/// Compiles `c` on `request`'s model into `plan`; returns why not when it does not build.
std::optional<std::string> compileCandidate(const LayoutSearchRequest &request, const Candidate &c, Plan &plan) {
  std::ostringstream discard;
  try {
    plan = compilePlan(requestFor(request, c), discard);
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

/// Rejects `layout` when its peak is over the budget.
void checkBudget(const LayoutSearchRequest &request, RankedLayout &layout) {
  layout.valid = request.deviceMemory <= 0 || layout.peakBytes <= request.deviceMemory;
  if (!layout.valid)
    layout.rejected = std::string(layout.estimated ? "over budget (estimated)" : "over budget") + ": predicted peak " +
                      std::to_string(layout.peakBytes) + " B per rank > " + std::to_string(request.deviceMemory) + " B";
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

/// A mesh's compile: its own layout's exact price and what prices the others on it.
struct CompiledMesh {
  RankedLayout layout;
  MeshCost cost;
};

CompiledMesh compileMesh(const LayoutSearchRequest &request, const Candidate &c, bool training) {
  CompiledMesh m{unpriced(request, c), {}};
  Plan plan;
  if (std::optional<std::string> why = compileCandidate(request, c, plan)) {
    m.layout.rejected = *why;
    return m;
  }
  priceFromPlan(request, plan, m.layout);
  m.cost.step = {m.layout.compute, m.layout.communication, m.layout.idle, m.layout.bytesPerStep, m.layout.peakBytes};
  const nlohmann::json &meta = plan.runMetadata();
  m.cost.dp = c.dp;
  m.cost.pp = c.pp;
  m.cost.training = training;
  if (training) {
    m.cost.states = modelStateBytes(plan);
    m.cost.microbatches = c.pp > 1 ? meta["pipeline"].value("microbatches", (int64_t)1)
                                   : meta["recipe"].value("gradient_accumulation", (int64_t)1);
  }
  return m;
}

/// Each mesh compiled once, its other layouts estimated from it, then the `exact` best
/// estimated compiled too.
std::vector<RankedLayout> estimateThenCompile(const LayoutSearchRequest &request, const std::vector<Candidate> &all,
                                              bool training, size_t exact) {
  std::map<std::string, CompiledMesh> meshes;
  std::vector<RankedLayout> layouts;
  for (const Candidate &c : all) {
    Candidate mc = meshOf(c);
    auto it = meshes.find(mc.name());
    if (it == meshes.end())
      it = meshes.emplace(mc.name(), compileMesh(request, mc, training)).first;
    const CompiledMesh &mesh = it->second;
    if (mc.name() == c.name()) { // the mesh's own layout: compiled
      layouts.push_back(mesh.layout);
      continue;
    }
    RankedLayout layout = unpriced(request, c);
    layout.estimated = true;
    if (!mesh.layout.rejected.empty() && mesh.layout.rejected.rfind("over budget", 0) != 0) {
      layout.rejected = "as " + mc.name() + ": " + mesh.layout.rejected;
    } else {
      LayoutEstimate e = estimateLayout(mesh.cost, c.zero, c.schedule, request.base.plan.profile);
      layout.seconds = e.total();
      layout.compute = e.compute;
      layout.communication = e.communication;
      layout.idle = e.idle;
      layout.bytesPerStep = e.bytes;
      layout.peakBytes = e.peakBytes;
      checkBudget(request, layout);
    }
    layouts.push_back(std::move(layout));
  }
  std::vector<size_t> order(layouts.size());
  for (size_t i = 0; i < order.size(); ++i)
    order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return layouts[a].valid != layouts[b].valid ? layouts[a].valid : layouts[a].seconds < layouts[b].seconds;
  });
  size_t compiled = 0;
  for (size_t i : order) {
    if (compiled >= exact || !layouts[i].valid)
      break;
    if (layouts[i].estimated)
      layouts[i] = evaluate(request, all[i]);
    compiled += layouts[i].valid;
  }
  return layouts;
}

} // namespace

std::vector<RankedLayout> searchLayouts(const LayoutSearchRequest &asked) {
  if (asked.devices < 1)
    throw CompileRequestError("--devices must be >= 1");
  LayoutSearchRequest request = asked; // every layout's compile parses one import
  if (!request.base.importCache)
    request.base.importCache = std::make_shared<ImportCache>();
  PlanMode mode = resolvePlanMode(request.base);
  std::vector<Candidate> all = enumerate(request, mode);
  std::vector<RankedLayout> layouts;
  if (request.exhaustive || all.size() <= request.exhaustiveUpTo) {
    for (const Candidate &c : all)
      layouts.push_back(evaluate(request, c));
  } else {
    layouts = estimateThenCompile(request, all, mode == PlanMode::Train, request.exactLayouts);
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
  out << "  rank  layout                 step ms  compute  comm ms  idle ms  peak MB/rank  sent MB/step  flags\n";
  int rank = 0;
  for (const RankedLayout &l : layouts) {
    if (!l.valid)
      continue;
    std::string flags;
    for (const std::string &f : l.flags)
      flags += (flags.empty() ? "" : " ") + f;
    std::string shown = (l.estimated ? "~" : "") + std::to_string(++rank); // ~: estimated, not compiled
    out << "  " << std::setw(4) << shown << "  " << std::left << std::setw(20) << l.name << std::right << std::fixed
        << std::setprecision(2) << std::setw(10) << l.seconds * 1e3 << std::setw(9) << l.compute * 1e3 << std::setw(9)
        << l.communication * 1e3 << std::setw(9) << l.idle * 1e3 << std::setw(14) << l.peakBytes / 1e6 << std::setw(14)
        << l.bytesPerStep / 1e6 << "  " << (flags.empty() ? "(none)" : flags) << "\n"
        << std::defaultfloat;
  }
  for (const RankedLayout &l : layouts)
    if (!l.valid)
      out << "  rejected  " << std::left << std::setw(20) << l.name << std::right << "  " << l.rejected << "\n";
}

} // namespace cpc
