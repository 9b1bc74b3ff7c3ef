//===- Communicator.h - collectives between the ranks of a plan ----------===//
//
// The executor runs collective steps through this interface: MPI between CPU processes, NCCL
// between GPUs. Every call is counted (calls and bytes sent per rank, per kind), in one place
// (countingCommunicator), so that cpc-run can report communication per step and tests can check
// it against the analytical volume.
//
#ifndef CPC_RUNTIME_COMMUNICATOR_H
#define CPC_RUNTIME_COMMUNICATOR_H

#include "kernels/Tensor.h"
#include "runtime/Traffic.h"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <climits>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace cpc {

/// Calls and bytes of one kind of collective (bytes: what this rank sends, as a ring
/// implementation would: all-reduce 2(n-1)/n of the buffer, all-gather and reduce-scatter
/// (n-1)/n of the full buffer, all-to-all (n-1)/n of its send buffer, broadcast the buffer from
/// the root).
struct CollectiveCount {
  int64_t calls = 0;
  int64_t bytes = 0;
};

/// How an all-reduce combines the ranks' values (the dialect's ReductionKind, same names).
enum class ReduceOp : uint8_t { Sum, Max };
/// "sum" or "max"; parseReduceOp throws RuntimeError on anything else.
const char *reduceOpName(ReduceOp op);
ReduceOp parseReduceOp(const std::string &name);

/// A collective in flight (c10d's Work). Collectives complete in the order they were posted.
class Work {
public:
  virtual ~Work() = default;
  /// Moves the collective (and those posted before it) on without blocking; true once it has
  /// completed: its results are in place and its buffers free again.
  virtual bool test() = 0;
  /// Completes it (and those posted before it).
  virtual void wait() = 0;
};

/// `count` elements at `data`: one member of a bucket that is reduced as one collective.
struct BufferRange {
  void *data = nullptr;
  int64_t count = 0;
};

struct AllReduceOptions {
  ReduceOp op = ReduceOp::Sum;
};
struct ReduceScatterOptions {
  ReduceOp op = ReduceOp::Sum;
};
struct AllGatherOptions {};

class Communicator;

/// The ranks a collective runs among, made once per member list by Communicator::group (as
/// c10d's process groups) and passed to every collective on them. A rank's position in the list
/// is its place in the group: the block it gets in allGather / reduceScatter, the root a rooted
/// collective names.
class CommGroup {
public:
  /// World ranks in group order; empty for the whole world.
  const std::vector<int> &members() const { return members_; }
  bool isWorld() const { return members_.empty(); }
  int size() const { return size_; }
  /// This rank's place in the group.
  int position() const { return position_; }

private:
  friend class Communicator;
  CommGroup(std::vector<int> members, int position, int size)
      : members_(std::move(members)), position_(position), size_(size) {}
  std::vector<int> members_;
  int position_, size_;
};

/// "rank R: <kind>" and, for a group, " over ranks {a,b}": how every communicator's errors begin.
std::string describeCall(int rank, const std::string &kind, const std::vector<int> &members);
/// This rank's place in `members` (`rank` when empty: the world). Throws RuntimeError
/// (describeCall, then "invalid group ..." or "this rank is not a member of the group") when a
/// rank repeats or lies outside [0, worldSize), or `rank` is not among them.
int groupPosition(const std::string &kind, const std::vector<int> &members, int rank, int worldSize);

class Communicator {
public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;

  /// The group of `members` (world ranks in group order; empty: the world), made the first
  /// time the list is asked for and kept: the same object every time after. Throws
  /// RuntimeError (groupPosition's, naming `purpose`) for a bad list. A communicator makes what
  /// it needs for the group then (createGroup): MPI a communicator among the members, which
  /// they make together, so the members ask for their groups in the same order.
  virtual const CommGroup &group(const std::vector<int> &members, const std::string &purpose = "group");
  const CommGroup &world() { return group({}, "group"); }

  // The members of a group call its collectives in the same order. Each collective also has a
  // form that takes the member list (group(members) first).

  /// In-place reduction (`op`) over the ranks of `group`. f32/f64/i64, f16/bf16.
  virtual void allReduce(void *data, int64_t count, DType type, ReduceOp op, const CommGroup &group) = 0;
  /// `recv` (count * group size elements) gets every rank's `send` (count elements), in rank order.
  virtual void allGather(const void *send, void *recv, int64_t count, DType type, const CommGroup &group) = 0;
  /// Reduces `send` (count * group size elements) over the group with `op`; rank i of the group
  /// keeps block i in `recv`.
  virtual void reduceScatter(const void *send, void *recv, int64_t count, DType type, ReduceOp op,
                             const CommGroup &group) = 0;
  /// Block j of `send` (count elements; group size blocks) goes to the group's member j; block i of
  /// `recv` comes from member i. The buffers must not overlap.
  virtual void allToAll(const void *send, void *recv, int64_t count, DType type, const CommGroup &group) = 0;
  virtual void broadcast(void *data, int64_t bytes, int root) = 0;
  /// Every member of `group` gets, in `data` (count elements), what member `root` (its position
  /// in the group) has there. Counted as "broadcast_from": the bytes this rank passes on.
  virtual void broadcastFrom(void *data, int64_t count, DType type, int root, const CommGroup &group) = 0;
  /// Member `root` of `group` gets every member's `send` reduced with `op` in `recv`; the other
  /// members' `recv` is left as it is. Counted as "reduce_to": the bytes this rank passes on.
  virtual void reduceTo(const void *send, void *recv, int64_t count, DType type, ReduceOp op, int root,
                        const CommGroup &group) = 0;

  void allReduce(void *data, int64_t count, DType type, ReduceOp op, const std::vector<int> &members) {
    allReduce(data, count, type, op, group(members, "all_reduce"));
  }
  void allReduceSum(void *data, int64_t count, DType type, const std::vector<int> &members) {
    allReduce(data, count, type, ReduceOp::Sum, group(members, "all_reduce"));
  }
  void allGather(const void *send, void *recv, int64_t count, DType type, const std::vector<int> &members) {
    allGather(send, recv, count, type, group(members, "all_gather"));
  }
  void reduceScatter(const void *send, void *recv, int64_t count, DType type, ReduceOp op,
                     const std::vector<int> &members) {
    reduceScatter(send, recv, count, type, op, group(members, "reduce_scatter"));
  }
  void allToAll(const void *send, void *recv, int64_t count, DType type, const std::vector<int> &members) {
    allToAll(send, recv, count, type, group(members, "all_to_all"));
  }
  void broadcastFrom(void *data, int64_t count, DType type, int root, const std::vector<int> &members) {
    broadcastFrom(data, count, type, root, group(members, "broadcast_from"));
  }
  void reduceTo(const void *send, void *recv, int64_t count, DType type, ReduceOp op, int root,
                const std::vector<int> &members) {
    reduceTo(send, recv, count, type, op, root, group(members, "reduce_to"));
  }

  // Asynchronous forms: they return at once with a Work that completes the collective; the
  // buffers must stay untouched until then. Collectives (posted or not) complete in the order
  // they were called, on every communicator. The defaults run the call to its end and return a
  // completed Work, right for a communicator with nothing better to do.

  /// allReduce of a bucket: every buffer in place, as if they were one (one call, one count).
  virtual std::unique_ptr<Work> postAllReduce(const std::vector<BufferRange> &buffers, DType type,
                                              const CommGroup &group, const AllReduceOptions &options);
  virtual std::unique_ptr<Work> postAllGather(const void *send, void *recv, int64_t count, DType type,
                                              const CommGroup &group, const AllGatherOptions &options);
  virtual std::unique_ptr<Work> postReduceScatter(const void *send, void *recv, int64_t count, DType type,
                                                  const CommGroup &group, const ReduceScatterOptions &options);
  virtual void barrier() = 0;

  /// Point-to-point (pipeline stages): a transfer of `bytes` to or from world rank `peer` on
  /// `channel` (a message matches the receive of the same peer pair and channel). Posting does
  /// not wait; wait() completes the transfer (a receive's data is then in place, a send's buffer
  /// free again). Receives may be posted before the matching send. Sends count as "send" (their
  /// bytes), receives as "recv" (no bytes: the peer sent them).
  using Transfer = int64_t;
  virtual Transfer postSend(const void *data, int64_t bytes, int peer, int64_t channel) = 0;
  virtual Transfer postRecv(void *data, int64_t bytes, int peer, int64_t channel) = 0;
  virtual void wait(Transfer transfer) = 0;
  /// The largest tag (channel) a transfer may use (MPI_TAG_UB; MPI promises at least 32767).
  virtual int64_t maxTag() const { return INT32_MAX; }
  /// Completes `transfer` if it has finished (true; the handle is then spent), without waiting.
  virtual bool test(Transfer transfer) = 0;
  void send(const void *data, int64_t bytes, int peer, int64_t channel) { wait(postSend(data, bytes, peer, channel)); }
  void recv(void *data, int64_t bytes, int peer, int64_t channel) { wait(postRecv(data, bytes, peer, channel)); }
  /// A send that never waits for the receiver: `data` is copied and the copy sent; the copies
  /// are released by completeSends (the end of a step). This is what makes a pipeline schedule's
  /// sends safe in any order (ScheduleCheck.h proves the rest). The base copies host memory; a
  /// communicator of device memory overrides the three (NCCL copies on the device).
  virtual void sendBuffered(const void *data, int64_t bytes, int peer, int64_t channel);
  /// Waits for every buffered send and frees the copies.
  virtual void completeSends();
  /// Frees the copies of the buffered sends that have finished (never waits).
  virtual void reapSends();
  /// Bytes held by buffered sends not yet completed.
  virtual int64_t bufferedSendBytes() const { return bufferedBytes_; }

  /// Creates, at once, the group communicators of every collective along any of `axisSets` (each a
  /// set of axes of the mesh `meshShape` named `meshAxes`). Collective over the whole world: every
  /// rank calls it with the same lists (all the axis sets of the plan's collective steps, of every
  /// rank's programs), before the first collective on those groups. MPI creates groups lazily and
  /// needs nothing; NCCL splits the world communicator here (see NcclCommunicator.h).
  virtual void prepareGroups(const std::vector<std::vector<std::string>> &axisSets,
                             const std::vector<int64_t> &meshShape, const std::vector<std::string> &meshAxes) {}
  /// Connects this rank with the world ranks it will exchange point-to-point transfers with (both
  /// directions; the plan's send and receive peers, so that the lists are symmetric). Every rank
  /// with peers calls it before its first transfer (at load, with prepareGroups). Without it,
  /// NCCL connects a pair on its first transfer and the host waits there until the peer posts its
  /// own first transfer with this rank, which a receive posted before a send can turn into a
  /// deadlock. MPI needs nothing.
  virtual void preparePeers(const std::vector<int> &peers) {}

  /// Host memory of `bytes` that the ranks on this node can reach directly, for the arena of a
  /// CPU plan: collectives whose buffers lie in it read and write the peers' buffers in place
  /// (MPI: see MpiShared.h). Collective over the world; null where the communicator has none, or
  /// when any rank could not make its own (then every rank gets null). The communicator owns it.
  virtual void *allocateSharedHost(int64_t bytes) { return nullptr; }

  /// Counters since the last reset, by kind ("all_reduce", "all_gather", "reduce_scatter", ...).
  const std::map<std::string, CollectiveCount> &counts() const { return counts_; }
  void resetCounts() { counts_.clear(); }

protected:
  /// Makes what this communicator needs for a new group (called once per group, by group()).
  virtual void createGroup(const CommGroup &group) {}
  void count(const std::string &kind, int64_t bytes) {
    counts_[kind].calls += 1;
    counts_[kind].bytes += bytes;
  }

private:
  std::map<std::string, CollectiveCount> counts_;
  std::map<std::vector<int>, std::unique_ptr<CommGroup>> groups_;
  std::vector<std::pair<Transfer, std::vector<uint8_t>>> buffered_;
  int64_t bufferedBytes_ = 0;
};

/// A Work that has nothing left to do.
std::unique_ptr<Work> completedWork();

/// Whether collective `kind` combines values (all_reduce, reduce_scatter, reduce_to: sums,
/// maxima), so needs an element type it can add; the others (all_gather, all_to_all,
/// broadcast_from) only move bytes and take any element type (the masks a layout may move).
bool combinesValues(std::string_view kind);


/// `inner` with each call counted (counts()) after it returns, by the traffic formulas: the
/// MPI, NCCL and single-rank communicators count nothing themselves, their factories wrap them.
std::unique_ptr<Communicator> countingCommunicator(std::unique_ptr<Communicator> inner);

/// A communicator over a single rank (collectives are identities); used without MPI.
std::unique_ptr<Communicator> makeSingleRankCommunicator();

/// The MPI communicator of this process (MPI_Init on first use). Throws RuntimeError when the
/// process was not started by mpirun.
std::unique_ptr<Communicator> makeMpiCommunicator();

class Device;
/// Collectives between GPUs over NCCL, on `device` (a CUDA device: buffers are device memory;
/// host buffers go through `world`), with the ranks of `world` (the MPI communicator, which also
/// carries NCCL's bootstrap; it must outlive the result). Collective over the world: every rank
/// calls it. Throws RuntimeError when cpc was built without CUDA or NCCL fails to start.
std::unique_ptr<Communicator> makeNcclCommunicator(Device &device, Communicator &world);

/// Whether this process runs under mpirun (OpenMPI sets OMPI_COMM_WORLD_SIZE).
bool launchedByMpi();

/// Ends every process of the MPI job with `code` (MPI_Abort); a plain exit without MPI.
[[noreturn]] void abortMpiJob(int code);

/// The counters for a progress line: "comm 4 calls 1.2 MB" ("comm 0 calls" when none).
std::string formatCommCounts(const Communicator &comm);
/// The counters for --metrics: {"comm_calls": N, "comm_bytes": N, "comm": {kind: {"calls", "bytes"}}}.
nlohmann::json commCountsJson(const Communicator &comm);

} // namespace cpc

#endif
