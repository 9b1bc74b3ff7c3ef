//===- ScheduleCheckTest.cpp - the compile-time proof that no rank hangs --===//
#include "runtime/ScheduleCheck.h"

#include <gtest/gtest.h>

using namespace cpc;

namespace {

CommAction collective(const std::string &what, std::vector<int> group, const std::string &loc = "") {
  CommAction a;
  a.what = what;
  a.group = std::move(group);
  a.loc = loc;
  return a;
}

CommAction send(int peer, int64_t channel, int64_t bytes = 16) {
  CommAction a;
  a.kind = CommAction::Kind::Send;
  a.peer = peer;
  a.channel = channel;
  a.bytes = bytes;
  a.what = opName(OpKind::Send);
  return a;
}

CommAction recv(int peer, int64_t channel, int64_t bytes = 16) {
  CommAction a = send(peer, channel, bytes);
  a.kind = CommAction::Kind::Recv;
  a.what = opName(OpKind::Recv);
  return a;
}

// Tests that collectives issued in one order by every member, over overlapping groups (a 2x2
// mesh's rows and columns), complete.
TEST(ScheduleCheck, CollectivesInOneOrderComplete) {
  auto row = [](int r) { return r < 2 ? std::vector<int>{0, 1} : std::vector<int>{2, 3}; };
  auto column = [](int r) { return r % 2 ? std::vector<int>{1, 3} : std::vector<int>{0, 2}; };
  std::vector<std::vector<CommAction>> ranks(4);
  for (int r = 0; r < 4; ++r)
    ranks[r] = {collective("ar f32[8]", row(r)), collective("ag f32[4]", column(r)), collective("ar f32[]", {0, 1, 2, 3})};
  EXPECT_EQ(checkSchedule(ranks), "");
}

// Tests that two members issuing different collectives next over the same group are refused,
// naming both ranks and both ops.
TEST(ScheduleCheck, MembersThatDisagreeAreNamed) {
  std::vector<std::vector<CommAction>> ranks = {
      {collective("cpc.all_reduce f32[8]", {0, 1}, "a"), collective("cpc.all_gather f32[4]", {0, 1}, "b")},
      {collective("cpc.all_gather f32[4]", {0, 1}, "b"), collective("cpc.all_reduce f32[8]", {0, 1}, "a")}};
  std::string problem = checkSchedule(ranks);
  EXPECT_NE(problem.find("ranks 0 and 1 disagree"), std::string::npos) << problem;
  EXPECT_NE(problem.find("cpc.all_reduce f32[8] (a)"), std::string::npos) << problem;
  EXPECT_NE(problem.find("cpc.all_gather f32[4] (b)"), std::string::npos) << problem;
}

// Tests pipeline exchanges: sends never wait (the runtime buffers them), so both stages sending
// first completes; both receiving first is a cycle of waits, reported per rank.
TEST(ScheduleCheck, SendsMeetTheirReceivesWithoutCycles) {
  EXPECT_EQ(checkSchedule({{send(1, 0), recv(1, 1)}, {recv(0, 0), send(0, 1)}}), "");
  EXPECT_EQ(checkSchedule({{send(1, 0), recv(1, 1)}, {send(0, 1), recv(0, 0)}}), "");
  std::string problem = checkSchedule({{recv(1, 1), send(1, 0)}, {recv(0, 0), send(0, 1)}});
  EXPECT_NE(problem.find("would wait forever"), std::string::npos) << problem;
  EXPECT_NE(problem.find("rank 0 waits to receive from rank 1 on channel 1"), std::string::npos) << problem;
  EXPECT_NE(problem.find("rank 1 waits to receive from rank 0 on channel 0"), std::string::npos) << problem;
}

// Tests that a receive on another channel, a size mismatch, a missing member and a collective
// that a member never issues are all caught.
TEST(ScheduleCheck, MismatchesAreCaught) {
  EXPECT_NE(checkSchedule({{send(1, 0)}, {recv(0, 2)}}), "");
  EXPECT_NE(checkSchedule({{send(1, 0)}, {}}).find("never receives"), std::string::npos);
  EXPECT_NE(checkSchedule({{send(1, 0, 16)}, {recv(0, 0, 8)}}).find("the receive takes 8 B"), std::string::npos);
  EXPECT_NE(checkSchedule({{collective("ar", {1})}, {}}).find("over a group without it"), std::string::npos);
  std::string problem = checkSchedule({{collective("ar", {0, 1})}, {}});
  EXPECT_NE(problem.find("rank 0 waits in ar over ranks {0,1}"), std::string::npos) << problem;
}

/// A plan on a dp=1 x pp=2 mesh whose two ranks run their own program "train_step".
Plan pipelinePlan(int64_t recvChannel) {
  Plan plan;
  plan.mode = PlanMode::Train;
  plan.worldSize = 2;
  plan.meshShape = {1, 2};
  plan.meshAxes = {"dp", "pp"};
  plan.buffers.push_back({"act", DType::F32, {2, 3}, BufferKind::Arena});
  RankProgram first, second;
  first.rank = 0;
  second.rank = 1;
  first.name = second.name = "train_step";
  first.steps.push_back({OpKind::Send, {0}, {}, {{"mesh", "mesh"}, {"mesh_axis", "pp"}, {"peer", 1}, {"channel", 0}}, "stage0"});
  second.steps.push_back({OpKind::Recv, {}, {0}, {{"mesh", "mesh"}, {"mesh_axis", "pp"}, {"peer", 0}, {"channel", recvChannel}}, "stage1"});
  plan.programs = {first, second};
  return plan;
}

// Tests the check on plans: peers resolved from the mesh; a receive on the wrong channel means a
// hang, named by program and ranks; a send to the rank itself is refused.
TEST(ScheduleCheck, PlansArePairedOnTheirMesh) {
  std::vector<std::vector<CommAction>> actions = commActions(pipelinePlan(0), "train_step");
  ASSERT_EQ(actions.size(), 2u);
  ASSERT_EQ(actions[0].size(), 1u);
  EXPECT_EQ(actions[0][0].peer, 1);
  EXPECT_EQ(actions[1][0].peer, 0);
  EXPECT_EQ(actions[1][0].bytes, 24);
  EXPECT_EQ(checkPlanSchedule(pipelinePlan(0)), "");
  std::string problem = checkPlanSchedule(pipelinePlan(3));
  EXPECT_NE(problem.find("program train_step: the ranks would wait forever"), std::string::npos) << problem;
  EXPECT_NE(problem.find("(stage1)"), std::string::npos) << problem;
  Plan spmd = pipelinePlan(0);
  spmd.programs.resize(1);
  spmd.programs[0].rank = -1; // both ranks send to pp = 1: rank 1 to itself
  EXPECT_THROW(commActions(spmd, "train_step"), RuntimeError);
}

// Tests stage programs on a dp=2 x pp=2 mesh: the ranks at pp = 0 send to pp = 1 of their own
// dp row; the check pairs ranks 0-1 and 2-3.
TEST(ScheduleCheck, StageProgramsPairWithinTheirRow) {
  Plan plan = pipelinePlan(0);
  plan.worldSize = 4;
  plan.meshShape = {2, 2};
  for (RankProgram &p : plan.programs) {
    p.coordinates = {{"pp", p.rank}};
    p.rank = -1;
  }
  std::vector<std::vector<CommAction>> actions = commActions(plan, "train_step");
  ASSERT_EQ(actions.size(), 4u);
  EXPECT_EQ(actions[2][0].kind, CommAction::Kind::Send);
  EXPECT_EQ(actions[2][0].peer, 3);
  EXPECT_EQ(actions[3][0].peer, 2);
  EXPECT_EQ(checkPlanSchedule(plan), "");
}

} // namespace
