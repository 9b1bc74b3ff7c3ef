//===- ScheduleCheck.h - proof that no rank of a plan can hang ------------===//
//
// Every rank's communication in a plan is fixed at compile time, so whether the ranks can hang
// is decidable before anything runs: simulate all ranks' ordered lists of collectives, sends and
// receives, where a collective completes only when every member of its group has it next (the
// same collective: a member issuing another one there is a mismatch), a send completes at once
// (the runtime copies what it sends and never waits for the receiver, see
// Communicator::sendBuffered) and a receive when its message has been sent (matched by peer and
// tag, in order). For a pipeline the lists are the whole step: each rank's schedule of forward and
// backward programs per microbatch (tags carry the microbatch), the hand-overs between its own
// programs, then its update. A plan that fails is not written (cpc compile) or run.
//
#ifndef CPC_RUNTIME_SCHEDULECHECK_H
#define CPC_RUNTIME_SCHEDULECHECK_H

#include "runtime/PipelineSchedule.h"
#include "runtime/Plan.h"

#include <cstdint>
#include <string>
#include <vector>

namespace cpc {

/// One communication a rank issues, in its program's order.
struct CommAction {
  enum class Kind { Collective, Send, Recv } kind = Kind::Collective;
  std::string what;       // e.g. "cpc.all_reduce f32[4x8]": equal on every member of a collective
  std::vector<int> group; // Collective: the members, ascending world ranks
  int peer = -1;          // Send / Recv: the other world rank
  int64_t channel = 0;
  int64_t bytes = 0;
  std::string loc;        // where the step came from, for messages
};

/// Each world rank's communication in program `name` of `plan` (its groups and peers resolved on
/// the plan's mesh). Throws RuntimeError for a step that names no valid peer or group.
std::vector<std::vector<CommAction>> commActions(const Plan &plan, const std::string &name);

/// One rank's communication in `program` run for `microbatch` (hand-overs as transfers to itself;
/// tags of `channels` per microbatch: Plan::pointToPointChannels).
std::vector<CommAction> programCommActions(const Plan &plan, const RankProgram &program, int rank,
                                           int64_t microbatch, int64_t channels);

/// Each world rank's communication over a whole pipelined step of `schedule`.
std::vector<std::vector<CommAction>> pipelineCommActions(const Plan &plan, const PipelineSchedule &schedule);

/// The program of `phase` (and `chunk`, unless -1) that `rank` runs; throws RuntimeError.
const RankProgram &pipelineProgram(const Plan &plan, int rank, ProgramPhase phase, int64_t chunk);

/// Simulates the ranks' lists (rank i runs ranks[i]); "" when every action completes, else one
/// line naming the ranks and the actions where they would wait forever or disagree. With
/// `sendPeakBytes`, also the most bytes each rank had sent and not yet received at once in the
/// simulated order (what its buffered sends hold).
std::string checkSchedule(const std::vector<std::vector<CommAction>> &ranks,
                          std::vector<int64_t> *sendPeakBytes = nullptr);

/// checkSchedule over every program of `plan` (over the whole step for a pipeline); "" or the
/// first problem, prefixed by the program.
std::string checkPlanSchedule(const Plan &plan, std::vector<int64_t> *sendPeakBytes = nullptr);

} // namespace cpc

#endif
