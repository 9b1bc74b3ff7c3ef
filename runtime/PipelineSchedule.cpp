//===- PipelineSchedule.cpp -----------------------------------------------===//
#include "runtime/PipelineSchedule.h"
#include "runtime/Plan.h"
#include "runtime/TensorIO.h"

#include <map>
#include <set>
#include <sstream>

namespace cpc {

const char *scheduleName(PipelineScheduleKind kind) {
  switch (kind) {
  case PipelineScheduleKind::GPipe: return "gpipe";
  case PipelineScheduleKind::OneFOneB: return "1f1b";
  case PipelineScheduleKind::Interleaved: return "interleaved";
  case PipelineScheduleKind::Forward: return "forward";
  }
  return "?";
}

PipelineScheduleKind parseScheduleName(const std::string &name) {
  for (auto kind : {PipelineScheduleKind::GPipe, PipelineScheduleKind::OneFOneB, PipelineScheduleKind::Interleaved,
                    PipelineScheduleKind::Forward})
    if (name == scheduleName(kind))
      return kind;
  throw RuntimeError("unknown pipeline schedule '" + name + "' (use gpipe, 1f1b, interleaved or forward)");
}

namespace {

/// Megatron's interleaved order: the k-th forward (or backward) of rank r works on microbatch
/// (k / (P*V)) * P + k % P of local chunk (k % (P*V)) / P (reversed for backward).
PipelineAction interleavedAction(int64_t k, bool backward, int64_t rank, int64_t P, int64_t V) {
  int64_t inGroup = k % (P * V);
  int64_t local = inGroup / P;
  if (backward)
    local = V - 1 - local;
  return {backward, local * P + rank, (k / (P * V)) * P + k % P};
}

std::vector<PipelineAction> interleavedRank(int64_t rank, int64_t P, int64_t V, int64_t M) {
  int64_t total = M * V;
  int64_t warmup = M == P ? total : std::min(total, (P - rank - 1) * 2 + (V - 1) * P);
  std::vector<PipelineAction> list;
  for (int64_t k = 0; k < warmup; ++k)
    list.push_back(interleavedAction(k, false, rank, P, V));
  for (int64_t i = 0; i < total - warmup; ++i) {
    list.push_back(interleavedAction(warmup + i, false, rank, P, V));
    list.push_back(interleavedAction(i, true, rank, P, V));
  }
  for (int64_t k = total - warmup; k < total; ++k)
    list.push_back(interleavedAction(k, true, rank, P, V));
  return list;
}

} // namespace

PipelineSchedule buildPipelineSchedule(PipelineScheduleKind kind, int64_t stages, int64_t virtualStages,
                                       int64_t microbatches) {
  if (stages < 1 || virtualStages < 1 || microbatches < 1)
    throw RuntimeError("--pp, --virtual-stages and --microbatches must be >= 1");
  if (microbatches > kMaxMicrobatches)
    throw RuntimeError("a pipeline runs at most " + std::to_string(kMaxMicrobatches) + " microbatches per step, not " +
                       std::to_string(microbatches));
  if (kind != PipelineScheduleKind::Interleaved && virtualStages != 1)
    throw RuntimeError("--virtual-stages " + std::to_string(virtualStages) + " needs --schedule interleaved");
  if (kind == PipelineScheduleKind::Interleaved) {
    if (virtualStages < 2)
      throw RuntimeError("--schedule interleaved needs --virtual-stages V >= 2");
    if (microbatches % stages)
      throw RuntimeError("--schedule interleaved needs the microbatches (" + std::to_string(microbatches) +
                         ") to be a multiple of --pp " + std::to_string(stages));
  }
  PipelineSchedule s;
  s.kind = kind;
  s.stages = stages;
  s.virtualStages = virtualStages;
  s.microbatches = microbatches;
  for (int64_t r = 0; r < stages; ++r) {
    std::vector<PipelineAction> list;
    if (kind == PipelineScheduleKind::GPipe || kind == PipelineScheduleKind::Forward) {
      for (int64_t m = 0; m < microbatches; ++m)
        list.push_back({false, r, m});
      for (int64_t m = 0; kind == PipelineScheduleKind::GPipe && m < microbatches; ++m)
        list.push_back({true, r, m});
    } else if (kind == PipelineScheduleKind::OneFOneB) {
      int64_t warmup = std::min(stages - r - 1, microbatches);
      for (int64_t m = 0; m < warmup; ++m)
        list.push_back({false, r, m});
      for (int64_t i = 0; i < microbatches - warmup; ++i) {
        list.push_back({false, r, warmup + i});
        list.push_back({true, r, i});
      }
      for (int64_t m = microbatches - warmup; m < microbatches; ++m)
        list.push_back({true, r, m});
    } else {
      list = interleavedRank(r, stages, virtualStages, microbatches);
    }
    s.actions.push_back(std::move(list));
  }
  return s;
}

std::optional<PipelineSchedule> planPipelineSchedule(const Plan &plan) {
  const nlohmann::json &run = plan.runMetadata();
  if (!run.is_object() || !run.contains("pipeline"))
    return std::nullopt;
  return PipelineSchedule::fromJson(run["pipeline"]);
}

double PipelineSchedule::bubbleFraction() const {
  double P = stages, M = microbatches, V = virtualStages;
  return (P - 1) / (V * M + P - 1);
}

int64_t PipelineSchedule::peakInFlight(int64_t rank) const {
  int64_t live = 0, peak = 0;
  for (const PipelineAction &a : actions.at(rank)) {
    live += a.backward ? -1 : 1;
    peak = std::max(peak, live);
  }
  return peak;
}

nlohmann::json PipelineSchedule::toJson() const {
  nlohmann::json ranks = nlohmann::json::array();
  for (const auto &list : actions) {
    nlohmann::json l = nlohmann::json::array();
    for (const PipelineAction &a : list)
      l.push_back(std::string(a.backward ? "B" : "F") + std::to_string(a.chunk) + "." + std::to_string(a.microbatch));
    ranks.push_back(l);
  }
  return {{"schedule", scheduleName(kind)}, {"stages", stages}, {"virtual_stages", virtualStages},
          {"microbatches", microbatches}, {"actions", ranks}};
}

namespace {
PipelineAction parseAction(const std::string &text) {
  size_t dot = text.find('.');
  if (text.size() < 4 || (text[0] != 'F' && text[0] != 'B') || dot == std::string::npos || dot < 2 ||
      dot + 1 == text.size() || text.find_first_not_of("0123456789", 1) != dot ||
      text.find_first_not_of("0123456789", dot + 1) != std::string::npos || dot > 10 || text.size() - dot > 10)
    throw RuntimeError("pipeline action '" + text + "' is not F<chunk>.<microbatch> or B<chunk>.<microbatch>");
  return {text[0] == 'B', std::stoll(text.substr(1, dot - 1)), std::stoll(text.substr(dot + 1))};
}
} // namespace

PipelineSchedule PipelineSchedule::fromJson(const nlohmann::json &j) {
  try {
    return parse(j);
  } catch (const nlohmann::json::exception &e) {
    throw RuntimeError(std::string("pipeline schedule: ") + e.what());
  }
}

PipelineSchedule PipelineSchedule::parse(const nlohmann::json &j) {
  PipelineSchedule s;
  s.kind = parseScheduleName(j.at("schedule").get<std::string>());
  s.stages = j.at("stages").get<int64_t>();
  s.virtualStages = j.at("virtual_stages").get<int64_t>();
  s.microbatches = j.at("microbatches").get<int64_t>();
  if (s.stages < 1 || s.stages > 4096 || s.virtualStages < 1 || s.virtualStages > 64 || s.microbatches < 1 ||
      s.microbatches > kMaxMicrobatches)
    throw RuntimeError("pipeline schedule: stages, virtual stages or microbatches out of range");
  const auto &ranks = j.at("actions");
  if (!ranks.is_array() || (int64_t)ranks.size() != s.stages)
    throw RuntimeError("pipeline schedule: needs one action list per pipeline rank");
  for (int64_t r = 0; r < s.stages; ++r) {
    std::vector<PipelineAction> list;
    std::set<std::pair<int64_t, int64_t>> forwarded, done;
    for (const auto &text : ranks[r]) {
      PipelineAction a = parseAction(text.get<std::string>());
      std::string where = "pipeline rank " + std::to_string(r) + ", action " + text.get<std::string>();
      if (a.chunk < 0 || a.chunk >= s.chunks() || a.chunk % s.stages != r)
        throw RuntimeError(where + ": chunk " + std::to_string(a.chunk) + " does not run on this rank");
      if (a.microbatch < 0 || a.microbatch >= s.microbatches)
        throw RuntimeError(where + ": no such microbatch");
      auto key = std::make_pair(a.chunk, a.microbatch);
      if (!a.backward && !forwarded.insert(key).second)
        throw RuntimeError(where + ": runs twice");
      if (a.backward && s.forwardOnly())
        throw RuntimeError(where + ": a forward schedule (inference) has no backward");
      if (a.backward && (!forwarded.count(key) || !done.insert(key).second))
        throw RuntimeError(where + ": backward before its forward, or twice");
      list.push_back(a);
    }
    if (s.forwardOnly() && (int64_t)forwarded.size() != s.virtualStages * s.microbatches)
      throw RuntimeError("pipeline rank " + std::to_string(r) + " leaves some microbatches without a forward");
    if (!s.forwardOnly() && (int64_t)done.size() != s.virtualStages * s.microbatches)
      throw RuntimeError("pipeline rank " + std::to_string(r) + " leaves some microbatches without a backward");
    s.actions.push_back(std::move(list));
  }
  return s;
}

std::string PipelineSchedule::format() const {
  std::ostringstream os;
  for (size_t r = 0; r < actions.size(); ++r) {
    os << "pipeline rank " << r << ":";
    for (const PipelineAction &a : actions[r])
      os << " " << (a.backward ? "B" : "F") << a.chunk << "." << a.microbatch;
    os << "\n";
  }
  return os.str();
}

} // namespace cpc
