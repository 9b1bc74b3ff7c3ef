//===- MpiCommunicator.cpp - collectives between processes over MPI -------===//
//
// Group communicators are made with MPI_Comm_create_group, which is collective over the group's
// members only: a rank builds a group's communicator when it first asks for the group
// (Communicator::group, just before its first collective on it), and the ranks outside that
// group need not take part. The requirement on callers is the usual
// MPI one: the members of a group call collectives on it in the same order (and, for groups that
// overlap, every rank creates them in the same relative order, which a plan's fixed schedule
// gives). Communicators are cached per distinct `group` list; a rank's position in the list is its
// rank in the group (the block it gets in allGather / reduceScatter).
//
#include "kernels/Float16.h"
#include "runtime/Communicator.h"
#include "runtime/MpiSchedule.h"
#include "runtime/MpiShared.h"
#include "runtime/Plan.h"

#include <mpi.h>

#include <algorithm>
#include <climits>
#include <cstring>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <iostream>
#include <map>

namespace cpc {
namespace {

std::string mpiErrorString(int rc) {
  char buf[MPI_MAX_ERROR_STRING];
  int len = 0;
  if (MPI_Error_string(rc, buf, &len) != MPI_SUCCESS)
    return "MPI error " + std::to_string(rc);
  return std::string(buf, len);
}

/// MPI_Init_thread on first use, MPI_Finalize when the process exits (a function-local static, so
/// it is destroyed after main returns; an aborted job never gets here, which MPI allows).
struct MpiSession {
  bool owner = false;
  MpiSession() {
    int initialized = 0;
    MPI_Initialized(&initialized);
    if (!initialized) {
      int provided = 0;
      // Only the main thread calls MPI; kernel threads never do.
      if (MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided) != MPI_SUCCESS)
        throw RuntimeError("MPI_Init_thread failed");
      owner = true;
    }
    // Errors come back as return codes, which become RuntimeErrors, instead of aborting the job.
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  }
  ~MpiSession() {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (owner && !finalized)
      MPI_Finalize();
  }
};

void ensureMpi() { static MpiSession session; }

bool mpiActive() {
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  return initialized && !finalized;
}

MPI_Datatype mpiType(DType type) {
  switch (type) {
  case DType::F32: return MPI_FLOAT;
  case DType::F64: return MPI_DOUBLE;
  case DType::I64: return MPI_INT64_T;
  case DType::F16: case DType::BF16: return MPI_UINT16_T; // bits on the wire; combine() does the arithmetic
  default: return MPI_DATATYPE_NULL;
  }
}

class MpiCommunicator final : public Communicator {
public:
  MpiCommunicator() {
    ensureMpi();
    // A private copy of the world, so that our collectives never match anyone else's messages.
    check(MPI_Comm_dup(MPI_COMM_WORLD, &world_), "init", {});
    MPI_Comm_set_errhandler(world_, MPI_ERRORS_RETURN);
    MPI_Comm_rank(world_, &rank_);
    MPI_Comm_size(world_, &size_);
    // Point-to-point messages on their own copy: their tags (channels) never meet the rings'.
    check(MPI_Comm_dup(MPI_COMM_WORLD, &p2p_), "init", {});
    MPI_Comm_set_errhandler(p2p_, MPI_ERRORS_RETURN);
    int *tagUpperBound = nullptr, found = 0;
    MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &tagUpperBound, &found);
    if (found && tagUpperBound)
      maxChannel_ = *tagUpperBound;
    worldGroup_ = Group{world_, rank_, size_, nullptr};
    if (sharedMemoryWanted()) // collective over the world, as the duplicates above
      worldGroup_.shared = mpi::SharedSegment::create(world_, rank_, size_);
  }
  ~MpiCommunicator() override {
    if (!mpiActive())
      return;
    queue_.clear();
    for (auto &[group, g] : groups_)
      MPI_Comm_free(&g.comm);
    MPI_Comm_free(&p2p_);
    MPI_Comm_free(&world_);
  }

  Transfer postSend(const void *data, int64_t bytes, int peer, int64_t channel) override {
    Transfer t = post("send", const_cast<void *>(data), bytes, peer, channel);
    return t;
  }

  Transfer postRecv(void *data, int64_t bytes, int peer, int64_t channel) override {
    Transfer t = post("recv", data, bytes, peer, channel);
    return t;
  }

  void wait(Transfer transfer) override {
    auto it = transfers_.find(transfer);
    if (it == transfers_.end())
      throw RuntimeError("rank " + std::to_string(rank_) + ": wait on an unknown transfer");
    std::vector<MPI_Request> requests = std::move(it->second);
    transfers_.erase(it);
    check(MPI_Waitall((int)requests.size(), requests.data(), MPI_STATUSES_IGNORE), "point-to-point", {});
  }

  bool test(Transfer transfer) override {
    auto it = transfers_.find(transfer);
    if (it == transfers_.end())
      throw RuntimeError("rank " + std::to_string(rank_) + ": test of an unknown transfer");
    int finished = 0;
    check(MPI_Testall((int)it->second.size(), it->second.data(), &finished, MPI_STATUSES_IGNORE), "point-to-point",
          {});
    if (finished)
      transfers_.erase(it);
    return finished;
  }

  int64_t maxTag() const override { return maxChannel_; }
  int rank() const override { return rank_; }
  int size() const override { return size_; }

  // The collectives are rings of point-to-point messages rather than MPI's own collectives, so
  // that the memory they need beyond their buffers is fixed and known to the compiler: chunks of
  // at most kCollectiveChunkBytes through two scratch buffers (MPI's all-reduce and reduce-scatter
  // allocate temporaries as large as the message). Each rank sends (n-1)/n of the buffer per phase.
  // The all-reduce, all-gather and reduce-scatter are schedules of such steps (MpiSchedule.h), run
  // by progress() while the caller goes on; the synchronous calls post and wait.

  void allReduce(void *data, int64_t count, DType type, ReduceOp op, const CommGroup &commGroup) override {
    postAllReduce({{data, count}}, type, commGroup, {op})->wait();
  }
  void allGather(const void *send, void *recv, int64_t count, DType type, const CommGroup &commGroup) override {
    postAllGather(send, recv, count, type, commGroup, {})->wait();
  }
  void reduceScatter(const void *send, void *recv, int64_t count, DType type, ReduceOp op,
                     const CommGroup &commGroup) override {
    postReduceScatter(send, recv, count, type, commGroup, {op})->wait();
  }

  std::unique_ptr<Work> postAllReduce(const std::vector<BufferRange> &buffers, DType type,
                                      const CommGroup &commGroup, const AllReduceOptions &options) override {
    const std::vector<int> &group = commGroup.members();
    int64_t count = 0;
    for (const BufferRange &b : buffers)
      count += b.count;
    const Group &g = groupOf("all_reduce", count, type, group);
    if (g.shared) { // members on one node: through their shared memory
      std::vector<int> members = group;
      if (members.empty())
        for (int r = 0; r < size_; ++r)
          members.push_back(r);
      auto [arena, layout] = arenaLayout(buffers, dtypeSize(type), members);
      return enqueue(std::make_shared<mpi::SharedAllReduce>(*g.shared, mpi::Bucket(buffers, dtypeSize(type)),
                                                            combiner(type, options.op), arena, layout,
                                                            std::move(members)));
    }
    auto schedule = newSchedule("all_reduce", g, group);
    mpi::ringAllReduce(*schedule, mpi::Bucket(buffers, dtypeSize(type)), g.rank, g.size, scratch(),
                       combiner(type, options.op));
    return enqueue(std::move(schedule));
  }

  std::unique_ptr<Work> postAllGather(const void *send, void *recv, int64_t count, DType type,
                                      const CommGroup &commGroup, const AllGatherOptions &) override {
    const std::vector<int> &group = commGroup.members();
    const Group &g = groupOf("all_gather", count, type, group);
    auto schedule = newSchedule("all_gather", g, group);
    mpi::ringAllGather(*schedule, send, recv, count * dtypeSize(type), g.rank, g.size);
    return enqueue(std::move(schedule));
  }

  std::unique_ptr<Work> postReduceScatter(const void *send, void *recv, int64_t count, DType type,
                                          const CommGroup &commGroup,
                                          const ReduceScatterOptions &options) override {
    const std::vector<int> &group = commGroup.members();
    const Group &g = groupOf("reduce_scatter", count, type, group);
    if (g.shared) // members on one node: through their shared memory, in the all-reduce's order
      return enqueue(std::make_shared<mpi::SharedReduceScatter>(*g.shared, send, recv, count, dtypeSize(type),
                                                                combiner(type, options.op)));
    auto schedule = newSchedule("reduce_scatter", g, group);
    mpi::ringReduceScatter(*schedule, send, recv, count, dtypeSize(type), g.rank, g.size, scratch(),
                           combiner(type, options.op));
    return enqueue(std::move(schedule));
  }

  // The other collectives block: the posted ones go first (every collective completes in order).

  void allToAll(const void *send, void *recv, int64_t count, DType type, const CommGroup &commGroup) override {
    const std::vector<int> &group = commGroup.members();
    drain();
    const Group &g = groupOf("all_to_all", count, type, group);
    const int64_t es = dtypeSize(type), n = g.size, blockBytes = count * es;
    const char *in = static_cast<const char *>(send);
    char *out = static_cast<char *>(recv);
    if (in == out && n > 1)
      throw RuntimeError(where("all_to_all", group) + ": send and receive buffers must differ");
    std::memcpy(out + g.rank * blockBytes, in + g.rank * blockBytes, blockBytes);
    // Step k: block (rank + k) goes k ranks ahead while block (rank - k) comes from k behind, in
    // pieces of bounded size; bytes on the wire, whatever the element type.
    for (int64_t k = 1; k < n; ++k) {
      int to = (g.rank + k) % n, from = (g.rank - k + n) % n;
      for (int64_t done = 0; done < blockBytes; done += kCollectiveChunkBytes) {
        int piece = (int)std::min<int64_t>(kCollectiveChunkBytes, blockBytes - done);
        check(MPI_Sendrecv(in + to * blockBytes + done, piece, MPI_BYTE, to, kRingTag, out + from * blockBytes + done,
                           piece, MPI_BYTE, from, kRingTag, g.comm, MPI_STATUS_IGNORE),
              "all_to_all", group);
      }
    }
  }

  // Rooted collectives are chains: the value (or the running sum) passes from member to member
  // in pieces of at most kCollectiveChunkBytes, so that each rank sends the buffer at most once
  // and needs no temporary beyond the two scratch chunks.

  void broadcastFrom(void *data, int64_t count, DType type, int root, const CommGroup &commGroup) override {
    const std::vector<int> &group = commGroup.members();
    drain();
    const Group &g = groupOf("broadcast_from", count, type, group);
    checkRoot("broadcast_from", root, g, group);
    const int64_t n = g.size, total = count * dtypeSize(type);
    const int64_t position = (g.rank - root + n) % n; // in the chain that starts at the root
    char *bytes = static_cast<char *>(data);
    for (int64_t done = 0; done < total && n > 1; done += kCollectiveChunkBytes) { // bytes, any element type
      int piece = (int)std::min<int64_t>(kCollectiveChunkBytes, total - done);
      if (position > 0)
        check(MPI_Recv(bytes + done, piece, MPI_BYTE, (g.rank - 1 + n) % n, kRingTag, g.comm, MPI_STATUS_IGNORE),
              "broadcast_from", group);
      if (position + 1 < n)
        check(MPI_Send(bytes + done, piece, MPI_BYTE, (g.rank + 1) % n, kRingTag, g.comm), "broadcast_from", group);
    }
  }

  void reduceTo(const void *send, void *recv, int64_t count, DType type, ReduceOp op, int root,
                const CommGroup &commGroup) override {
    const std::vector<int> &group = commGroup.members();
    drain();
    const Group &g = groupOf("reduce_to", count, type, group);
    checkRoot("reduce_to", root, g, group);
    const int64_t es = dtypeSize(type), n = g.size, step = kCollectiveChunkBytes / es;
    // The chain starts after the root and ends at it: position n - 1 is the root.
    const int64_t position = (g.rank - root - 1 + 2 * n) % n;
    const char *mine = static_cast<const char *>(send);
    char *out = static_cast<char *>(recv);
    if (n == 1 && send != recv)
      std::memcpy(recv, send, count * es);
    char *sum = scratch(), *incoming = scratch() + kCollectiveChunkBytes;
    for (int64_t done = 0; done < count && n > 1; done += step) {
      int piece = (int)std::min(step, count - done);
      const char *partial = mine + done * es;
      if (position > 0) {
        check(MPI_Recv(incoming, piece, mpiType(type), (g.rank - 1 + n) % n, kRingTag, g.comm, MPI_STATUS_IGNORE),
              "reduce_to", group);
        char *target = position + 1 == n ? out + done * es : sum;
        combine(target, partial, incoming, piece, type, op);
        partial = target;
      }
      if (position + 1 < n)
        check(MPI_Send(partial, piece, mpiType(type), (g.rank + 1) % n, kRingTag, g.comm), "reduce_to", group);
    }
  }

  void broadcast(void *data, int64_t bytes, int root) override {
    drain();
    if (root < 0 || root >= size_ || bytes < 0)
      throw RuntimeError("rank " + std::to_string(rank_) + ": broadcast: invalid root " + std::to_string(root) +
                         " or size " + std::to_string(bytes) + " (world size " + std::to_string(size_) + ")");
    const int64_t chunk = INT_MAX / 2;
    for (int64_t done = 0; done < bytes; done += chunk)
      check(MPI_Bcast(static_cast<char *>(data) + done, (int)std::min(chunk, bytes - done), MPI_BYTE, root, world_),
            "broadcast", {});
  }

  void barrier() override {
    drain();
    check(MPI_Barrier(world_), "barrier", {});
  }

  void *allocateSharedHost(int64_t bytes) override {
    if (!sharedMemoryWanted() || size_ < 2)
      return nullptr;
    std::unique_ptr<mpi::SharedArena> arena = mpi::SharedArena::create(world_, rank_, size_, bytes);
    if (!arena)
      return nullptr;
    arenas_.push_back(std::move(arena));
    return arenas_.back()->mine();
  }

private:
  struct Group;

  /// Two chunk buffers, allocated on the first collective (what the plan's predicted peak counts).
  char *scratch() {
    if (scratch_.empty())
      scratch_.resize(2 * kCollectiveChunkBytes);
    return scratch_.data();
  }

  template <typename T> static void combineElements(T *dst, const T *a, const T *b, int64_t n, ReduceOp op) {
    if (op == ReduceOp::Max) {
      for (int64_t i = 0; i < n; ++i) // NaN wins, as torch.max: a NaN anywhere is not hidden
        dst[i] = a[i] != a[i] || a[i] > b[i] ? a[i] : b[i];
      return;
    }
    for (int64_t i = 0; i < n; ++i)
      dst[i] = a[i] + b[i];
  }
  /// 16-bit floats: each element is summed (or compared) in f32 and rounded once.
  static void combine16(uint16_t *dst, const uint16_t *a, const uint16_t *b, int64_t n, DType type, ReduceOp op) {
    if (op == ReduceOp::Sum)
      return add16(type, dst, a, b, n);
    for (int64_t i = 0; i < n; ++i) {
      float x = load16(type, a[i]), y = load16(type, b[i]);
      dst[i] = x != x || x > y ? a[i] : b[i];
    }
  }
  /// dst = op(a, b), element-wise.
  static void combine(void *dst, const void *a, const void *b, int64_t n, DType type, ReduceOp op) {
    switch (type) {
    case DType::F32: combineElements((float *)dst, (const float *)a, (const float *)b, n, op); break;
    case DType::F64: combineElements((double *)dst, (const double *)a, (const double *)b, n, op); break;
    case DType::I64: combineElements((int64_t *)dst, (const int64_t *)a, (const int64_t *)b, n, op); break;
    case DType::F16: case DType::BF16: combine16((uint16_t *)dst, (const uint16_t *)a, (const uint16_t *)b, n, type, op); break;
    default: throw RuntimeError(std::string("cannot ") + reduceOpName(op) + " " + dtypeName(type));
    }
  }
  static mpi::Combine combiner(DType type, ReduceOp op) {
    return [type, op](void *dst, const void *a, const void *b, int64_t n) { combine(dst, a, b, n, type, op); };
  }

  /// A posted collective: moving it on moves the queue on (collectives complete in order).
  class MpiWork final : public Work {
  public:
    MpiWork(MpiCommunicator &owner, std::shared_ptr<mpi::Pending> schedule)
        : owner_(owner), schedule_(std::move(schedule)) {}
    bool test() override {
      owner_.progress(nullptr);
      return schedule_->done();
    }
    void wait() override { owner_.progress(schedule_.get()); }

  private:
    MpiCommunicator &owner_;
    std::shared_ptr<mpi::Pending> schedule_;
  };

  std::shared_ptr<mpi::Schedule> newSchedule(const char *kind, const Group &g, const std::vector<int> &group) {
    return std::make_shared<mpi::Schedule>(where(kind, group), g.comm, kRingTag);
  }

  std::unique_ptr<Work> enqueue(std::shared_ptr<mpi::Pending> schedule) {
    queue_.push_back(schedule);
    progress(nullptr); // the first messages go out now, so the peers can match them early
    return std::make_unique<MpiWork>(*this, std::move(schedule));
  }

  /// Moves the queued collectives on, in order: without blocking (`until` null), or until
  /// `until` is done.
  void progress(const mpi::Pending *until) {
    while (!queue_.empty()) {
      if (until && until->done())
        return;
      bool block = until != nullptr;
      if (!queue_.front()->advance(block))
        return;
      queue_.pop_front();
    }
  }

  /// Completes every posted collective.
  void drain() {
    if (!queue_.empty())
      progress(queue_.back().get());
  }

  static constexpr int kRingTag = 7;
  std::vector<char> scratch_;

  struct Group {
    MPI_Comm comm = MPI_COMM_NULL;
    int rank = 0; // this process's rank in the group
    int size = 1;
    std::shared_ptr<mpi::SharedSegment> shared; // when the members share this node's memory
  };

  /// The shared arena holding every buffer of a bucket, and a fingerprint of where they lie in
  /// it (offsets and sizes, never 0); {null, 0} when some buffer is elsewhere or a member's region
  /// is not mapped here.
  std::pair<const mpi::SharedArena *, uint64_t> arenaLayout(const std::vector<BufferRange> &buffers, int64_t es,
                                                            const std::vector<int> &members) const {
    for (const auto &arena : arenas_) {
      uint64_t h = 1469598103934665603ull;
      bool inside = true;
      for (const BufferRange &b : buffers) {
        if (b.count == 0)
          continue;
        int64_t offset = arena->offsetOf(b.data, b.count * es);
        inside = inside && offset >= 0;
        for (uint64_t v : {uint64_t(offset), uint64_t(b.count * es)})
          h = (h ^ v) * 1099511628211ull;
      }
      for (int m : members)
        inside = inside && arena->at(m, 0, 1) != nullptr;
      if (inside)
        return {arena.get(), h | 1};
    }
    return {nullptr, 0};
  }

  /// The all-reduces of groups on one node go through shared memory unless
  /// CPC_MPI_SHARED_MEMORY=0 asks for the rings (to compare, or to measure them).
  static bool sharedMemoryWanted() {
    const char *v = std::getenv("CPC_MPI_SHARED_MEMORY");
    return !v || std::string(v) != "0";
  }

  std::string where(const char *kind, const std::vector<int> &group) const {
    std::string s = "rank " + std::to_string(rank_) + ": " + kind;
    if (!group.empty()) {
      s += " over ranks {";
      for (size_t i = 0; i < group.size(); ++i)
        s += (i ? "," : "") + std::to_string(group[i]);
      s += "}";
    }
    return s;
  }

  void check(int rc, const char *kind, const std::vector<int> &group) const {
    if (rc != MPI_SUCCESS)
      throw RuntimeError(where(kind, group) + ": " + mpiErrorString(rc));
  }

  void checkRoot(const char *kind, int root, const Group &g, const std::vector<int> &group) const {
    if (root < 0 || root >= g.size)
      throw RuntimeError(where(kind, group) + ": root " + std::to_string(root) + " outside a group of " +
                         std::to_string(g.size));
  }

  /// Validates a call and returns the group's communicator, creating it on first use.
  /// Validates a call and returns its group's communicator (made by createGroup).
  const Group &groupOf(const char *kind, int64_t count, DType type, const std::vector<int> &group) {
    if (combinesValues(kind) && mpiType(type) == MPI_DATATYPE_NULL)
      throw RuntimeError(where(kind, group) + ": unsupported element type " + dtypeName(type));
    if (count < 0)
      throw RuntimeError(where(kind, group) + ": negative count " + std::to_string(count));
    if (group.empty())
      return worldGroup_;
    auto it = groups_.find(group);
    if (it == groups_.end()) // Communicator::group made the CommGroup, and createGroup this
      throw RuntimeError(where(kind, group) + ": a group this communicator did not make");
    return it->second;
  }

  /// The members' communicator, made by all of them together (MPI_Comm_create_group is
  /// collective over the group only).
  void createGroup(const CommGroup &commGroup) override {
    const std::vector<int> &group = commGroup.members();
    if (group.empty())
      return; // the world's copy
    // Ranks of the same group pick the same tag, so that concurrent creations of different
    // groups cannot match each other.
    uint64_t h = 1469598103934665603ull;
    for (int r : group)
      h = (h ^ (uint64_t)r) * 1099511628211ull;
    MPI_Group worldGroup, sub;
    MPI_Comm_group(world_, &worldGroup);
    MPI_Group_incl(worldGroup, (int)group.size(), group.data(), &sub);
    MPI_Comm comm = MPI_COMM_NULL;
    int rc = MPI_Comm_create_group(world_, sub, (int)(h % 32768), &comm);
    MPI_Group_free(&sub);
    MPI_Group_free(&worldGroup);
    check(rc, "create", group);
    MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN);
    Group g{comm, commGroup.position(), commGroup.size(), nullptr};
    if (sharedMemoryWanted()) // collective over the members, as the creation above
      g.shared = mpi::SharedSegment::create(comm, g.rank, g.size);
    groups_[group] = std::move(g);
  }

  /// Posts a send (kind "send") or receive of `bytes` in chunks an int can count (MPI keeps the
  /// messages of one pair and tag in order); one request even for an empty message.
  Transfer post(const char *kind, void *data, int64_t bytes, int peer, int64_t channel) {
    checkTransfer(kind, bytes, peer, channel);
    bool sending = std::strcmp(kind, "send") == 0;
    char *p = static_cast<char *>(data);
    std::vector<MPI_Request> &requests = transfers_[nextTransfer_];
    int64_t done = 0;
    do {
      int n = (int)std::min<int64_t>(kMessageChunk, bytes - done);
      requests.emplace_back();
      int rc = sending ? MPI_Isend(p + done, n, MPI_BYTE, peer, (int)channel, p2p_, &requests.back())
                       : MPI_Irecv(p + done, n, MPI_BYTE, peer, (int)channel, p2p_, &requests.back());
      check(rc, kind, {peer});
      done += n;
    } while (done < bytes);
    return nextTransfer_++;
  }

  void checkTransfer(const char *kind, int64_t bytes, int peer, int64_t channel) const {
    if (peer < 0 || peer >= size_ || peer == rank_ || bytes < 0 || channel < 0 || channel > maxChannel_)
      throw RuntimeError("rank " + std::to_string(rank_) + ": " + kind + ": invalid peer " + std::to_string(peer) +
                         ", size " + std::to_string(bytes) + " or channel " + std::to_string(channel) +
                         " (world size " + std::to_string(size_) + ", channels up to " +
                         std::to_string(maxChannel_) + ")");
  }

  static constexpr int64_t kMessageChunk = INT_MAX / 2;
  MPI_Comm world_ = MPI_COMM_NULL, p2p_ = MPI_COMM_NULL;
  int64_t maxChannel_ = 32767; // MPI guarantees at least this tag
  std::map<Transfer, std::vector<MPI_Request>> transfers_;
  Transfer nextTransfer_ = 0;
  int rank_ = 0, size_ = 1;
  Group worldGroup_;
  std::map<std::vector<int>, Group> groups_;
  std::deque<std::shared_ptr<mpi::Pending>> queue_; // posted collectives, oldest first
  std::vector<std::unique_ptr<mpi::SharedArena>> arenas_; // the executors' arenas (allocateSharedHost)
};

} // namespace

std::unique_ptr<Communicator> makeMpiCommunicator() {
  if (!launchedByMpi())
    throw RuntimeError("this process was not started by mpirun (OMPI_COMM_WORLD_SIZE is not set)");
  return countingCommunicator(std::make_unique<MpiCommunicator>());
}

void abortMpiJob(int code) {
  std::cout.flush();
  std::cerr.flush();
  std::fflush(nullptr);
  if (mpiActive())
    MPI_Abort(MPI_COMM_WORLD, code);
  std::_Exit(code);
}

} // namespace cpc
