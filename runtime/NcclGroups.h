//===- NcclGroups.h - the host-side rules of the NCCL communicator ---------===//
//
// Everything the NCCL communicator decides without a GPU, in plain C++ so that host unit tests
// check it (runtime/cuda/NcclCommunicator.cpp only issues the calls):
// - which NCCL communicator serves a group (a list of world ranks; empty = the world) and the
//   ncclCommSplit calls that create the groups of a plan's mesh axes. ncclCommSplit is collective
//   over the whole parent (world) communicator, so every rank must make the same calls in the same
//   order: splitCalls derives them from the mesh and the axis sets alone, never from the rank;
// - validation and the messages of failed calls (the same words as the MPI communicator's);
// - point-to-point message headers (NCCL matches messages in posting order, not by channel);
// - the watchdog's policy (timeouts, when an operation counts as stuck, the line it prints).
//
#ifndef CPC_RUNTIME_NCCLGROUPS_H
#define CPC_RUNTIME_NCCLGROUPS_H

#include "kernels/Tensor.h"

#include <cstdint>
#include <string>
#include <vector>

namespace cpc::nccl {

// --- Groups -------------------------------------------------------------------------------------

/// The cache key of `group`'s communicator: the list as given, or empty when it is the whole world
/// in rank order (the world communicator serves it). A list's order defines the members' positions.
std::vector<int> groupKey(const std::vector<int> &group, int worldSize);

/// "world" or "{0,2,4}", for messages.
std::string describeGroup(const std::vector<int> &group);

/// "rank R: <kind>" and, for a group, " over ranks {a,b}" (the MPI communicator's wording).
std::string where(int rank, const std::string &kind, const std::vector<int> &group);

/// This rank's position in `group` (its rank in the group's communicator; the world rank when the
/// group is empty). Throws RuntimeError when the group repeats a rank, names one outside
/// [0, worldSize) or does not contain `rank`.
int memberPosition(const std::string &kind, const std::vector<int> &group, int rank, int worldSize);

/// How many ranks `group` has (worldSize when empty).
int groupSize(const std::vector<int> &group, int worldSize);

/// The world rank of the member at `position`.
int worldRankOf(int position, const std::vector<int> &group);

/// The NCCL rank of root `root` (a position in the group) in the group's communicator: members are
/// ranked by their position (the split key), so it is `root` itself once checked. Throws
/// RuntimeError "... root R outside a group of N".
int rootRank(const std::string &kind, int root, const std::vector<int> &group, int rank, int worldSize);

/// Element types the NCCL collectives take (f32, f64, f16, bf16, i64, i32).
bool supportedType(DType type);
/// Throws RuntimeError "... unsupported element type" or "... negative count" like the MPI one.
void checkCall(const std::string &kind, DType type, int64_t count, int rank, const std::vector<int> &group);

// --- Creating group communicators ----------------------------------------------------------------

/// The axis sets a plan's collectives use, normalised: each set in mesh-axis order without
/// repeats; sets listed twice, empty sets and sets of every axis (the world) dropped; ordered by
/// the mesh dims they cover. Throws RuntimeError on an axis the mesh lacks. The result depends only
/// on the inputs, so ranks that pass the same lists (in any order) agree on it.
std::vector<std::vector<std::string>> canonicalAxisSets(const std::vector<std::vector<std::string>> &axisSets,
                                                        const std::vector<std::string> &meshAxes);

/// One ncclCommSplit call of the world communicator.
struct SplitCall {
  std::vector<std::string> axes; ///< the axis set
  std::vector<int> group;        ///< this rank's group along `axes`, ascending: the cache key
  int color = 0;                 ///< the group's lowest rank: shared by its members, unique per group
  int key = 0;                   ///< this rank's position in the group (its rank in the new comm)
};

/// The splits rank `rank` makes to create the groups along every one of `axisSets` (any order,
/// repeats allowed): one call per canonical axis set whose groups are not the world, in the same
/// order on every rank. Throws RuntimeError when the mesh does not describe `worldSize` ranks.
std::vector<SplitCall> splitCalls(int rank, int worldSize, const std::vector<int64_t> &meshShape,
                                  const std::vector<std::string> &meshAxes,
                                  const std::vector<std::vector<std::string>> &axisSets);

// --- Point-to-point ------------------------------------------------------------------------------

/// Travels in front of every point-to-point message, so that the receiver can tell when the
/// message NCCL matched (the sender's next one, in posting order) is not the one it posted for.
struct MessageHeader {
  int64_t channel = -1;
  int64_t bytes = -1;
};
/// "" when `got` is the message a receive of `bytes` on `channel` from `peer` expects; otherwise
/// what went wrong, for the watchdog's line.
std::string headerMismatch(const MessageHeader &got, int64_t channel, int64_t bytes, int peer);

/// Which of the point-to-point communicators carries a message from world rank `from` to `to`:
/// by direction (towards higher ranks 0-1, lower 2-3) and the sender's parity. Each has its own
/// communicator and stream (NCCL runs one communicator's operations in order), so that a send
/// waiting for its receiver never holds up a receive: a rank's sends to a neighbour and its
/// receives from either neighbour (the traffic of pipeline stages) are always on different ones.
constexpr int kPointToPointLanes = 4;
int directionOf(int from, int to);

// --- Watchdog ------------------------------------------------------------------------------------

constexpr double kDefaultTimeoutSeconds = 30;
/// The collective timeout from CPC_NCCL_TIMEOUT_S (`value`; null or empty: 30 s; 0: no timeout).
/// Throws RuntimeError on anything but a number of seconds >= 0.
double watchdogTimeout(const char *value);
/// Creating a communicator or connecting peers waits for every member to arrive (ranks load plans
/// at different speeds): those get 10 times the collective timeout.
double creationTimeout(double timeout);
/// The timeout of an operation of `kind` ("create" and "connect": creationTimeout; else `timeout`).
double operationTimeout(const std::string &kind, double timeout);
/// How often the watchdog looks: a tenth of the timeout, between 50 ms and 1 s.
double pollSeconds(double timeout);

/// What the watchdog knows of one operation. Time counts from when the operation started on its
/// stream (the work queued before it may legitimately take long), or from when it was made for
/// host-side operations (communicator creation), which start at once.
struct TrackedOp {
  std::string kind;         ///< "all_reduce", "send", "create", "connect", ...
  std::string group;        ///< describeGroup of its members, or "{me,peer}"
  double startedAt = -1;    ///< when it was first seen started; < 0: not yet
  double timeout = kDefaultTimeoutSeconds; ///< 0: never stuck
};
enum class OpState { Queued, Running, Finished, Stuck };
/// Updates `op` with what the watchdog saw at `now` (seconds on a steady clock).
OpState observe(TrackedOp &op, bool started, bool finished, double now);

/// "collective all_reduce stuck for 30 s" ("point-to-point send ...", "point-to-point connect ...",
/// "communicator creation ...").
std::string stuckMessage(const TrackedOp &op);
/// The one line the watchdog prints before it ends the job:
/// "cpc-run: rank R: NCCL <what> (group G)".
std::string watchdogLine(int rank, const std::string &what, const std::string &group);

} // namespace cpc::nccl

#endif
