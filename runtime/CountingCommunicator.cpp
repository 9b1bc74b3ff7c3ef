//===- CountingCommunicator.cpp - every call counted in one place ---------===//
//
// The MPI, NCCL and single-rank communicators count nothing themselves: each factory wraps its
// communicator in this decorator, which forwards every call and, once it has returned, counts
// it with the bytes this rank sends in a ring (or chain) implementation (the traffic formulas
// of Traffic.h). A call that throws is not counted.
//
#include "runtime/Communicator.h"

#include <algorithm>

namespace cpc {

namespace {

class CountingCommunicator final : public Communicator {
public:
  explicit CountingCommunicator(std::unique_ptr<Communicator> inner) : inner_(std::move(inner)) {}

  int rank() const override { return inner_->rank(); }
  int size() const override { return inner_->size(); }
  /// The inner communicator's groups: the calls forwarded to it take them.
  const CommGroup &group(const std::vector<int> &members, const std::string &purpose) override {
    return inner_->group(members, purpose);
  }

  void allReduce(void *data, int64_t count, DType type, ReduceOp op, const CommGroup &group) override {
    inner_->allReduce(data, count, type, op, group);
    Communicator::count("all_reduce", traffic::allReduce(count * dtypeSize(type), members(group)));
  }
  void allGather(const void *send, void *recv, int64_t count, DType type, const CommGroup &group) override {
    inner_->allGather(send, recv, count, type, group);
    Communicator::count("all_gather", traffic::blockExchange(count * dtypeSize(type), members(group)));
  }
  void reduceScatter(const void *send, void *recv, int64_t count, DType type, ReduceOp op,
                     const CommGroup &group) override {
    inner_->reduceScatter(send, recv, count, type, op, group);
    Communicator::count("reduce_scatter", traffic::blockExchange(count * dtypeSize(type), members(group)));
  }
  void allToAll(const void *send, void *recv, int64_t count, DType type, const CommGroup &group) override {
    inner_->allToAll(send, recv, count, type, group);
    Communicator::count("all_to_all", traffic::blockExchange(count * dtypeSize(type), members(group)));
  }
  void broadcast(void *data, int64_t bytes, int root) override {
    inner_->broadcast(data, bytes, root);
    Communicator::count("broadcast", traffic::broadcast(bytes, size(), rank(), root));
  }
  void broadcastFrom(void *data, int64_t count, DType type, int root, const CommGroup &group) override {
    inner_->broadcastFrom(data, count, type, root, group);
    Communicator::count("broadcast_from",
                        traffic::broadcastFrom(count * dtypeSize(type), members(group), position(group), root));
  }
  void reduceTo(const void *send, void *recv, int64_t count, DType type, ReduceOp op, int root,
                const CommGroup &group) override {
    inner_->reduceTo(send, recv, count, type, op, root, group);
    Communicator::count("reduce_to",
                        traffic::reduceTo(count * dtypeSize(type), members(group), position(group), root));
  }
  // A posted collective is counted once posted: its bytes will go out.
  std::unique_ptr<Work> postAllReduce(const std::vector<BufferRange> &buffers, DType type,
                                      const CommGroup &group, const AllReduceOptions &options) override {
    std::unique_ptr<Work> work = inner_->postAllReduce(buffers, type, group, options);
    int64_t count = 0;
    for (const BufferRange &b : buffers)
      count += b.count;
    Communicator::count("all_reduce", traffic::allReduce(count * dtypeSize(type), members(group)));
    return work;
  }
  std::unique_ptr<Work> postAllGather(const void *send, void *recv, int64_t count, DType type,
                                      const CommGroup &group, const AllGatherOptions &options) override {
    std::unique_ptr<Work> work = inner_->postAllGather(send, recv, count, type, group, options);
    Communicator::count("all_gather", traffic::blockExchange(count * dtypeSize(type), members(group)));
    return work;
  }
  std::unique_ptr<Work> postReduceScatter(const void *send, void *recv, int64_t count, DType type,
                                          const CommGroup &group,
                                          const ReduceScatterOptions &options) override {
    std::unique_ptr<Work> work = inner_->postReduceScatter(send, recv, count, type, group, options);
    Communicator::count("reduce_scatter", traffic::blockExchange(count * dtypeSize(type), members(group)));
    return work;
  }
  void barrier() override {
    inner_->barrier();
    Communicator::count("barrier", 0);
  }

  Transfer postSend(const void *data, int64_t bytes, int peer, int64_t channel) override {
    Transfer t = inner_->postSend(data, bytes, peer, channel);
    Communicator::count("send", bytes);
    return t;
  }
  Transfer postRecv(void *data, int64_t bytes, int peer, int64_t channel) override {
    Transfer t = inner_->postRecv(data, bytes, peer, channel);
    Communicator::count("recv", 0); // the peer sent the bytes
    return t;
  }
  void wait(Transfer transfer) override { inner_->wait(transfer); }
  bool test(Transfer transfer) override { return inner_->test(transfer); }
  int64_t maxTag() const override { return inner_->maxTag(); }
  void sendBuffered(const void *data, int64_t bytes, int peer, int64_t channel) override {
    inner_->sendBuffered(data, bytes, peer, channel);
    Communicator::count("send", bytes);
  }
  void completeSends() override { inner_->completeSends(); }
  void reapSends() override { inner_->reapSends(); }
  int64_t bufferedSendBytes() const override { return inner_->bufferedSendBytes(); }

  void prepareGroups(const std::vector<std::vector<std::string>> &axisSets, const std::vector<int64_t> &meshShape,
                     const std::vector<std::string> &meshAxes) override {
    inner_->prepareGroups(axisSets, meshShape, meshAxes);
  }
  void preparePeers(const std::vector<int> &peers) override { inner_->preparePeers(peers); }
  void *allocateSharedHost(int64_t bytes) override { return inner_->allocateSharedHost(bytes); }

private:
  /// The members of `group` (the world when empty) and this rank's position among them; the
  /// inner communicator has checked the group.
  static int members(const CommGroup &group) { return group.size(); }
  static int position(const CommGroup &group) { return group.position(); }

  std::unique_ptr<Communicator> inner_;
};

} // namespace

std::unique_ptr<Communicator> countingCommunicator(std::unique_ptr<Communicator> inner) {
  return std::make_unique<CountingCommunicator>(std::move(inner));
}

} // namespace cpc
