//===- NcclCommunicator.h - collectives between GPUs over NCCL -------------===//
//
// The Communicator of a GPU plan: the same calls, counters and error words as the MPI one, on
// device memory (a call whose buffers are host memory goes to the MPI world communicator
// instead, so the runtime's own host-side exchanges keep working). Compiled only with CUDA;
// made through makeNcclCommunicator (runtime/Communicator.h).
//
// Streams. A collective does not block the host: the device's comm stream waits for the compute
// stream's work queued so far, runs the NCCL call, and the compute stream waits for it, so every
// later kernel sees the result while the host runs ahead queueing them. Point-to-point transfers
// run on one stream and communicator per lane (direction and sender's parity, nccl::directionOf):
// a send waiting for its receiver never holds up a receive from a neighbour, nor a collective. wait() makes the compute
// stream wait; test() asks the event. Calls with no elements do nothing (they are counted).
// A world of one rank sends to itself by device copies, as the single-rank communicator does.
//
// Groups. Rank 0 makes the world's NCCL id and broadcasts it over MPI. A group's communicator
// is made in one of two ways, both cached per group list:
// - prepareGroups (safe, preferred): ncclCommSplit of the world communicator for every group along
//   each axis set of the plan. Collective over the whole world: every rank must call it with the
//   same lists, before the first collective on those groups (the executor does so at load).
// - lazily, on a group's first collective: the member at position 0 makes an NCCL id, sends it to
//   the members over MPI (broadcastFrom over the group), and they call ncclCommInitRank. Only the
//   members take part, so it is as safe as the MPI communicator's lazy groups: the members of a
//   group reach their first collective on it in the same order relative to other groups they share.
// A group member's rank in its communicator is its position in the list (the split key).
//
// Point-to-point. NCCL connects two ranks on their first transfer, and the host waits there for
// the peer: preparePeers connects the plan's pairs up front (one one-byte message each way; the
// peer lists must be symmetric).
// NCCL has no tags: a receive takes the next message the peer sent on that direction's
// communicator. Each message carries a header (channel, bytes) that the receiver
// checks when it completes; a plan whose two sides post a pair's messages in different orders
// ends the job with a line that says so, instead of training on swapped tensors.
//
// Errors and hangs. Failed calls throw RuntimeError "rank R: <kind> over ranks {..}: ...". A
// watchdog thread polls ncclCommGetAsyncError on every communicator and the events of every
// queued operation: on an asynchronous error, or an operation that started and has not finished
// within CPC_NCCL_TIMEOUT_S seconds (30 by default, 0: never; communicator creation gets ten
// times as long), it prints one line "cpc-run: rank R: NCCL <what> (group G)", aborts every
// communicator and ends the job (abortMpiJob(1)). A rank that does long host work (saving a
// checkpoint) while the others wait in a collective needs a larger timeout.
//
// Max: NCCL's max on floats drops NaNs (fmaxf); the MPI communicator and torch.max keep them. A
// float max reduces order-preserving integer keys instead (kernels/cuda/CollectiveMath.h), so a
// NaN on any rank is the result on every rank.
//
#ifndef CPC_RUNTIME_CUDA_NCCLCOMMUNICATOR_H
#define CPC_RUNTIME_CUDA_NCCLCOMMUNICATOR_H

#include "runtime/Communicator.h"
#include "runtime/NcclGroups.h"
#include "runtime/cuda/CudaDevice.h"

#include <nccl.h>

#include <atomic>
#include <condition_variable>
#include <functional>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace cpc {

class NcclCommunicator final : public Communicator {
public:
  /// Collective over `world`. `device` and `world` must outlive the communicator.
  NcclCommunicator(CudaDevice &device, Communicator &world);
  ~NcclCommunicator() override;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  int64_t maxTag() const override { return world_.maxTag(); }

  void allReduce(void *data, int64_t count, DType type, ReduceOp op, const CommGroup &group) override;
  void allGather(const void *send, void *recv, int64_t count, DType type, const CommGroup &group) override;
  /// Max (rare: no plan emits it today) runs as a max all-reduce of a copy, then the block.
  void reduceScatter(const void *send, void *recv, int64_t count, DType type, ReduceOp op,
                     const CommGroup &group) override;
  void allToAll(const void *send, void *recv, int64_t count, DType type, const CommGroup &group) override;
  void broadcast(void *data, int64_t bytes, int root) override;
  void broadcastFrom(void *data, int64_t count, DType type, int root, const CommGroup &group) override;
  void reduceTo(const void *send, void *recv, int64_t count, DType type, ReduceOp op, int root,
                const CommGroup &group) override;
  // The posted forms queue the NCCL call on the comm stream after the compute stream's work so
  // far and return; the Work's wait() makes the compute stream wait for it (the blocking forms
  // wait at once), so kernels that do not touch its buffers run meanwhile. A bucket's members
  // go out as one NCCL group.
  std::unique_ptr<Work> postAllReduce(const std::vector<BufferRange> &buffers, DType type,
                                      const CommGroup &group, const AllReduceOptions &options) override;
  std::unique_ptr<Work> postAllGather(const void *send, void *recv, int64_t count, DType type,
                                      const CommGroup &group, const AllGatherOptions &options) override;
  std::unique_ptr<Work> postReduceScatter(const void *send, void *recv, int64_t count, DType type,
                                          const CommGroup &group, const ReduceScatterOptions &options) override;
  /// A one-element all-reduce, then the host waits for it.
  void barrier() override;

  Transfer postSend(const void *data, int64_t bytes, int peer, int64_t channel) override;
  Transfer postRecv(void *data, int64_t bytes, int peer, int64_t channel) override;
  void wait(Transfer transfer) override;
  bool test(Transfer transfer) override;
  /// Copies `data` into a device staging buffer (on the compute stream) and sends the copy.
  void sendBuffered(const void *data, int64_t bytes, int peer, int64_t channel) override;
  /// The compute stream waits for every buffered send; their staging buffers are reused after.
  void completeSends() override;
  void reapSends() override;
  int64_t bufferedSendBytes() const override;

  void prepareGroups(const std::vector<std::vector<std::string>> &axisSets, const std::vector<int64_t> &meshShape,
                     const std::vector<std::string> &meshAxes) override;
  void preparePeers(const std::vector<int> &peers) override;

private:
  class NcclWork;
  struct GroupComm {
    ncclComm_t comm = nullptr;
    int position = 0, size = 1;
    std::string text; // describeGroup
  };
  /// One queued NCCL operation (events on its stream) or host-side phase (no events) the
  /// watchdog looks after; receives also check their header when they finish.
  struct Tracked {
    nccl::TrackedOp op;
    cudaEvent_t start = nullptr, end = nullptr;
    bool hostDone = false, settled = false, failed = false;
    int slot = -1;     // header slot (point-to-point)
    bool isRecv = false;
    int peer = -1;
    nccl::MessageHeader expected;
    ~Tracked();
  };
  /// Keeps a host-side phase (communicator creation, an NCCL call that may wait for its peers to
  /// connect) under the watchdog while it lasts.
  class Phase {
  public:
    Phase(NcclCommunicator &owner, const std::string &kind, const std::string &group, double timeout);
    ~Phase();

  private:
    NcclCommunicator &owner_;
    std::shared_ptr<Tracked> tracked_;
  };
  struct TransferRecord {
    enum class Path { Nccl, World, Self } path = Path::Nccl;
    Transfer worldHandle = -1;
    std::shared_ptr<Tracked> tracked;
    // Self (a world of one rank): the data moves by device copies on the compute stream.
    bool isSend = false, done = false;
    void *target = nullptr;
    int64_t bytes = 0, channel = 0;
  };
  struct SelfMessage {
    int64_t channel;
    void *staging;
    int64_t bytes;
  };
  struct Buffered {
    Transfer transfer;
    void *staging;
    int64_t bytes;
  };

  const GroupComm &groupComm(const char *kind, const std::vector<int> &group);
  const GroupComm &createLazily(const std::vector<int> &group, int position);
  void watchComm(ncclComm_t comm, const std::string &text);
  /// Queues `call` on `stream` after the compute stream's work; the compute stream waits for it
  /// when `computeWaits`. Returns the tracked operation.
  std::shared_ptr<Tracked> launch(const std::string &kind, const std::string &group, cudaStream_t stream,
                                  ncclComm_t comm, const std::string &where,
                                  const std::function<ncclResult_t()> &call, bool computeWaits,
                                  const std::function<void(Tracked &)> &prepare = nullptr);
  void checkNccl(ncclResult_t rc, const std::string &where, ncclComm_t comm) const;
  /// The Work of a queued operation.
  std::unique_ptr<Work> queued(std::shared_ptr<Tracked> tracked);
  /// The float max all-reduce on `comm` that keeps NaN: the values to keys, NCCL's integer max,
  /// back (queued on the comm stream; 16-bit floats' int32 keys in maxKeys_).
  ncclResult_t maxKeepingNaN(void *data, int64_t count, DType type, ncclComm_t comm);
  /// Max of every member's `send` (total elements) through a copy on the comm stream (NaN kept
  /// for floats); `count` elements from `offset` of the result go to `recv` when `keep`.
  ncclResult_t maxThroughCopy(const void *send, void *recv, int64_t total, int64_t offset, int64_t count, DType type,
                              ncclComm_t comm, bool keep);
  /// Whether a call's buffers are device memory (NCCL) or host memory (the MPI world); throws
  /// when they are mixed.
  bool onDevice(const std::string &where, const std::vector<const void *> &buffers) const;
  void checkTransfer(const char *kind, int64_t bytes, int peer, int64_t channel) const;
  Transfer postTransfer(bool send, void *data, int64_t bytes, int peer, int64_t channel);
  Transfer postSelf(bool send, void *data, int64_t bytes, int64_t channel);
  void *takeStaging(int64_t bytes);
  void releaseStaging(void *ptr, int64_t bytes);
  int takeSlot();
  void releaseSlot(int slot);
  /// Waits for the queued work, stops the watchdog, destroys the communicators, frees memory.
  void shutdown();

  // Watchdog side (the mutex held).
  void watch();
  void sweepLocked(double now, bool enforce);
  void settleLocked(Tracked &t);
  [[noreturn]] void fatalLocked(const std::string &what, const std::string &group);
  void track(const std::shared_ptr<Tracked> &t);

  CudaDevice &device_;
  Communicator &world_;
  int rank_ = 0, size_ = 1, ordinal_ = 0;
  double timeout_ = nccl::kDefaultTimeoutSeconds;
  cudaStream_t compute_ = nullptr, comm_ = nullptr;
  cudaStream_t p2pStreams_[nccl::kPointToPointLanes] = {};
  cudaEvent_t ready_ = nullptr; // the compute stream's point another stream waits for
  ncclComm_t worldComm_ = nullptr;
  ncclComm_t p2pComms_[nccl::kPointToPointLanes] = {};
  GroupComm worldGroup_;
  std::map<std::vector<int>, GroupComm> groups_;
  void *barrierValue_ = nullptr;
  void *maxKeys_ = nullptr; // grow-only, on the comm stream
  size_t maxKeysBytes_ = 0;
  void *connectBytes_ = nullptr;  // what preparePeers' one-byte messages travel through
  std::vector<bool> connected_;   // peers preparePeers connected

  std::map<Transfer, TransferRecord> transfers_;
  Transfer nextTransfer_ = 0;
  std::vector<SelfMessage> selfQueue_;
  std::vector<Buffered> buffered_;
  int64_t bufferedBytes_ = 0;
  std::multimap<int64_t, void *> spareStaging_;
  static constexpr int kHeaderSlots = 4096;
  nccl::MessageHeader *deviceHeaders_ = nullptr, *hostHeaders_ = nullptr;

  // Shared with the watchdog thread.
  std::mutex mutex_;
  std::condition_variable wake_;
  bool stopping_ = false;
  std::atomic<bool> failing_{false};
  std::vector<std::pair<ncclComm_t, std::string>> watched_; // creation order
  std::list<std::shared_ptr<Tracked>> tracked_;
  std::vector<int> freeSlots_;
  std::thread watchdog_;
};

} // namespace cpc

#endif
