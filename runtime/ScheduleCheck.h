//===- ScheduleCheck.h - proof that no rank of a plan can hang ------------===//
//
// Every rank's communication in a plan is fixed at compile time, so whether the ranks can hang
// is decidable before anything runs: simulate all ranks' ordered lists of collectives, sends and
// receives, where a collective completes only when every member of its group has it next (the
// same collective: a member issuing another one there is a mismatch) and a send only when its
// peer has the matching receive next (the conservative, synchronous model: a plan that passes
// cannot hang whatever MPI buffers). A plan that fails is not written (cpc compile) or run.
//
#ifndef CPC_RUNTIME_SCHEDULECHECK_H
#define CPC_RUNTIME_SCHEDULECHECK_H

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

/// Simulates the ranks' lists (rank i runs ranks[i]); "" when every action completes, else one
/// line naming the ranks and the actions where they would wait forever or disagree.
std::string checkSchedule(const std::vector<std::vector<CommAction>> &ranks);

/// checkSchedule over every program of `plan`; "" or the first problem, prefixed by the program.
std::string checkPlanSchedule(const Plan &plan);

} // namespace cpc

#endif
