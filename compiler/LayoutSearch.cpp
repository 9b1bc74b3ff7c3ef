//===- LayoutSearch.cpp ---------------------------------------------------===//
#include "compiler/LayoutSearch.h"
#include "passes/Passes.h"

#include <algorithm>
#include <iomanip>
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

/// Compiles `c` on `request`'s model and prices it.
RankedLayout evaluate(const LayoutSearchRequest &request, const Candidate &c) {
  RankedLayout layout;
  layout.name = c.name();
  layout.flags = c.flags();
  layout.request = request.base;
  layout.request.quiet = true;
  layout.request.dumpSharding = layout.request.printPipeline = false;
  layout.request.dumpIrPath.clear();
  c.apply(layout.request);
  std::ostringstream discard;
  Plan plan;
  try {
    plan = compilePlan(layout.request, discard);
  } catch (const std::exception &e) {
    std::string why = e.what();
    layout.rejected = why.substr(0, why.find('\n'));
    return layout;
  }
  const nlohmann::json &run = plan.runMetadata();
  if (!run.contains("predicted_step")) {
    layout.rejected = "the plan predicts no step time";
    return layout;
  }
  const nlohmann::json &step = run["predicted_step"];
  layout.seconds = step.value("total_s", 0.0);
  layout.compute = step.value("compute_s", 0.0);
  layout.communication = step.value("communication_s", 0.0);
  layout.idle = step.value("idle_s", 0.0);
  layout.bytesPerStep = step.value("communication_bytes", 0.0);
  layout.peakBytes = plan.predictedPeakBytes;
  if (request.deviceMemory > 0 && layout.peakBytes > request.deviceMemory) {
    layout.rejected = "over budget: predicted peak " + std::to_string(layout.peakBytes) + " B per rank > " +
                      std::to_string(request.deviceMemory) + " B";
    return layout;
  }
  layout.valid = true;
  return layout;
}

} // namespace

std::vector<RankedLayout> searchLayouts(const LayoutSearchRequest &request) {
  if (request.devices < 1)
    throw CompileRequestError("--devices must be >= 1");
  std::vector<RankedLayout> layouts;
  for (const Candidate &c : enumerate(request, resolvePlanMode(request.base)))
    layouts.push_back(evaluate(request, c));
  std::stable_sort(layouts.begin(), layouts.end(), [](const RankedLayout &a, const RankedLayout &b) {
    if (a.valid != b.valid)
      return a.valid;
    if (!a.valid)
      return false;
    return a.seconds != b.seconds ? a.seconds < b.seconds : a.bytesPerStep < b.bytesPerStep;
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
    out << "  " << std::setw(4) << ++rank << "  " << std::left << std::setw(20) << l.name << std::right << std::fixed
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
