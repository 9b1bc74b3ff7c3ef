//===- NcclGroupsTest.cpp - the NCCL communicator's host-side rules --------===//
//
// What runtime/cuda/NcclCommunicator.cpp decides without a GPU: the ncclCommSplit calls every
// rank makes (same calls, same order on every rank; members agree on color and key), what NCCL's
// split then does with them (simulated: ranks of a color ordered by key), root translation, the
// bytes counted (the MPI communicator's formulas), message headers and the watchdog's policy.
//
#include "runtime/NcclGroups.h"
#include "tests/unit/TestUtil.h"
#include "runtime/Plan.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <set>

using namespace cpc;
using cpc::test::expectError;
using namespace cpc::nccl;

namespace {

/// Every axis set of a mesh (all subsets of its axes, the empty one and the full one included).
std::vector<std::vector<std::string>> allSubsets(const std::vector<std::string> &axes) {
  std::vector<std::vector<std::string>> sets;
  for (unsigned mask = 0; mask < (1u << axes.size()); ++mask) {
    std::vector<std::string> set;
    for (size_t i = 0; i < axes.size(); ++i)
      if (mask & (1u << i))
        set.push_back(axes[i]);
    sets.push_back(set);
  }
  return sets;
}

/// What ncclCommSplit makes of one call: for each rank, its rank in the new communicator (ranks of
/// one color ordered by key, ties by parent rank) and the new communicator's size; -1 for no color.
std::vector<std::pair<int, int>> simulateSplit(const std::vector<SplitCall> &callOfRank) {
  std::map<int, std::vector<std::pair<int, int>>> byColor; // color -> (key, parent rank)
  for (int r = 0; r < (int)callOfRank.size(); ++r)
    byColor[callOfRank[r].color].push_back({callOfRank[r].key, r});
  std::vector<std::pair<int, int>> result(callOfRank.size(), {-1, 0});
  for (auto &[color, members] : byColor) {
    std::sort(members.begin(), members.end());
    for (int i = 0; i < (int)members.size(); ++i)
      result[members[i].second] = {i, (int)members.size()};
  }
  return result;
}

/// Checks the split calls of every rank of `shape` for `axisSets`, each rank listing the sets in
/// its own order (rotated by its rank), as ranks running different programs might.
void checkMesh(const std::vector<int64_t> &shape, const std::vector<std::string> &axes,
               const std::vector<std::vector<std::string>> &axisSets) {
  const int world = (int)numElements(shape);
  std::vector<std::vector<SplitCall>> calls(world);
  for (int r = 0; r < world; ++r) {
    std::vector<std::vector<std::string>> mine = axisSets;
    if (!mine.empty())
      std::rotate(mine.begin(), mine.begin() + r % mine.size(), mine.end());
    calls[r] = splitCalls(r, world, shape, axes, mine);
  }
  // Same calls in the same order on every rank.
  for (int r = 1; r < world; ++r) {
    ASSERT_EQ(calls[r].size(), calls[0].size()) << "rank " << r;
    for (size_t c = 0; c < calls[0].size(); ++c)
      EXPECT_EQ(calls[r][c].axes, calls[0][c].axes) << "rank " << r << " call " << c;
  }
  for (size_t c = 0; c < calls[0].size(); ++c) {
    std::vector<SplitCall> callOfRank;
    for (int r = 0; r < world; ++r)
      callOfRank.push_back(calls[r][c]);
    std::vector<std::pair<int, int>> split = simulateSplit(callOfRank);
    std::set<int> colors;
    for (int r = 0; r < world; ++r) {
      const SplitCall &call = callOfRank[r];
      std::string what = "rank " + std::to_string(r) + " call " + std::to_string(c);
      // The group is what the collective kernels pass: the ranks that differ only along the axes.
      EXPECT_EQ(call.group, meshGroup(r, shape, meshDimsAlong(axes, call.axes))) << what;
      EXPECT_TRUE(std::is_sorted(call.group.begin(), call.group.end())) << what;
      EXPECT_FALSE(groupKey(call.group, world).empty()) << what << ": the world needs no split";
      EXPECT_EQ(call.color, call.group.front()) << what;
      EXPECT_EQ(call.group[call.key], r) << what;
      // Every member computed the same group and color.
      for (int member : call.group) {
        EXPECT_EQ(callOfRank[member].group, call.group) << what << " member " << member;
        EXPECT_EQ(callOfRank[member].color, call.color) << what << " member " << member;
      }
      // NCCL ranks the members by position, so position == NCCL rank and the roots translate.
      EXPECT_EQ(split[r].first, call.key) << what;
      EXPECT_EQ(split[r].second, (int)call.group.size()) << what;
      for (int root = 0; root < (int)call.group.size(); ++root) {
        int ncclRoot = rootRank("broadcast_from", root, call.group, r, world);
        EXPECT_EQ(callOfRank[worldRankOf(root, call.group)].key, ncclRoot) << what << " root " << root;
      }
      colors.insert(call.color);
    }
    // The groups partition the world: as many colors as groups.
    EXPECT_EQ((int)colors.size() * (int)callOfRank[0].group.size(), world) << "call " << c;
  }
}

TEST(NcclGroupsTest, SplitCallsAgreeOnEveryRankOf2x2) {
  std::vector<std::string> axes = {"dp", "tp"};
  checkMesh({2, 2}, axes, allSubsets(axes));
  EXPECT_EQ(splitCalls(3, 4, {2, 2}, axes, allSubsets(axes)).size(), 2u); // {dp}, {tp}; not {} nor the world
  std::vector<SplitCall> calls = splitCalls(3, 4, {2, 2}, axes, {{"tp"}, {"dp"}});
  ASSERT_EQ(calls.size(), 2u);
  EXPECT_EQ(calls[0].axes, std::vector<std::string>{"dp"}); // mesh order, whatever the listing
  EXPECT_EQ(calls[0].group, (std::vector<int>{1, 3}));
  EXPECT_EQ(calls[0].color, 1);
  EXPECT_EQ(calls[0].key, 1);
  EXPECT_EQ(calls[1].group, (std::vector<int>{2, 3}));
  EXPECT_EQ(calls[1].color, 2);
}

TEST(NcclGroupsTest, SplitCallsAgreeOnEveryRankOf2x2x2) {
  std::vector<std::string> axes = {"a", "b", "c"};
  checkMesh({2, 2, 2}, axes, allSubsets(axes));
  EXPECT_EQ(splitCalls(5, 8, {2, 2, 2}, axes, allSubsets(axes)).size(), 6u); // 2^3 minus {} and the world
}

TEST(NcclGroupsTest, SplitCallsAgreeOnEveryRankOfDpTpRowTpCol) {
  std::vector<std::string> axes = {"dp", "tp_row", "tp_col"};
  checkMesh({2, 2, 3}, axes, allSubsets(axes));
  checkMesh({3, 2, 2}, axes, {{"tp_row", "tp_col"}, {"dp"}, {"tp_col"}, {"dp"}, {"tp_row"}});
  checkMesh({2, 3, 2}, axes, {{"tp_col", "tp_row"}, {"dp", "tp_row"}});
}

TEST(NcclGroupsTest, AxisSetsAreCanonical) {
  std::vector<std::string> axes = {"dp", "tp_row", "tp_col"};
  auto sets = canonicalAxisSets({{"tp_col", "tp_row"}, {}, {"dp"}, {"tp_row", "tp_col", "tp_row"},
                                 {"tp_col", "dp", "tp_row"}, {"dp"}},
                                axes);
  EXPECT_EQ(sets, (std::vector<std::vector<std::string>>{{"dp"}, {"tp_row", "tp_col"}}));
  EXPECT_THROW(canonicalAxisSets({{"pp"}}, axes), RuntimeError);
  EXPECT_THROW(splitCalls(0, 8, {2, 2}, {"dp", "tp"}, {{"dp"}}), RuntimeError); // 4 ranks, not 8
  EXPECT_THROW(splitCalls(4, 4, {2, 2}, {"dp", "tp"}, {{"dp"}}), RuntimeError);
}

TEST(NcclGroupsTest, AGroupThatIsTheWorldNeedsNoSplit) {
  // tp has size 1: the groups along dp are the whole world on every rank, so no rank splits for it.
  std::vector<std::string> axes = {"dp", "tp"};
  for (int r = 0; r < 4; ++r) {
    std::vector<SplitCall> calls = splitCalls(r, 4, {4, 1}, axes, {{"dp"}, {"tp"}});
    ASSERT_EQ(calls.size(), 1u);
    EXPECT_EQ(calls[0].axes, std::vector<std::string>{"tp"});
    EXPECT_EQ(calls[0].group, std::vector<int>{r});
  }
  checkMesh({4, 1}, axes, {{"dp"}, {"tp"}});
}

TEST(NcclGroupsTest, GroupKeysAndPositions) {
  EXPECT_TRUE(groupKey({0, 1, 2, 3}, 4).empty());
  EXPECT_TRUE(groupKey({}, 4).empty());
  EXPECT_EQ(groupKey({3, 2, 1, 0}, 4), (std::vector<int>{3, 2, 1, 0})); // its own order: its own comm
  EXPECT_EQ(groupKey({0, 2}, 4), (std::vector<int>{0, 2}));
  EXPECT_EQ(describeGroup({}), "world");
  EXPECT_EQ(describeGroup({1, 3}), "{1,3}");
  EXPECT_EQ(where(2, "all_reduce", {}), "rank 2: all_reduce");
  EXPECT_EQ(where(2, "all_reduce", {0, 2}), "rank 2: all_reduce over ranks {0,2}");
  EXPECT_EQ(memberPosition("all_reduce", {}, 3, 4), 3);
  EXPECT_EQ(memberPosition("all_reduce", {3, 1}, 1, 4), 1);
  EXPECT_EQ(groupSize({}, 4), 4);
  EXPECT_EQ(groupSize({3, 1}, 4), 2);
  EXPECT_EQ(worldRankOf(0, {3, 1}), 3);
  EXPECT_EQ(worldRankOf(2, {}), 2);
}

TEST(NcclGroupsTest, InvalidCallsFailWithTheMpiWords) {
  expectError([] { memberPosition("all_reduce", {1}, 0, 4); }, {"rank 0", "all_reduce", "not a member"});
  expectError([] { memberPosition("all_reduce", {0, 4}, 0, 4); }, {"rank 0", "invalid group"});
  expectError([] { memberPosition("all_gather", {0, 0}, 0, 4); }, {"all_gather", "invalid group"});
  expectError([] { rootRank("broadcast_from", 2, {0, 1}, 0, 4); }, {"broadcast_from", "root 2 outside a group of 2"});
  expectError([] { rootRank("reduce_to", -1, {}, 0, 4); }, {"reduce_to", "root -1 outside a group of 4"});
  expectError([] { checkCall("reduce_scatter", DType::I8, 1, 1, {}); }, {"rank 1", "reduce_scatter", "i8"});
  expectError([] { checkCall("all_reduce", DType::F32, -1, 1, {}); }, {"rank 1", "negative count"});
  for (DType t : {DType::F32, DType::F64, DType::F16, DType::BF16, DType::I64, DType::I32})
    EXPECT_TRUE(supportedType(t)) << dtypeName(t);
  for (DType t : {DType::I16, DType::I8, DType::U8, DType::I1})
    EXPECT_FALSE(supportedType(t)) << dtypeName(t);
  EXPECT_EQ(rootRank("broadcast_from", 1, {3, 1}, 3, 4), 1);
}

TEST(NcclGroupsTest, HeadersCatchMessagesPostedInDifferentOrders) {
  EXPECT_EQ(headerMismatch({5, 4096}, 5, 4096, 1), "");
  std::string swapped = headerMismatch({7, 4096}, 5, 4096, 1);
  for (const char *part : {"channel 5", "from rank 1", "channel 7", "order"})
    EXPECT_NE(swapped.find(part), std::string::npos) << swapped;
  EXPECT_NE(headerMismatch({5, 1024}, 5, 4096, 1).find("1024 B"), std::string::npos);
  // Sender and receiver pick the same direction's communicator.
  for (int a = 0; a < 4; ++a)
    for (int b = 0; b < 4; ++b)
      if (a != b) {
        EXPECT_EQ(directionOf(a, b), (b > a ? 0 : 2) + a % 2);
        EXPECT_NE(directionOf(a, b), directionOf(b, a));
      }
}

TEST(NcclGroupsTest, WatchdogTimeoutComesFromTheEnvironment) {
  EXPECT_EQ(watchdogTimeout(nullptr), 30);
  EXPECT_EQ(watchdogTimeout(""), 30);
  EXPECT_EQ(watchdogTimeout("5"), 5);
  EXPECT_EQ(watchdogTimeout("0.5"), 0.5);
  EXPECT_EQ(watchdogTimeout("0"), 0);
  for (const char *bad : {"abc", "-1", "5s", "inf", "nan"})
    expectError([&] { watchdogTimeout(bad); }, {"CPC_NCCL_TIMEOUT_S", bad});
  EXPECT_EQ(creationTimeout(30), 300);
  EXPECT_EQ(creationTimeout(0), 0);
  EXPECT_EQ(operationTimeout("create", 30), 300);
  EXPECT_EQ(operationTimeout("connect", 30), 300);
  EXPECT_EQ(operationTimeout("all_reduce", 30), 30);
  EXPECT_EQ(operationTimeout("send", 0), 0);
  EXPECT_EQ(pollSeconds(30), 1);
  EXPECT_EQ(pollSeconds(2), 0.2);
  EXPECT_EQ(pollSeconds(0.1), 0.05);
  EXPECT_EQ(pollSeconds(0), 1);
}

TEST(NcclGroupsTest, AnOperationIsStuckOnlyAfterItStarted) {
  TrackedOp op{"all_reduce", "{0,2}"};
  // Queued behind a long kernel: not started, never stuck.
  EXPECT_EQ(observe(op, false, false, 100), OpState::Queued);
  EXPECT_EQ(observe(op, false, false, 1000), OpState::Queued);
  EXPECT_EQ(observe(op, true, false, 1001), OpState::Running);
  EXPECT_EQ(op.startedAt, 1001);
  EXPECT_EQ(observe(op, true, false, 1030.9), OpState::Running);
  EXPECT_EQ(observe(op, true, false, 1031), OpState::Stuck);
  EXPECT_EQ(observe(op, true, true, 1032), OpState::Finished);
  TrackedOp patient{"send", "{0,1}", -1, 0};
  EXPECT_EQ(observe(patient, true, false, 0), OpState::Running);
  EXPECT_EQ(observe(patient, true, false, 1e9), OpState::Running); // timeout 0: never stuck
  TrackedOp quick{"recv", "{1,0}"};
  EXPECT_EQ(observe(quick, true, true, 5), OpState::Finished);
}

TEST(NcclGroupsTest, TheWatchdogPrintsOneLine) {
  TrackedOp op{"all_reduce", "{0,2}"};
  EXPECT_EQ(watchdogLine(3, stuckMessage(op), op.group),
            "cpc-run: rank 3: NCCL collective all_reduce stuck for 30 s (group {0,2})");
  EXPECT_EQ(stuckMessage(TrackedOp{"send", "{0,1}", -1, 2.5}), "point-to-point send stuck for 2.5 s");
  EXPECT_EQ(stuckMessage(TrackedOp{"create", "world", -1, 300}), "communicator creation stuck for 300 s");
  EXPECT_EQ(stuckMessage(TrackedOp{"connect", "{1,3}", -1, 300}), "point-to-point connect stuck for 300 s");
  EXPECT_EQ(stuckMessage(TrackedOp{"barrier", "world"}), "collective barrier stuck for 30 s");
  EXPECT_EQ(watchdogLine(0, "error: remote process exited or there was a network error", "world"),
            "cpc-run: rank 0: NCCL error: remote process exited or there was a network error (group world)");
}

} // namespace
