//===- NcclGroups.cpp - the host-side rules of the NCCL communicator -------===//
#include "runtime/NcclGroups.h"
#include "runtime/Communicator.h"
#include "runtime/Plan.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <sstream>

namespace cpc::nccl {

std::vector<int> groupKey(const std::vector<int> &group, int worldSize) {
  if ((int)group.size() != worldSize)
    return group;
  for (int i = 0; i < worldSize; ++i)
    if (group[i] != i)
      return group;
  return {};
}

std::string describeGroup(const std::vector<int> &group) {
  if (group.empty())
    return "world";
  std::string s = "{";
  for (size_t i = 0; i < group.size(); ++i)
    s += (i ? "," : "") + std::to_string(group[i]);
  return s + "}";
}

std::string where(int rank, const std::string &kind, const std::vector<int> &group) {
  return describeCall(rank, kind, group);
}

int memberPosition(const std::string &kind, const std::vector<int> &group, int rank, int worldSize) {
  return groupPosition(kind, group, rank, worldSize);
}

int groupSize(const std::vector<int> &group, int worldSize) {
  return group.empty() ? worldSize : (int)group.size();
}

int worldRankOf(int position, const std::vector<int> &group) { return group.empty() ? position : group.at(position); }

int rootRank(const std::string &kind, int root, const std::vector<int> &group, int rank, int worldSize) {
  int n = groupSize(group, worldSize);
  if (root < 0 || root >= n)
    throw RuntimeError(where(rank, kind, group) + ": root " + std::to_string(root) + " outside a group of " +
                       std::to_string(n));
  return root; // the split key (and the lazy init's rank) is the position
}

bool supportedType(DType type) {
  switch (type) {
  case DType::F32: case DType::F64: case DType::F16: case DType::BF16: case DType::I64: case DType::I32: return true;
  default: return false;
  }
}

void checkCall(const std::string &kind, DType type, int64_t count, int rank, const std::vector<int> &group) {
  if (combinesValues(kind) && !supportedType(type))
    throw RuntimeError(where(rank, kind, group) + ": unsupported element type " + dtypeName(type));
  if (count < 0)
    throw RuntimeError(where(rank, kind, group) + ": negative count " + std::to_string(count));
}

std::vector<std::vector<std::string>> canonicalAxisSets(const std::vector<std::vector<std::string>> &axisSets,
                                                        const std::vector<std::string> &meshAxes) {
  std::vector<std::vector<size_t>> dims;
  for (const auto &set : axisSets) {
    std::vector<size_t> d;
    for (const std::string &axis : set) {
      auto it = std::find(meshAxes.begin(), meshAxes.end(), axis);
      if (it == meshAxes.end())
        throw RuntimeError("NCCL groups: the mesh has no axis '" + axis + "'");
      d.push_back(size_t(it - meshAxes.begin()));
    }
    std::sort(d.begin(), d.end());
    d.erase(std::unique(d.begin(), d.end()), d.end());
    if (!d.empty() && d.size() < meshAxes.size())
      dims.push_back(std::move(d));
  }
  std::sort(dims.begin(), dims.end());
  dims.erase(std::unique(dims.begin(), dims.end()), dims.end());
  std::vector<std::vector<std::string>> out;
  for (const auto &d : dims) {
    std::vector<std::string> names;
    for (size_t i : d)
      names.push_back(meshAxes[i]);
    out.push_back(std::move(names));
  }
  return out;
}

std::vector<SplitCall> splitCalls(int rank, int worldSize, const std::vector<int64_t> &meshShape,
                                  const std::vector<std::string> &meshAxes,
                                  const std::vector<std::vector<std::string>> &axisSets) {
  if (meshShape.size() != meshAxes.size() || meshShape.empty() || numElements(meshShape) != worldSize)
    throw RuntimeError("NCCL groups: a mesh of " + std::to_string(meshShape.size()) + " dims and " +
                       std::to_string(meshAxes.size()) + " names does not describe " + std::to_string(worldSize) +
                       " ranks");
  if (rank < 0 || rank >= worldSize)
    throw RuntimeError("NCCL groups: rank " + std::to_string(rank) + " outside a world of " +
                       std::to_string(worldSize));
  std::vector<SplitCall> calls;
  for (const auto &axes : canonicalAxisSets(axisSets, meshAxes)) {
    std::vector<int> group = meshGroup(rank, meshShape, meshDimsAlong(meshAxes, axes));
    if (groupKey(group, worldSize).empty())
      continue; // the other axes have size 1: the world communicator serves it (on every rank)
    SplitCall call;
    call.axes = axes;
    call.color = group.front();
    call.key = int(std::find(group.begin(), group.end(), rank) - group.begin());
    call.group = std::move(group);
    calls.push_back(std::move(call));
  }
  return calls;
}

std::string headerMismatch(const MessageHeader &got, int64_t channel, int64_t bytes, int peer) {
  if (got.channel == channel && got.bytes == bytes)
    return "";
  return "recv on channel " + std::to_string(channel) + " (" + std::to_string(bytes) + " B) from rank " +
         std::to_string(peer) + " got the message of channel " + std::to_string(got.channel) + " (" +
         std::to_string(got.bytes) + " B): NCCL matches messages in the order they are posted, and the two ranks "
         "posted them in different orders";
}

int directionOf(int from, int to) { return (to > from ? 0 : 2) + (from & 1); }

double watchdogTimeout(const char *value) {
  if (!value || !*value)
    return kDefaultTimeoutSeconds;
  char *end = nullptr;
  double seconds = std::strtod(value, &end);
  while (end && (*end == ' ' || *end == '\t'))
    ++end;
  if (!end || *end || !std::isfinite(seconds) || seconds < 0)
    throw RuntimeError(std::string("CPC_NCCL_TIMEOUT_S='") + value +
                       "' is not a number of seconds (0 turns the NCCL watchdog's timeout off)");
  return seconds;
}

double creationTimeout(double timeout) { return 10 * timeout; }

double operationTimeout(const std::string &kind, double timeout) {
  return kind == "create" || kind == "connect" ? creationTimeout(timeout) : timeout;
}

double pollSeconds(double timeout) {
  if (timeout <= 0)
    return 1;
  return std::min(1.0, std::max(0.05, timeout / 10));
}

OpState observe(TrackedOp &op, bool started, bool finished, double now) {
  if (finished)
    return OpState::Finished;
  if (op.startedAt < 0) {
    if (!started)
      return OpState::Queued;
    op.startedAt = now;
  }
  return op.timeout > 0 && now - op.startedAt >= op.timeout ? OpState::Stuck : OpState::Running;
}

std::string stuckMessage(const TrackedOp &op) {
  std::ostringstream seconds;
  seconds << op.timeout;
  bool pointToPoint = op.kind == "send" || op.kind == "recv" || op.kind == "connect";
  std::string what = op.kind == "create" ? "communicator creation"
                     : pointToPoint      ? "point-to-point " + op.kind
                                         : "collective " + op.kind;
  return what + " stuck for " + seconds.str() + " s";
}

std::string watchdogLine(int rank, const std::string &what, const std::string &group) {
  return "cpc-run: rank " + std::to_string(rank) + ": NCCL " + what + " (group " + group + ")";
}

} // namespace cpc::nccl
