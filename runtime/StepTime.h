//===- StepTime.h - the step time a plan predicts -------------------------===//
//
// What one step of a plan costs on each rank under a cost profile: its programs' compute steps
// priced by their class (FLOPs or bytes), their collectives and sends by the bytes the counting
// communicator counts, over their group's size. A training step runs every microbatch then the
// update; an inference run every microbatch. With pipeline stages the schedule is simulated: an
// action starts once its rank is free and the action that sends it its input has ended (plus
// the transfer), and a rank's waits are its idle time.
//
#ifndef CPC_RUNTIME_STEPTIME_H
#define CPC_RUNTIME_STEPTIME_H

#include "runtime/CostProfile.h"
#include "runtime/Plan.h"

#include <nlohmann/json.hpp>

#include <vector>

namespace cpc {

struct PredictedTime {
  double compute = 0;       // kernels
  double communication = 0; // collectives and sends
  double idle = 0;          // waiting for another pipeline stage
  double bytes = 0;         // sent by the rank (the counting communicator's count)
  double total() const { return compute + communication + idle; }
  PredictedTime &operator+=(const PredictedTime &o) {
    compute += o.compute;
    communication += o.communication;
    idle += o.idle;
    bytes += o.bytes;
    return *this;
  }
  nlohmann::json toJson() const;
};

/// One run of program `p` on `rank`.
PredictedTime programTime(const Plan &plan, const RankProgram &p, int rank, const CostProfile &profile);
/// The compute part of programTime: the same on every rank that runs `p`.
double programComputeSeconds(const Plan &plan, const RankProgram &p, const CostProfile &profile);

/// One step of `plan` on each rank (index: world rank). Throws RuntimeError on a plan whose
/// programs or schedule do not fit its metadata.
std::vector<PredictedTime> predictStepTime(const Plan &plan, const CostProfile &profile);

/// The slowest rank's step: what the step takes.
PredictedTime slowestRank(const std::vector<PredictedTime> &ranks);

/// What a plan records as its "predicted_step": the slowest rank's times, each rank's total
/// ("per_rank_s") and the profile's source.
nlohmann::json predictedStepJson(const Plan &plan, const CostProfile &profile);

} // namespace cpc

#endif
