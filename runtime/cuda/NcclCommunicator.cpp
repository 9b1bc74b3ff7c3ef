//===- NcclCommunicator.cpp - collectives between GPUs over NCCL -----------===//
// Over 800 lines: every collective of the Communicator contract on NCCL, with the NaN-keeping max
// and the group cache; it shrinks with the group-object communicator (issue 30, item 4).
#include "runtime/cuda/NcclCommunicator.h"
#include "kernels/cuda/Collectives.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace cpc {
namespace {

double steadySeconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

ncclDataType_t ncclTypeOf(DType type) {
  switch (type) {
  case DType::F32: return ncclFloat32;
  case DType::F64: return ncclFloat64;
  case DType::F16: return ncclFloat16;
  case DType::BF16: return ncclBfloat16;
  case DType::I64: return ncclInt64;
  case DType::I32: return ncclInt32;
  default: return ncclInt8; // nccl::checkCall rejected it before
  }
}

enum class EventState { Pending, Done, Failed };
EventState eventState(cudaEvent_t event) {
  cudaError_t status = cudaEventQuery(event);
  if (status == cudaErrorNotReady)
    return EventState::Pending;
  // A failed query is a device fault; the main thread reports it on its next CUDA call.
  return status == cudaSuccess ? EventState::Done : EventState::Failed;
}

} // namespace

NcclCommunicator::Tracked::~Tracked() {
  if (start)
    cudaEventDestroy(start);
  if (end)
    cudaEventDestroy(end);
}

NcclCommunicator::Phase::Phase(NcclCommunicator &owner, const std::string &kind, const std::string &group,
                               double timeout)
    : owner_(owner), tracked_(std::make_shared<Tracked>()) {
  tracked_->op.kind = kind;
  tracked_->op.group = group;
  tracked_->op.timeout = timeout;
  owner_.track(tracked_);
}

NcclCommunicator::Phase::~Phase() {
  std::lock_guard<std::mutex> lock(owner_.mutex_);
  tracked_->hostDone = true;
}

NcclCommunicator::NcclCommunicator(CudaDevice &device, Communicator &world)
    : device_(device), world_(world), rank_(world.rank()), size_(world.size()), ordinal_(device.index()) {
  timeout_ = nccl::watchdogTimeout(std::getenv("CPC_NCCL_TIMEOUT_S"));
  checkCuda(cudaSetDevice(ordinal_), "cudaSetDevice");
  compute_ = device.stream();
  comm_ = device.commCudaStream();
  checkCuda(cudaEventCreateWithFlags(&ready_, cudaEventDisableTiming), "cudaEventCreate");
  watchdog_ = std::thread([this] { watch(); });
  try {
    ncclUniqueId id{};
    if (rank_ == 0)
      checkNccl(ncclGetUniqueId(&id), nccl::where(rank_, "init", {}), nullptr);
    world_.broadcast(&id, sizeof id, 0);
    {
      Phase phase(*this, "create", "world", nccl::operationTimeout("create", timeout_));
      checkNccl(ncclCommInitRank(&worldComm_, size_, id, rank_), nccl::where(rank_, "init", {}), nullptr);
    }
    watchComm(worldComm_, "world");
    worldGroup_ = GroupComm{worldComm_, rank_, size_, "world"};
    // One communicator (and stream) per direction of point-to-point messages; made here because
    // ncclCommSplit needs every rank, which only the constructor is sure to have.
    for (int direction = 0; size_ > 1 && direction < nccl::kPointToPointLanes; ++direction) {
      const std::string lane = std::string(direction < 2 ? "upwards" : "downwards") + " from " +
                               (direction % 2 ? "odd" : "even") + " ranks";
      const std::string nameText = "world, point-to-point " + lane;
      const char *name = nameText.c_str();
      {
        Phase phase(*this, "create", name, nccl::operationTimeout("create", timeout_));
        checkNccl(ncclCommSplit(worldComm_, 0, rank_, &p2pComms_[direction], nullptr), nccl::where(rank_, "init", {}),
                  worldComm_);
      }
      watchComm(p2pComms_[direction], name);
      checkCuda(cudaStreamCreateWithFlags(&p2pStreams_[direction], cudaStreamNonBlocking), "cudaStreamCreate");
    }
    barrierValue_ = device_.allocator(MemorySpace::Device).allocate(sizeof(float));
  } catch (...) {
    shutdown();
    throw;
  }
}

NcclCommunicator::~NcclCommunicator() { shutdown(); }

void NcclCommunicator::shutdown() {
  // The watchdog keeps running while queued work drains: a peer that never comes ends the job.
  for (cudaStream_t s : {compute_, comm_, p2pStreams_[0], p2pStreams_[1], p2pStreams_[2], p2pStreams_[3]})
    if (s)
      cudaStreamSynchronize(s);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  if (watchdog_.joinable())
    watchdog_.join();
  tracked_.clear();
  transfers_.clear();
  for (auto it = watched_.rbegin(); it != watched_.rend(); ++it)
    ncclCommDestroy(it->first);
  watched_.clear();
  groups_.clear();
  worldComm_ = nullptr;
  for (ncclComm_t &c : p2pComms_)
    c = nullptr;
  for (cudaStream_t &s : p2pStreams_)
    if (s) {
      cudaStreamDestroy(s);
      s = nullptr;
    }
  if (maxKeys_)
    cudaFree(maxKeys_);
  maxKeys_ = nullptr;
  maxKeysBytes_ = 0;
  Allocator &memory = device_.allocator(MemorySpace::Device);
  for (auto &[bytes, ptr] : spareStaging_)
    memory.deallocate(ptr);
  spareStaging_.clear();
  for (Buffered &b : buffered_)
    if (b.staging)
      memory.deallocate(b.staging);
  buffered_.clear();
  for (SelfMessage &m : selfQueue_)
    if (m.staging)
      memory.deallocate(m.staging);
  selfQueue_.clear();
  if (deviceHeaders_)
    memory.deallocate(deviceHeaders_);
  if (hostHeaders_)
    device_.allocator(MemorySpace::Host).deallocate(hostHeaders_);
  if (barrierValue_)
    memory.deallocate(barrierValue_);
  if (connectBytes_)
    memory.deallocate(connectBytes_);
  connectBytes_ = nullptr;
  deviceHeaders_ = hostHeaders_ = nullptr;
  barrierValue_ = nullptr;
  if (ready_)
    cudaEventDestroy(ready_);
  ready_ = nullptr;
}

// --- Groups --------------------------------------------------------------------------------------

void NcclCommunicator::watchComm(ncclComm_t comm, const std::string &text) {
  std::lock_guard<std::mutex> lock(mutex_);
  watched_.emplace_back(comm, text);
}

const NcclCommunicator::GroupComm &NcclCommunicator::groupComm(const char *kind, const std::vector<int> &group) {
  int position = nccl::memberPosition(kind, group, rank_, size_);
  std::vector<int> key = nccl::groupKey(group, size_);
  if (key.empty())
    return worldGroup_;
  auto it = groups_.find(key);
  if (it != groups_.end())
    return it->second;
  return createLazily(key, position);
}

const NcclCommunicator::GroupComm &NcclCommunicator::createLazily(const std::vector<int> &group, int position) {
  const std::string text = nccl::describeGroup(group), where = nccl::where(rank_, "create", group);
  ncclUniqueId id{};
  if (position == 0)
    checkNccl(ncclGetUniqueId(&id), where, nullptr);
  // The id travels over MPI among the members only (MPI makes the group's communicator lazily too).
  static_assert(sizeof(ncclUniqueId) % sizeof(int64_t) == 0, "the NCCL id travels as i64 words");
  std::vector<int64_t> words(sizeof id / sizeof(int64_t));
  std::memcpy(words.data(), &id, sizeof id);
  world_.broadcastFrom(words.data(), (int64_t)words.size(), DType::I64, 0, group);
  std::memcpy(&id, words.data(), sizeof id);
  ncclComm_t comm = nullptr;
  {
    Phase phase(*this, "create", text, nccl::operationTimeout("create", timeout_));
    checkNccl(ncclCommInitRank(&comm, (int)group.size(), id, position), where, nullptr);
  }
  watchComm(comm, text);
  return groups_[group] = GroupComm{comm, position, (int)group.size(), text};
}

void NcclCommunicator::prepareGroups(const std::vector<std::vector<std::string>> &axisSets,
                                     const std::vector<int64_t> &meshShape, const std::vector<std::string> &meshAxes) {
  for (const nccl::SplitCall &call : nccl::splitCalls(rank_, size_, meshShape, meshAxes, axisSets)) {
    // A group made lazily before was made by all its members: they all stay out of this split
    // (which every rank still calls, in the same order).
    bool made = groups_.count(call.group) > 0;
    const std::string text = nccl::describeGroup(call.group);
    ncclComm_t comm = nullptr;
    {
      Phase phase(*this, "create", text, nccl::operationTimeout("create", timeout_));
      checkNccl(ncclCommSplit(worldComm_, made ? NCCL_SPLIT_NOCOLOR : call.color, call.key, &comm, nullptr),
                nccl::where(rank_, "create", call.group), worldComm_);
    }
    if (made || !comm)
      continue;
    watchComm(comm, text);
    groups_[call.group] = GroupComm{comm, call.key, (int)call.group.size(), text};
  }
}

// --- Issuing -------------------------------------------------------------------------------------

void NcclCommunicator::checkNccl(ncclResult_t rc, const std::string &where, ncclComm_t comm) const {
  if (rc == ncclSuccess || rc == ncclInProgress)
    return;
  std::string detail = ncclGetLastError(comm) ? ncclGetLastError(comm) : "";
  throw RuntimeError(where + ": NCCL " + ncclGetErrorString(rc) + (detail.empty() ? "" : " (" + detail + ")"));
}

bool NcclCommunicator::onDevice(const std::string &where, const std::vector<const void *> &buffers) const {
  int device = 0, host = 0;
  for (const void *p : buffers) {
    cudaPointerAttributes attributes{};
    cudaError_t status = cudaPointerGetAttributes(&attributes, p);
    if (status != cudaSuccess)
      cudaGetLastError(); // not a pointer CUDA knows: host memory; kernels' launch checks must not see it
    bool isDevice = status == cudaSuccess &&
                    (attributes.type == cudaMemoryTypeDevice || attributes.type == cudaMemoryTypeManaged);
    ++(isDevice ? device : host);
  }
  if (device && host)
    throw RuntimeError(where + ": the buffers are partly device and partly host memory");
  return device > 0;
}

void NcclCommunicator::track(const std::shared_ptr<Tracked> &t) {
  std::lock_guard<std::mutex> lock(mutex_);
  tracked_.push_back(t);
}

std::shared_ptr<NcclCommunicator::Tracked>
NcclCommunicator::launch(const std::string &kind, const std::string &group, cudaStream_t stream, ncclComm_t comm,
                         const std::string &where, const std::function<ncclResult_t()> &call, bool computeWaits,
                         const std::function<void(Tracked &)> &prepare) {
  checkCuda(cudaEventRecord(ready_, compute_), "cudaEventRecord");
  checkCuda(cudaStreamWaitEvent(stream, ready_, 0), "cudaStreamWaitEvent");
  auto t = std::make_shared<Tracked>();
  t->op.kind = kind;
  t->op.group = group;
  t->op.timeout = nccl::operationTimeout(kind, timeout_);
  checkCuda(cudaEventCreateWithFlags(&t->start, cudaEventDisableTiming), "cudaEventCreate");
  checkCuda(cudaEventCreateWithFlags(&t->end, cudaEventDisableTiming), "cudaEventCreate");
  checkCuda(cudaEventRecord(t->start, stream), "cudaEventRecord");
  if (prepare)
    prepare(*t);
  {
    // The call itself may wait on the host for the peers (NCCL connects ranks on first use).
    Phase phase(*this, kind, group, t->op.timeout);
    checkNccl(call(), where, comm);
  }
  checkCuda(cudaEventRecord(t->end, stream), "cudaEventRecord");
  if (computeWaits)
    checkCuda(cudaStreamWaitEvent(compute_, t->end, 0), "cudaStreamWaitEvent");
  track(t);
  return t;
}

// --- Collectives ---------------------------------------------------------------------------------

/// A collective queued on the comm stream: complete once its end event has passed; waiting
/// makes the compute stream wait for it (the host never does).
class NcclCommunicator::NcclWork final : public Work {
public:
  NcclWork(cudaStream_t compute, std::shared_ptr<Tracked> tracked) : compute_(compute), tracked_(std::move(tracked)) {}
  bool test() override {
    cudaError_t status = cudaEventQuery(tracked_->end);
    if (status == cudaErrorNotReady)
      return false;
    checkCuda(status, "cudaEventQuery");
    return true;
  }
  void wait() override { checkCuda(cudaStreamWaitEvent(compute_, tracked_->end, 0), "cudaStreamWaitEvent"); }

private:
  cudaStream_t compute_;
  std::shared_ptr<Tracked> tracked_;
};

void NcclCommunicator::allReduce(void *data, int64_t count, DType type, ReduceOp op, const CommGroup &commGroup) {
  postAllReduce({{data, count}}, type, commGroup, {op})->wait();
}

void NcclCommunicator::allGather(const void *send, void *recv, int64_t count, DType type,
                                 const CommGroup &commGroup) {
  postAllGather(send, recv, count, type, commGroup, {})->wait();
}

void NcclCommunicator::reduceScatter(const void *send, void *recv, int64_t count, DType type, ReduceOp op,
                                     const CommGroup &commGroup) {
  postReduceScatter(send, recv, count, type, commGroup, {op})->wait();
}

std::unique_ptr<Work> NcclCommunicator::queued(std::shared_ptr<Tracked> tracked) {
  return tracked ? std::make_unique<NcclWork>(compute_, std::move(tracked)) : completedWork();
}

std::unique_ptr<Work> NcclCommunicator::postAllReduce(const std::vector<BufferRange> &buffers, DType type,
                                                      const CommGroup &commGroup,
                                                      const AllReduceOptions &options) {
  const std::vector<int> &group = commGroup.members();
  const char *kind = "all_reduce";
  const std::string where = nccl::where(rank_, kind, group);
  std::vector<BufferRange> members;
  for (const BufferRange &b : buffers) {
    nccl::checkCall(kind, type, b.count, rank_, group);
    if (b.count > 0)
      members.push_back(b);
  }
  if (members.empty()) {
    (void)groupComm(kind, group); // refuses a bad group, as a call with elements would
    return completedWork();
  }
  std::vector<const void *> pointers;
  for (const BufferRange &b : members)
    pointers.push_back(b.data);
  if (!onDevice(where, pointers))
    return world_.postAllReduce(members, type, world_.group(group, kind), options);
  const GroupComm &g = groupComm(kind, group);
  if (options.op == ReduceOp::Max && isFloatDType(type)) {
    std::shared_ptr<Tracked> last; // the comm stream runs them in order: the last one's end is all of theirs
    for (const BufferRange &b : members) // the keys' round trip is per buffer
      last = launch(kind, g.text, comm_, g.comm, where, [&] { return maxKeepingNaN(b.data, b.count, type, g.comm); },
                    false);
    return queued(last);
  }
  const ncclRedOp_t op = options.op == ReduceOp::Max ? ncclMax : ncclSum;
  return queued(launch(kind, g.text, comm_, g.comm, where, [&] {
    // One NCCL group: a bucket of members goes out as one operation.
    ncclResult_t rc = ncclGroupStart();
    for (size_t i = 0; i < members.size() && rc == ncclSuccess; ++i)
      rc = ncclAllReduce(members[i].data, members[i].data, members[i].count, ncclTypeOf(type), op, g.comm, comm_);
    ncclResult_t end = ncclGroupEnd();
    return rc != ncclSuccess ? rc : end;
  }, false));
}

std::unique_ptr<Work> NcclCommunicator::postAllGather(const void *send, void *recv, int64_t count, DType type,
                                                      const CommGroup &commGroup, const AllGatherOptions &options) {
  const std::vector<int> &group = commGroup.members();
  const char *kind = "all_gather";
  const std::string where = nccl::where(rank_, kind, group);
  nccl::checkCall(kind, type, count, rank_, group);
  if (count > 0 && !onDevice(where, {send, recv}))
    return world_.postAllGather(send, recv, count, type, world_.group(group, kind), options);
  const GroupComm &g = groupComm(kind, group);
  if (count == 0)
    return completedWork();
  return queued(launch(kind, g.text, comm_, g.comm, where,
                       [&] { return ncclAllGather(send, recv, count * dtypeSize(type), ncclUint8, g.comm, comm_); },
                       false)); // bytes, whatever the element type
}

std::unique_ptr<Work> NcclCommunicator::postReduceScatter(const void *send, void *recv, int64_t count, DType type,
                                                          const CommGroup &commGroup,
                                                          const ReduceScatterOptions &options) {
  const std::vector<int> &group = commGroup.members();
  const char *kind = "reduce_scatter";
  const std::string where = nccl::where(rank_, kind, group);
  nccl::checkCall(kind, type, count, rank_, group);
  if (count > 0 && !onDevice(where, {send, recv}))
    return world_.postReduceScatter(send, recv, count, type, world_.group(group, kind), options);
  const GroupComm &g = groupComm(kind, group);
  if (count == 0)
    return completedWork();
  if (options.op == ReduceOp::Max)
    return queued(launch(kind, g.text, comm_, g.comm, where, [&] {
      return maxThroughCopy(send, recv, count * g.size, count * g.position, count, type, g.comm, true);
    }, false));
  return queued(launch(kind, g.text, comm_, g.comm, where, [&] {
    return ncclReduceScatter(send, recv, count, ncclTypeOf(type), ncclSum, g.comm, comm_);
  }, false));
}

ncclResult_t NcclCommunicator::maxKeepingNaN(void *data, int64_t count, DType type, ncclComm_t comm) {
  size_t keyBytes = kernels::cuda::maxKeyBytes(type);
  void *keys = data;
  if (keyBytes != dtypeSize(type)) {
    size_t bytes = (size_t)count * keyBytes;
    if (maxKeysBytes_ < bytes) { // stream-ordered on the comm stream, where every use of it runs
      if (maxKeys_)
        checkCuda(cudaFreeAsync(maxKeys_, comm_), "cudaFreeAsync");
      maxKeys_ = nullptr;
      maxKeysBytes_ = 0;
      checkCuda(cudaMallocAsync(&maxKeys_, bytes, comm_), "cudaMallocAsync (max keys)");
      maxKeysBytes_ = bytes;
    }
    keys = maxKeys_;
  }
  kernels::cuda::toMaxKeys(data, keys, count, type, comm_);
  ncclResult_t rc = ncclAllReduce(keys, keys, count, keyBytes == 8 ? ncclInt64 : ncclInt32, ncclMax, comm, comm_);
  if (rc == ncclSuccess || rc == ncclInProgress) // queued on comm_ either way: the keys come back after it
    kernels::cuda::fromMaxKeys(keys, data, count, type, comm_);
  return rc;
}

ncclResult_t NcclCommunicator::maxThroughCopy(const void *send, void *recv, int64_t total, int64_t offset,
                                              int64_t count, DType type, ncclComm_t comm, bool keep) {
  const size_t es = dtypeSize(type);
  void *copy = nullptr;
  checkCuda(cudaMallocAsync(&copy, total * es, comm_), "cudaMallocAsync (max)");
  checkCuda(cudaMemcpyAsync(copy, send, total * es, cudaMemcpyDeviceToDevice, comm_), "cudaMemcpyAsync");
  ncclResult_t rc = isFloatDType(type) ? maxKeepingNaN(copy, total, type, comm)
                                       : ncclAllReduce(copy, copy, total, ncclTypeOf(type), ncclMax, comm, comm_);
  if (keep && (rc == ncclSuccess || rc == ncclInProgress))
    checkCuda(cudaMemcpyAsync(recv, static_cast<char *>(copy) + offset * es, count * es, cudaMemcpyDeviceToDevice,
                              comm_),
              "cudaMemcpyAsync");
  checkCuda(cudaFreeAsync(copy, comm_), "cudaFreeAsync (max)");
  return rc;
}

void NcclCommunicator::allToAll(const void *send, void *recv, int64_t count, DType type,
                                const CommGroup &commGroup) {
  const std::vector<int> &group = commGroup.members();
  const char *kind = "all_to_all";
  const std::string where = nccl::where(rank_, kind, group);
  nccl::checkCall(kind, type, count, rank_, group);
  if (count > 0 && !onDevice(where, {send, recv})) {
    world_.allToAll(send, recv, count, type, group);
  } else {
    const GroupComm &g = groupComm(kind, group);
    if (send == recv && g.size > 1)
      throw RuntimeError(where + ": send and receive buffers must differ");
    const size_t block = count * dtypeSize(type);
    const char *in = static_cast<const char *>(send);
    char *out = static_cast<char *>(recv);
    if (count > 0)
      launch(kind, g.text, comm_, g.comm, where, [&] {
        // This rank's own block is a copy; the others are one fused group of sends and receives.
        checkCuda(cudaMemcpyAsync(out + g.position * block, in + g.position * block, block, cudaMemcpyDeviceToDevice,
                                  comm_),
                  "cudaMemcpyAsync");
        ncclResult_t rc = ncclGroupStart();
        if (rc != ncclSuccess)
          return rc;
        for (int j = 0; j < g.size && rc == ncclSuccess; ++j) {
          if (j == g.position)
            continue;
          rc = ncclSend(in + j * block, block, ncclUint8, j, g.comm, comm_); // bytes, any element type
          if (rc == ncclSuccess)
            rc = ncclRecv(out + j * block, block, ncclUint8, j, g.comm, comm_);
        }
        ncclResult_t end = ncclGroupEnd();
        return rc != ncclSuccess ? rc : end;
      }, true);
  }
}

void NcclCommunicator::broadcastFrom(void *data, int64_t count, DType type, int root, const CommGroup &commGroup) {
  const std::vector<int> &group = commGroup.members();
  const char *kind = "broadcast_from";
  const std::string where = nccl::where(rank_, kind, group);
  nccl::checkCall(kind, type, count, rank_, group);
  if (count > 0 && !onDevice(where, {data})) {
    world_.broadcastFrom(data, count, type, root, group);
  } else {
    const GroupComm &g = groupComm(kind, group);
    int ncclRoot = nccl::rootRank(kind, root, group, rank_, size_);
    if (count > 0)
      launch(kind, g.text, comm_, g.comm, where,
             [&] { return ncclBroadcast(data, data, count * dtypeSize(type), ncclUint8, ncclRoot, g.comm, comm_); },
             true); // bytes, whatever the element type
  }
  (void)nccl::memberPosition(kind, group, rank_, size_); // refuses a rank outside the group
}

void NcclCommunicator::reduceTo(const void *send, void *recv, int64_t count, DType type, ReduceOp op, int root,
                                const CommGroup &commGroup) {
  const std::vector<int> &group = commGroup.members();
  const char *kind = "reduce_to";
  const std::string where = nccl::where(rank_, kind, group);
  nccl::checkCall(kind, type, count, rank_, group);
  if (count > 0 && !onDevice(where, {send, recv})) {
    world_.reduceTo(send, recv, count, type, op, root, group);
  } else {
    const GroupComm &g = groupComm(kind, group);
    int ncclRoot = nccl::rootRank(kind, root, group, rank_, size_);
    if (count > 0 && op == ReduceOp::Max) // recv is written on the root only
      launch(kind, g.text, comm_, g.comm, where,
             [&] { return maxThroughCopy(send, recv, count, 0, count, type, g.comm, g.position == ncclRoot); }, true);
    else if (count > 0)
      launch(kind, g.text, comm_, g.comm, where,
             [&] { return ncclReduce(send, recv, count, ncclTypeOf(type), ncclSum, ncclRoot, g.comm, comm_); }, true);
  }
  (void)nccl::memberPosition(kind, group, rank_, size_); // refuses a rank outside the group
}

void NcclCommunicator::broadcast(void *data, int64_t bytes, int root) {
  if (root < 0 || root >= size_ || bytes < 0)
    throw RuntimeError("rank " + std::to_string(rank_) + ": broadcast: invalid root " + std::to_string(root) +
                       " or size " + std::to_string(bytes) + " (world size " + std::to_string(size_) + ")");
  const std::string where = nccl::where(rank_, "broadcast", {});
  if (bytes > 0 && !onDevice(where, {data}))
    world_.broadcast(data, bytes, root);
  else if (bytes > 0)
    launch("broadcast", "world", comm_, worldComm_, where,
           [&] { return ncclBroadcast(data, data, bytes, ncclInt8, root, worldComm_, comm_); }, true);
}

void NcclCommunicator::barrier() {
  launch("barrier", "world", comm_, worldComm_, nccl::where(rank_, "barrier", {}), [&] {
    return ncclAllReduce(barrierValue_, barrierValue_, 1, ncclFloat32, ncclSum, worldComm_, comm_);
  }, true);
  checkCuda(cudaStreamSynchronize(compute_), "cudaStreamSynchronize");
}

// --- Point-to-point ------------------------------------------------------------------------------

void NcclCommunicator::preparePeers(const std::vector<int> &peers) {
  if (size_ == 1)
    return; // a rank talking to itself needs no connection
  connected_.resize(size_, false);
  std::vector<int> fresh;
  for (int peer : peers) {
    checkTransfer("connect", 0, peer, 0);
    if (!connected_[peer] && std::find(fresh.begin(), fresh.end(), peer) == fresh.end())
      fresh.push_back(peer);
  }
  if (fresh.empty())
    return;
  std::sort(fresh.begin(), fresh.end());
  if (!connectBytes_)
    connectBytes_ = device_.allocator(MemorySpace::Device).allocate(size_ + 1);
  char *bytes = static_cast<char *>(connectBytes_);
  const std::string where = nccl::where(rank_, "connect", fresh);
  // Lane by lane, in the same order on every rank: each lane's connections are made in one
  // group, which NCCL sets up with all the peers at once.
  for (int direction = 0; direction < nccl::kPointToPointLanes; ++direction) {
    ncclComm_t comm = p2pComms_[direction];
    cudaStream_t stream = p2pStreams_[direction];
    launch("connect", nccl::describeGroup(fresh), stream, comm, where, [&] {
      ncclResult_t rc = ncclGroupStart();
      if (rc != ncclSuccess)
        return rc;
      for (size_t i = 0; i < fresh.size() && rc == ncclSuccess; ++i) {
        int peer = fresh[i];
        if (nccl::directionOf(rank_, peer) == direction)
          rc = ncclSend(bytes, 1, ncclInt8, peer, comm, stream);
        else if (nccl::directionOf(peer, rank_) == direction)
          rc = ncclRecv(bytes + 1 + peer, 1, ncclInt8, peer, comm, stream);
      }
      ncclResult_t end = ncclGroupEnd();
      return rc != ncclSuccess ? rc : end;
    }, false);
  }
  for (int peer : fresh)
    connected_[peer] = true;
}

void NcclCommunicator::checkTransfer(const char *kind, int64_t bytes, int peer, int64_t channel) const {
  bool self = size_ == 1 && peer == 0; // a world of one rank talks to itself, as the single-rank one
  if ((!self && (peer < 0 || peer >= size_ || peer == rank_)) || bytes < 0 || channel < 0 || channel > maxTag())
    throw RuntimeError("rank " + std::to_string(rank_) + ": " + kind + ": invalid peer " + std::to_string(peer) +
                       ", size " + std::to_string(bytes) + " or channel " + std::to_string(channel) + " (world size " +
                       std::to_string(size_) + ", channels up to " + std::to_string(maxTag()) + ")");
}

int NcclCommunicator::takeSlot() {
  if (!deviceHeaders_) {
    deviceHeaders_ = static_cast<nccl::MessageHeader *>(
        device_.allocator(MemorySpace::Device).allocate(kHeaderSlots * sizeof(nccl::MessageHeader)));
    hostHeaders_ = static_cast<nccl::MessageHeader *>(
        device_.allocator(MemorySpace::Host).allocate(kHeaderSlots * sizeof(nccl::MessageHeader)));
    std::lock_guard<std::mutex> lock(mutex_);
    for (int i = kHeaderSlots - 1; i >= 0; --i)
      freeSlots_.push_back(i);
  }
  std::lock_guard<std::mutex> lock(mutex_);
  if (freeSlots_.empty())
    sweepLocked(steadySeconds(), false); // settle what has finished since the watchdog last looked
  if (freeSlots_.empty())
    throw RuntimeError("rank " + std::to_string(rank_) + ": more than " + std::to_string(kHeaderSlots) +
                       " point-to-point transfers in flight");
  int slot = freeSlots_.back();
  freeSlots_.pop_back();
  return slot;
}

void NcclCommunicator::releaseSlot(int slot) {
  std::lock_guard<std::mutex> lock(mutex_);
  freeSlots_.push_back(slot);
}

NcclCommunicator::Transfer NcclCommunicator::postSend(const void *data, int64_t bytes, int peer, int64_t channel) {
  return postTransfer(true, const_cast<void *>(data), bytes, peer, channel);
}

NcclCommunicator::Transfer NcclCommunicator::postRecv(void *data, int64_t bytes, int peer, int64_t channel) {
  return postTransfer(false, data, bytes, peer, channel);
}

NcclCommunicator::Transfer NcclCommunicator::postTransfer(bool send, void *data, int64_t bytes, int peer,
                                                          int64_t channel) {
  const char *kind = send ? "send" : "recv";
  checkTransfer(kind, bytes, peer, channel);
  if (size_ == 1)
    return postSelf(send, data, bytes, channel);
  const std::string where = nccl::where(rank_, kind, {peer});
  TransferRecord record;
  if (bytes > 0 && !onDevice(where, {data})) {
    record.path = TransferRecord::Path::World;
    record.worldHandle = send ? world_.postSend(data, bytes, peer, channel) : world_.postRecv(data, bytes, peer, channel);
  } else {
    const int direction = send ? nccl::directionOf(rank_, peer) : nccl::directionOf(peer, rank_);
    cudaStream_t stream = p2pStreams_[direction];
    ncclComm_t comm = p2pComms_[direction];
    const int slot = takeSlot();
    nccl::MessageHeader header{channel, bytes};
    nccl::MessageHeader *deviceSlot = deviceHeaders_ + slot, *hostSlot = hostHeaders_ + slot;
    try {
      record.tracked = launch(kind, nccl::describeGroup({rank_, peer}), stream, comm, where, [&] {
        if (send) { // through the pinned slot: a copy from pageable memory might wait for the stream
          *hostSlot = header;
          checkCuda(cudaMemcpyAsync(deviceSlot, hostSlot, sizeof header, cudaMemcpyHostToDevice, stream),
                    "cudaMemcpyAsync");
        }
        ncclResult_t rc = ncclGroupStart();
        if (rc != ncclSuccess)
          return rc;
        rc = send ? ncclSend(deviceSlot, sizeof header, ncclInt8, peer, comm, stream)
                  : ncclRecv(deviceSlot, sizeof header, ncclInt8, peer, comm, stream);
        if (rc == ncclSuccess && bytes > 0)
          rc = send ? ncclSend(data, bytes, ncclInt8, peer, comm, stream)
                    : ncclRecv(data, bytes, ncclInt8, peer, comm, stream);
        ncclResult_t end = ncclGroupEnd();
        if (rc == ncclSuccess)
          rc = end;
        if (rc == ncclSuccess && !send)
          checkCuda(cudaMemcpyAsync(hostSlot, deviceSlot, sizeof header, cudaMemcpyDeviceToHost, stream),
                    "cudaMemcpyAsync");
        return rc;
      }, false, [&](Tracked &t) {
        t.slot = slot;
        t.isRecv = !send;
        t.peer = peer;
        t.expected = header;
      });
    } catch (...) {
      releaseSlot(slot);
      throw;
    }
  }
  transfers_[nextTransfer_] = std::move(record);
  return nextTransfer_++;
}

NcclCommunicator::Transfer NcclCommunicator::postSelf(bool send, void *data, int64_t bytes, int64_t channel) {
  // One rank: device copies on the compute stream, in the order the single-rank communicator
  // matches sends and receives (a send waits in a staging buffer until a receive takes it).
  auto deliver = [&](TransferRecord &recv, const void *src, int64_t n) {
    if (n != recv.bytes)
      throw RuntimeError("rank 0: recv on channel " + std::to_string(recv.channel) + " expects " +
                         std::to_string(recv.bytes) + " B, the send has " + std::to_string(n) + " B");
    if (n)
      checkCuda(cudaMemcpyAsync(recv.target, src, n, cudaMemcpyDefault, compute_), "cudaMemcpyAsync");
    recv.done = true;
  };
  TransferRecord record;
  record.path = TransferRecord::Path::Self;
  record.isSend = send;
  record.target = data;
  record.bytes = bytes;
  record.channel = channel;
  if (send) {
    auto waiting = std::find_if(transfers_.begin(), transfers_.end(), [&](const auto &entry) {
      const TransferRecord &r = entry.second;
      return r.path == TransferRecord::Path::Self && !r.isSend && !r.done && r.channel == channel;
    });
    if (waiting != transfers_.end()) {
      deliver(waiting->second, data, bytes);
    } else {
      void *staging = takeStaging(bytes);
      if (bytes)
        checkCuda(cudaMemcpyAsync(staging, data, bytes, cudaMemcpyDefault, compute_), "cudaMemcpyAsync");
      selfQueue_.push_back({channel, staging, bytes});
    }
    record.done = true;
  } else {
    auto sent = std::find_if(selfQueue_.begin(), selfQueue_.end(),
                             [&](const SelfMessage &m) { return m.channel == channel; });
    if (sent != selfQueue_.end()) {
      deliver(record, sent->staging, sent->bytes);
      releaseStaging(sent->staging, sent->bytes); // reused by later copies on the same stream
      selfQueue_.erase(sent);
    }
  }
  transfers_[nextTransfer_] = record;
  return nextTransfer_++;
}

void NcclCommunicator::wait(Transfer transfer) {
  auto it = transfers_.find(transfer);
  if (it == transfers_.end())
    throw RuntimeError("rank " + std::to_string(rank_) + ": wait on an unknown transfer");
  TransferRecord &record = it->second;
  switch (record.path) {
  case TransferRecord::Path::World: world_.wait(record.worldHandle); break;
  case TransferRecord::Path::Self:
    if (!record.done)
      throw RuntimeError("rank 0: recv on channel " + std::to_string(record.channel) +
                         " has no matching send (it would wait forever)");
    break;
  case TransferRecord::Path::Nccl:
    checkCuda(cudaStreamWaitEvent(compute_, record.tracked->end, 0), "cudaStreamWaitEvent");
    break;
  }
  transfers_.erase(it);
}

bool NcclCommunicator::test(Transfer transfer) {
  auto it = transfers_.find(transfer);
  if (it == transfers_.end())
    throw RuntimeError("rank " + std::to_string(rank_) + ": test of an unknown transfer");
  TransferRecord &record = it->second;
  bool finished = false;
  switch (record.path) {
  case TransferRecord::Path::World: finished = world_.test(record.worldHandle); break;
  case TransferRecord::Path::Self: finished = record.done; break;
  case TransferRecord::Path::Nccl: {
    cudaError_t status = cudaEventQuery(record.tracked->end);
    if (status == cudaErrorNotReady)
      return false;
    checkCuda(status, "cudaEventQuery");
    std::lock_guard<std::mutex> lock(mutex_);
    settleLocked(*record.tracked); // a receive's header is checked before its data is used
    finished = true;
    break;
  }
  }
  if (finished)
    transfers_.erase(it);
  return finished;
}

void *NcclCommunicator::takeStaging(int64_t bytes) {
  if (bytes == 0)
    return nullptr;
  auto it = spareStaging_.find(bytes);
  if (it == spareStaging_.end())
    return device_.allocator(MemorySpace::Device).allocate(bytes);
  void *ptr = it->second;
  spareStaging_.erase(it);
  return ptr;
}

void NcclCommunicator::releaseStaging(void *ptr, int64_t bytes) {
  if (ptr)
    spareStaging_.emplace(bytes, ptr);
}

void NcclCommunicator::sendBuffered(const void *data, int64_t bytes, int peer, int64_t channel) {
  if (size_ > 1 && bytes > 0 && !onDevice(nccl::where(rank_, "send", {peer}), {data}))
    return world_.sendBuffered(data, bytes, peer, channel);
  checkTransfer("send", bytes, peer, channel);
  // The copy is queued on the compute stream, after the kernels that produce `data` and before
  // any that overwrite it; the send reads the copy whenever the receiver is ready.
  void *staging = takeStaging(bytes);
  Transfer t = -1;
  try {
    if (bytes)
      checkCuda(cudaMemcpyAsync(staging, data, bytes, cudaMemcpyDefault, compute_), "cudaMemcpyAsync");
    t = postSend(staging, bytes, peer, channel);
  } catch (...) {
    releaseStaging(staging, bytes);
    throw;
  }
  buffered_.push_back({t, staging, bytes});
  bufferedBytes_ += bytes;
}

void NcclCommunicator::completeSends() {
  for (Buffered &b : buffered_) {
    wait(b.transfer); // the compute stream, which alone writes staging buffers, waits for the send
    releaseStaging(b.staging, b.bytes);
  }
  buffered_.clear();
  bufferedBytes_ = 0;
  world_.completeSends();
}

void NcclCommunicator::reapSends() {
  auto done = std::remove_if(buffered_.begin(), buffered_.end(), [&](Buffered &b) {
    if (!test(b.transfer))
      return false;
    releaseStaging(b.staging, b.bytes);
    bufferedBytes_ -= b.bytes;
    return true;
  });
  buffered_.erase(done, buffered_.end());
  world_.reapSends();
}

int64_t NcclCommunicator::bufferedSendBytes() const { return bufferedBytes_ + world_.bufferedSendBytes(); }

// --- Watchdog ------------------------------------------------------------------------------------

void NcclCommunicator::watch() {
  cudaSetDevice(ordinal_);
  const auto poll = std::chrono::milliseconds((int64_t)(nccl::pollSeconds(timeout_) * 1000));
  std::unique_lock<std::mutex> lock(mutex_);
  while (!stopping_) {
    wake_.wait_for(lock, poll);
    if (stopping_)
      break;
    for (auto &[comm, text] : watched_) {
      ncclResult_t error = ncclSuccess;
      if (ncclCommGetAsyncError(comm, &error) == ncclSuccess && error != ncclSuccess && error != ncclInProgress)
        fatalLocked(std::string("error: ") + ncclGetErrorString(error), text);
    }
    sweepLocked(steadySeconds(), true);
  }
}

void NcclCommunicator::sweepLocked(double now, bool enforce) {
  for (auto it = tracked_.begin(); it != tracked_.end();) {
    Tracked &t = **it;
    bool started = !t.start || eventState(t.start) != EventState::Pending;
    bool finished = t.hostDone;
    if (t.end) {
      EventState state = eventState(t.end);
      finished = state != EventState::Pending;
      t.failed = state == EventState::Failed; // a device fault: no header to check
    }
    nccl::OpState state = nccl::observe(t.op, started, finished, now);
    if (state == nccl::OpState::Finished) {
      settleLocked(t);
      it = tracked_.erase(it);
      continue;
    }
    if (state == nccl::OpState::Stuck && enforce)
      fatalLocked(nccl::stuckMessage(t.op), t.op.group);
    ++it;
  }
}

void NcclCommunicator::settleLocked(Tracked &t) {
  if (t.settled)
    return;
  t.settled = true;
  if (t.slot < 0)
    return;
  if (t.isRecv && !t.failed) {
    std::string mismatch = nccl::headerMismatch(hostHeaders_[t.slot], t.expected.channel, t.expected.bytes, t.peer);
    if (!mismatch.empty())
      fatalLocked(mismatch, t.op.group);
  }
  freeSlots_.push_back(t.slot);
  t.slot = -1;
}

void NcclCommunicator::fatalLocked(const std::string &what, const std::string &group) {
  if (failing_.exchange(true)) // another thread is ending the job already
    for (;;)
      std::this_thread::sleep_for(std::chrono::hours(1));
  std::fprintf(stderr, "%s\n", nccl::watchdogLine(rank_, what, group).c_str());
  std::fflush(stderr);
  for (auto &[comm, text] : watched_)
    ncclCommAbort(comm);
  // Not MPI_Abort: MPI runs funneled (only the main thread may call it, and it may be inside a
  // call now). mpirun ends the other ranks when this one exits with an error.
  std::_Exit(1);
}

std::unique_ptr<Communicator> makeNcclCommunicator(Device &device, Communicator &world) {
  auto *cuda = dynamic_cast<CudaDevice *>(&device);
  if (!cuda)
    throw RuntimeError("the NCCL communicator needs a CUDA device, not " + device.name());
  return countingCommunicator(std::make_unique<NcclCommunicator>(*cuda, world));
}

} // namespace cpc
