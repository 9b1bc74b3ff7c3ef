//===- StepTime.cpp -------------------------------------------------------===//
#include "runtime/StepTime.h"
#include "kernels/OpAttrs.h"
#include "runtime/PipelineSchedule.h"
#include "runtime/ScheduleCheck.h"
#include "runtime/Traffic.h"
#include "runtime/TrainRecipe.h"

#include <algorithm>
#include <map>
#include <tuple>

namespace cpc {

nlohmann::json PredictedTime::toJson() const {
  return {{"compute_s", compute},
          {"communication_s", communication},
          {"idle_s", idle},
          {"total_s", total()},
          {"communication_bytes", bytes}};
}

namespace {

int64_t bytesOf(const Plan &plan, const std::vector<int> &buffers) {
  int64_t bytes = 0;
  for (int b : buffers)
    bytes += plan.buffers[b].bytes();
  return bytes;
}

} // namespace

double programComputeSeconds(const Plan &plan, const RankProgram &p, const CostProfile &profile) {
  double seconds = 0;
  for (const StepDesc &step : p.steps) {
    seconds += profile.stepSeconds;
    if (communicates(step.op))
      continue;
    // The compiler's count of the bytes moved, when it gave one.
    double moved = (double)(step.bytes ? step.bytes : bytesOf(plan, step.inputs) + bytesOf(plan, step.outputs));
    seconds += step.gemm.size() == 4 ? profile.gemmSeconds({step.gemm[0], step.gemm[1], step.gemm[2], step.gemm[3]},
                                                           moved, opName(step.op))
                                     : profile.computeSeconds(step.cost, (double)step.flops, moved, opName(step.op));
  }
  return seconds;
}

namespace {

/// `p`'s communication on `rank` (its groups and its place in them), added to `t`.
void addCommunication(const Plan &plan, const RankProgram &p, int rank, const CostProfile &profile, PredictedTime &t) {
  RankGroups groups(plan, rank);
  for (const StepDesc &step : p.steps) {
    if (!communicates(step.op) || step.op == OpKind::Recv) // a receive's wait is the schedule's (idle), its bytes the sender's
      continue;
    kernels::OpAttrs attrs = kernels::decodeOpAttrs(step.op, step.attrs);
    std::vector<int> own{rank};
    const std::vector<int> *group =
        step.op == OpKind::Send || plan.meshShape.empty() ? &own : &groups.over(attrs.meshAxes);
    int n = step.op == OpKind::Send ? 2 : (int)group->size();
    int position = (int)(std::find(group->begin(), group->end(), rank) - group->begin());
    int64_t counted = traffic::ofStep(step.op, bytesOf(plan, step.inputs), bytesOf(plan, step.outputs), n, position,
                                      (int)attrs.root);
    t.communication += profile.collectiveSeconds(opName(step.op), n, (double)counted);
    t.bytes += (double)counted;
  }
}

/// programTime with each program's compute priced once (it does not depend on the rank) and
/// each (program, rank)'s time once (a pipeline runs a program once per microbatch).
class ProgramPricer {
public:
  ProgramPricer(const Plan &plan, const CostProfile &profile) : plan_(plan), profile_(profile) {}
  const PredictedTime &operator()(const RankProgram &p, int rank) {
    auto [it, added] = times_.try_emplace({&p, rank});
    if (added) {
      auto [compute, first] = compute_.try_emplace(&p, 0.0);
      if (first)
        compute->second = programComputeSeconds(plan_, p, profile_);
      it->second.compute = compute->second;
      addCommunication(plan_, p, rank, profile_, it->second);
    }
    return it->second;
  }

private:
  const Plan &plan_;
  const CostProfile &profile_;
  std::map<const RankProgram *, double> compute_;
  std::map<std::pair<const RankProgram *, int>, PredictedTime> times_;
};

} // namespace

PredictedTime programTime(const Plan &plan, const RankProgram &p, int rank, const CostProfile &profile) {
  PredictedTime t;
  t.compute = programComputeSeconds(plan, p, profile);
  addCommunication(plan, p, rank, profile, t);
  return t;
}

namespace {

const RankProgram *programOfPhase(const Plan &plan, int rank, ProgramPhase phase) {
  for (const RankProgram &p : plan.programs)
    if (p.phase == phase && plan.runsOn(p, rank))
      return &p;
  return nullptr;
}

/// The world rank of pipeline stage `stage` with `rank`'s other mesh coordinates.
int rankOfStage(const Plan &plan, int rank, int64_t stage) {
  std::vector<int64_t> coords = meshCoordinates(rank, plan.meshShape);
  for (size_t d = 0; d < plan.meshAxes.size(); ++d)
    if (plan.meshAxes[d] == "pp")
      coords[d] = stage;
  return (int)meshRank(coords, plan.meshShape);
}

/// The runtime's copies around a pipeline program: each hand-over it reads is bound into its
/// arena and each it hands over is copied out to be kept (Microbatches.cpp), each a read and a
/// write of its bytes at the profile's memory rate.
double handOverSeconds(const Plan &plan, const RankProgram &p, const CostProfile &profile) {
  double moved = 0;
  for (const std::vector<NamedBuffer> *buffers : {&plan.inputs, &plan.outputs})
    for (const NamedBuffer &b : *buffers)
      if (b.isTransfer() && b.program == p.name)
        moved += 2.0 * (double)plan.buffers[b.buffer].bytes();
  return moved > 0 ? profile.computeSeconds(CostClass::Memory, 0, moved) : 0.0;
}

/// Every rank's actions in schedule order, each starting when its rank is free and the action
/// that hands it its input (the previous chunk's forward, the next chunk's backward, of the same
/// microbatch) has ended; then the rank's update. Returns each rank's time.
std::vector<PredictedTime> simulatePipeline(const Plan &plan, const PipelineSchedule &s, const CostProfile &profile) {
  int world = std::max(plan.worldSize, 1);
  std::vector<PredictedTime> time(world);
  std::vector<double> free(world, 0);
  std::vector<size_t> next(world, 0);
  // End time of (rank, backward, chunk, microbatch).
  std::map<std::tuple<int, bool, int64_t, int64_t>, double> ended;
  std::vector<std::vector<PredictedTime>> cost(world);
  std::vector<int64_t> stage(world);
  ProgramPricer price(plan, profile);
  for (int r = 0; r < world; ++r) {
    stage[r] = plan.shardIndex(r, {"pp"});
    for (const PipelineAction &a : s.actions.at(stage[r])) {
      const RankProgram &p =
          pipelineProgram(plan, r, a.backward ? ProgramPhase::Backward : ProgramPhase::Forward, a.chunk);
      cost[r].push_back(price(p, r));
      cost[r].back().compute += handOverSeconds(plan, p, profile);
    }
  }
  for (bool progress = true; progress;) {
    progress = false;
    for (int r = 0; r < world; ++r)
      while (next[r] < s.actions[stage[r]].size()) {
        const PipelineAction &a = s.actions[stage[r]][next[r]];
        int64_t from = a.backward ? a.chunk + 1 : a.chunk - 1; // the chunk that hands over its input
        double ready = 0;
        if (from >= 0 && from < s.chunks()) {
          auto it = ended.find({rankOfStage(plan, r, from % s.stages), a.backward, from, a.microbatch});
          if (it == ended.end())
            break; // not yet simulated: another pass
          ready = it->second;
        }
        const PredictedTime &c = cost[r][next[r]];
        double start = std::max(free[r], ready);
        time[r].idle += start - free[r];
        time[r].compute += c.compute;
        time[r].communication += c.communication;
        time[r].bytes += c.bytes;
        free[r] = start + c.compute + c.communication;
        ended[{r, a.backward, a.chunk, a.microbatch}] = free[r];
        ++next[r];
        progress = true;
      }
  }
  for (int r = 0; r < world; ++r) {
    if (next[r] < s.actions[stage[r]].size())
      throw RuntimeError("the pipeline schedule cannot complete on rank " + std::to_string(r));
    if (const RankProgram *apply = s.forwardOnly() ? nullptr : programOfPhase(plan, r, ProgramPhase::Apply))
      time[r] += price(*apply, r);
  }
  return time;
}

} // namespace

std::vector<PredictedTime> predictStepTime(const Plan &plan, const CostProfile &profile) {
  if (std::optional<PipelineSchedule> schedule = planPipelineSchedule(plan))
    return simulatePipeline(plan, *schedule, profile);
  int world = std::max(plan.worldSize, 1);
  std::vector<PredictedTime> time(world);
  int64_t runs = 1; // of the microbatch program: the accumulation's microbatches, or the inference's
  ProgramPhase micro = ProgramPhase::Infer, update = ProgramPhase::None;
  if (plan.mode == PlanMode::Train) {
    runs = plan.training.contains("recipe") ? TrainRecipe::fromJson(plan.training["recipe"]).accumulation : 1;
    micro = runs > 1 ? ProgramPhase::Accumulate : ProgramPhase::TrainStep;
    update = runs > 1 ? ProgramPhase::Apply : ProgramPhase::None;
  } else {
    runs = plan.inference.value("microbatches", (int64_t)1);
  }
  ProgramPricer price(plan, profile);
  for (int r = 0; r < world; ++r) {
    const RankProgram *p = programOfPhase(plan, r, micro);
    if (!p) { // programs without roles (a plan made by hand): each once
      for (const RankProgram &q : plan.programs)
        if (plan.runsOn(q, r))
          time[r] += price(q, r);
      continue;
    }
    PredictedTime one = price(*p, r);
    time[r].compute = runs * one.compute;
    time[r].communication = runs * one.communication;
    time[r].bytes = runs * one.bytes;
    if (const RankProgram *u = update == ProgramPhase::None ? nullptr : programOfPhase(plan, r, update))
      time[r] += price(*u, r);
  }
  return time;
}

PredictedTime slowestRank(const std::vector<PredictedTime> &ranks) {
  PredictedTime slowest;
  for (const PredictedTime &t : ranks)
    if (t.total() > slowest.total())
      slowest = t;
  return slowest;
}

nlohmann::json predictedStepJson(const Plan &plan, const CostProfile &profile) {
  std::vector<PredictedTime> ranks = predictStepTime(plan, profile);
  nlohmann::json perRank = nlohmann::json::array();
  for (const PredictedTime &t : ranks)
    perRank.push_back(t.total());
  nlohmann::json step = slowestRank(ranks).toJson();
  step["per_rank_s"] = perRank;
  step["profile"] = profile.source;
  return step;
}

} // namespace cpc
