//===- Communicator.cpp - the single-rank communicator and count reports --===//
#include "runtime/Communicator.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace cpc {

bool combinesValues(std::string_view kind) {
  return kind == "all_reduce" || kind == "reduce_scatter" || kind == "reduce_to";
}

const char *reduceOpName(ReduceOp op) { return op == ReduceOp::Max ? "max" : "sum"; }

ReduceOp parseReduceOp(const std::string &name) {
  for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Max})
    if (name == reduceOpName(op))
      return op;
  throw RuntimeError("unknown reduction '" + name + "'");
}

namespace {

/// One rank: every collective is an identity; the counting decorator still counts its calls (0
/// bytes), so that a single-rank run reports the same collective calls as a multi-rank one.
class SingleRankCommunicator final : public Communicator {
public:
  int rank() const override { return 0; }
  int size() const override { return 1; }

  void allReduce(void *data, int64_t count, DType type, ReduceOp op, const CommGroup &group) override {
    check("all_reduce", count, type, group);
  }
  void allGather(const void *send, void *recv, int64_t count, DType type, const CommGroup &group) override {
    check("all_gather", count, type, group);
    if (send != recv && count > 0)
      std::memmove(recv, send, count * dtypeSize(type));
  }
  void reduceScatter(const void *send, void *recv, int64_t count, DType type, ReduceOp op,
                     const CommGroup &group) override {
    check("reduce_scatter", count, type, group);
    if (send != recv && count > 0)
      std::memmove(recv, send, count * dtypeSize(type));
  }
  void allToAll(const void *send, void *recv, int64_t count, DType type, const CommGroup &group) override {
    check("all_to_all", count, type, group);
    if (send != recv && count > 0)
      std::memmove(recv, send, count * dtypeSize(type));
  }
  void broadcastFrom(void *data, int64_t count, DType type, int root, const CommGroup &group) override {
    check("broadcast_from", count, type, group);
    if (root != 0)
      throw RuntimeError("rank 0: broadcast_from: root " + std::to_string(root) + " outside a group of 1");
  }
  void reduceTo(const void *send, void *recv, int64_t count, DType type, ReduceOp op, int root,
                const CommGroup &group) override {
    check("reduce_to", count, type, group);
    if (root != 0)
      throw RuntimeError("rank 0: reduce_to: root " + std::to_string(root) + " outside a group of 1");
    if (send != recv && count > 0)
      std::memmove(recv, send, count * dtypeSize(type));
  }
  void broadcast(void *data, int64_t bytes, int root) override {
    if (root != 0 || bytes < 0)
      throw RuntimeError("rank 0: broadcast: invalid root " + std::to_string(root) + " or size " +
                         std::to_string(bytes) + " (world size 1)");
  }
  void barrier() override {}

  // On one rank a stage can only talk to itself: a send is copied (so it completes at once) and
  // kept until a receive of its channel takes it; a receive completes when a send meets it.
  Transfer postSend(const void *data, int64_t bytes, int peer, int64_t channel) override {
    checkPeer("send", bytes, peer);
    auto waiting = std::find_if(transfers_.begin(), transfers_.end(), [&](const Pending &p) {
      return !p.isSend && !p.done && p.channel == channel;
    });
    if (waiting != transfers_.end()) {
      deliver(*waiting, data, bytes);
    } else {
      const auto *b = static_cast<const uint8_t *>(data);
      queued_.push_back({channel, std::vector<uint8_t>(b, b + bytes)});
    }
    transfers_.push_back({channel, true, true, nullptr, bytes});
    return transfers_.size() - 1;
  }
  Transfer postRecv(void *data, int64_t bytes, int peer, int64_t channel) override {
    checkPeer("recv", bytes, peer);
    transfers_.push_back({channel, false, false, data, bytes});
    auto sent = std::find_if(queued_.begin(), queued_.end(), [&](const Queued &q) { return q.channel == channel; });
    if (sent != queued_.end()) {
      deliver(transfers_.back(), sent->data.data(), sent->data.size());
      queued_.erase(sent);
    }
    return transfers_.size() - 1;
  }
  bool test(Transfer t) override {
    if (t < 0 || t >= (Transfer)transfers_.size() || !transfers_[t].done)
      return false;
    wait(t);
    return true;
  }
  void wait(Transfer t) override {
    if (t < 0 || t >= (Transfer)transfers_.size())
      throw RuntimeError("rank 0: wait on an unknown transfer");
    if (!transfers_[t].done)
      throw RuntimeError("rank 0: recv on channel " + std::to_string(transfers_[t].channel) +
                         " has no matching send (it would wait forever)");
    transfers_[t].waited = true;
    if (std::all_of(transfers_.begin(), transfers_.end(), [](const Pending &p) { return p.waited; }))
      transfers_.clear(); // every handle is spent: start again (a step's transfers do not pile up)
  }

private:
  struct Pending {
    int64_t channel;
    bool isSend, done;
    void *target;
    int64_t bytes;
    bool waited = false;
  };
  struct Queued {
    int64_t channel;
    std::vector<uint8_t> data;
  };
  static void checkPeer(const char *kind, int64_t bytes, int peer) {
    if (peer != 0 || bytes < 0)
      throw RuntimeError(std::string("rank 0: ") + kind + ": invalid peer " + std::to_string(peer) + " or size " +
                         std::to_string(bytes) + " (world size 1)");
  }
  static void deliver(Pending &recv, const void *data, int64_t bytes) {
    if (bytes != recv.bytes)
      throw RuntimeError("rank 0: recv on channel " + std::to_string(recv.channel) + " expects " +
                         std::to_string(recv.bytes) + " B, the send has " + std::to_string(bytes) + " B");
    if (bytes)
      std::memcpy(recv.target, data, bytes);
    recv.done = true;
  }
  std::vector<Pending> transfers_;
  std::vector<Queued> queued_; // sends no receive has taken yet, oldest first

  // Same checks as the MPI communicator, so that plans fail the same way on one rank (group()
  // has checked the group: rank 0 alone).
  static void check(const char *kind, int64_t count, DType type, const CommGroup &) {
    if (combinesValues(kind) && type != DType::F32 && type != DType::F64 && type != DType::I64 && type != DType::F16 &&
        type != DType::BF16)
      throw RuntimeError(std::string("rank 0: ") + kind + ": unsupported element type " + dtypeName(type));
    if (count < 0)
      throw RuntimeError(std::string("rank 0: ") + kind + ": negative count " + std::to_string(count));
  }
};

std::string humanBytes(int64_t bytes) {
  char buf[32];
  if (bytes < 1000)
    std::snprintf(buf, sizeof buf, "%lld B", (long long)bytes);
  else if (bytes < 1000000)
    std::snprintf(buf, sizeof buf, "%.1f kB", bytes / 1e3);
  else if (bytes < 1000000000)
    std::snprintf(buf, sizeof buf, "%.1f MB", bytes / 1e6);
  else
    std::snprintf(buf, sizeof buf, "%.2f GB", bytes / 1e9);
  return buf;
}

class CompletedWork final : public Work {
public:
  bool test() override { return true; }
  void wait() override {}
};

} // namespace

std::unique_ptr<Work> completedWork() { return std::make_unique<CompletedWork>(); }

std::unique_ptr<Work> Communicator::postAllReduce(const std::vector<BufferRange> &buffers, DType type,
                                                  const CommGroup &group, const AllReduceOptions &options) {
  for (const BufferRange &b : buffers)
    allReduce(b.data, b.count, type, options.op, group);
  return completedWork();
}

std::unique_ptr<Work> Communicator::postAllGather(const void *send, void *recv, int64_t count, DType type,
                                                  const CommGroup &group, const AllGatherOptions &) {
  allGather(send, recv, count, type, group);
  return completedWork();
}

std::unique_ptr<Work> Communicator::postReduceScatter(const void *send, void *recv, int64_t count, DType type,
                                                      const CommGroup &group, const ReduceScatterOptions &options) {
  reduceScatter(send, recv, count, type, options.op, group);
  return completedWork();
}

std::string describeCall(int rank, const std::string &kind, const std::vector<int> &members) {
  std::string s = "rank " + std::to_string(rank) + ": " + kind;
  if (members.empty())
    return s;
  s += " over ranks {";
  for (size_t i = 0; i < members.size(); ++i)
    s += (i ? "," : "") + std::to_string(members[i]);
  return s + "}";
}

int groupPosition(const std::string &kind, const std::vector<int> &members, int rank, int worldSize) {
  if (members.empty())
    return rank;
  int position = -1;
  std::vector<bool> seen(worldSize, false);
  for (size_t i = 0; i < members.size(); ++i) {
    int r = members[i];
    if (r < 0 || r >= worldSize || seen[r])
      throw RuntimeError(describeCall(rank, kind, members) + ": invalid group (ranks must be distinct, in [0, " +
                         std::to_string(worldSize) + "))");
    seen[r] = true;
    if (r == rank)
      position = (int)i;
  }
  if (position < 0)
    throw RuntimeError(describeCall(rank, kind, members) + ": this rank is not a member of the group");
  return position;
}

const CommGroup &Communicator::group(const std::vector<int> &members, const std::string &purpose) {
  auto it = groups_.find(members);
  if (it != groups_.end())
    return *it->second;
  int position = groupPosition(purpose, members, rank(), size());
  std::unique_ptr<CommGroup> made(new CommGroup(members, position, members.empty() ? size() : (int)members.size()));
  createGroup(*made);
  return *(groups_[members] = std::move(made));
}

std::unique_ptr<Communicator> makeSingleRankCommunicator() {
  return countingCommunicator(std::make_unique<SingleRankCommunicator>());
}

bool launchedByMpi() { return std::getenv("OMPI_COMM_WORLD_SIZE") != nullptr; }

std::string formatCommCounts(const Communicator &comm) {
  int64_t calls = 0, bytes = 0;
  for (const auto &[kind, c] : comm.counts()) {
    calls += c.calls;
    bytes += c.bytes;
  }
  std::string s = "comm " + std::to_string(calls) + " call" + (calls == 1 ? "" : "s");
  return calls ? s + " " + humanBytes(bytes) : s;
}

nlohmann::json commCountsJson(const Communicator &comm) {
  int64_t calls = 0, bytes = 0;
  nlohmann::json kinds = nlohmann::json::object();
  for (const auto &[kind, c] : comm.counts()) {
    calls += c.calls;
    bytes += c.bytes;
    kinds[kind] = {{"calls", c.calls}, {"bytes", c.bytes}};
  }
  return {{"comm_calls", calls}, {"comm_bytes", bytes}, {"comm", kinds}};
}

void Communicator::sendBuffered(const void *data, int64_t bytes, int peer, int64_t channel) {
  std::vector<uint8_t> copy(static_cast<const uint8_t *>(data), static_cast<const uint8_t *>(data) + bytes);
  Transfer t = postSend(copy.data(), bytes, peer, channel); // the vector's heap block stays put when moved
  bufferedBytes_ += bytes;
  buffered_.emplace_back(t, std::move(copy));
}

void Communicator::reapSends() {
  auto done = std::remove_if(buffered_.begin(), buffered_.end(), [&](auto &entry) {
    if (!test(entry.first))
      return false;
    bufferedBytes_ -= entry.second.size();
    return true;
  });
  buffered_.erase(done, buffered_.end());
}

void Communicator::completeSends() {
  for (auto &[transfer, copy] : buffered_)
    wait(transfer);
  buffered_.clear();
  bufferedBytes_ = 0;
}

} // namespace cpc
