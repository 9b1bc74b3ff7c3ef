//===- PipelineScheduleTest.cpp - GPipe, 1F1B and interleaved action lists --===//
#include "runtime/PipelineSchedule.h"
#include "runtime/ScheduleCheck.h"
#include "runtime/TensorIO.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <set>

using namespace cpc;

namespace {

/// Every (chunk, microbatch) of the rank has one forward and, later, one backward.
void expectComplete(const PipelineSchedule &s) {
  for (int64_t r = 0; r < s.stages; ++r) {
    std::set<std::pair<int64_t, int64_t>> forward, backward;
    for (const PipelineAction &a : s.actions[r]) {
      EXPECT_EQ(a.chunk % s.stages, r);
      auto key = std::make_pair(a.chunk, a.microbatch);
      if (a.backward) {
        EXPECT_TRUE(forward.count(key)) << "backward before forward on rank " << r;
        EXPECT_TRUE(backward.insert(key).second);
      } else {
        EXPECT_TRUE(forward.insert(key).second);
      }
    }
    EXPECT_EQ((int64_t)backward.size(), s.virtualStages * s.microbatches);
  }
}

int64_t leadingForwards(const std::vector<PipelineAction> &list) {
  int64_t n = 0;
  while (n < (int64_t)list.size() && !list[n].backward)
    ++n;
  return n;
}

// Tests 1F1B: rank r warms up with min(P - r - 1, M) forwards (plus the first of the steady
// state), holds at most P - r microbatches, and the last rank alternates from the start.
TEST(PipelineSchedule, OneFOneBWarmsUpByRank) {
  PipelineSchedule s = buildPipelineSchedule(PipelineScheduleKind::OneFOneB, 4, 1, 8);
  expectComplete(s);
  for (int64_t r = 0; r < 4; ++r) {
    EXPECT_EQ(leadingForwards(s.actions[r]), 4 - r - 1 + 1);
    EXPECT_EQ(s.peakInFlight(r), 4 - r);
  }
  EXPECT_EQ(s.format().substr(0, 40), "pipeline rank 0: F0.0 F0.1 F0.2 F0.3 B0.");
  // Fewer microbatches than stages: the warm-up is capped at M.
  PipelineSchedule few = buildPipelineSchedule(PipelineScheduleKind::OneFOneB, 4, 1, 2);
  expectComplete(few);
  EXPECT_EQ(leadingForwards(few.actions[0]), 2);
}

// Tests GPipe (every forward, then every backward: M in flight) and the bubble formulas.
TEST(PipelineSchedule, GPipeAndTheBubble) {
  PipelineSchedule s = buildPipelineSchedule(PipelineScheduleKind::GPipe, 2, 1, 4);
  expectComplete(s);
  EXPECT_EQ(leadingForwards(s.actions[1]), 4);
  EXPECT_EQ(s.peakInFlight(1), 4);
  EXPECT_DOUBLE_EQ(s.bubbleFraction(), 1.0 / 5.0);
  PipelineSchedule i = buildPipelineSchedule(PipelineScheduleKind::Interleaved, 4, 2, 8);
  EXPECT_DOUBLE_EQ(i.bubbleFraction(), 3.0 / 19.0);
}

// Tests Megatron's interleaved order: warm-up (P - r - 1) * 2 + (V - 1) * P, chunks r and r + P,
// microbatches in groups of P, and the conditions it needs.
TEST(PipelineSchedule, InterleavedFollowsMegatron) {
  PipelineSchedule s = buildPipelineSchedule(PipelineScheduleKind::Interleaved, 2, 2, 4);
  expectComplete(s);
  EXPECT_EQ(leadingForwards(s.actions[0]), (2 - 0 - 1) * 2 + (2 - 1) * 2 + 1);
  EXPECT_EQ(leadingForwards(s.actions[1]), (2 - 1 - 1) * 2 + (2 - 1) * 2 + 1);
  // Rank 0's forwards: chunk 0 for microbatches 0 and 1, then chunk 2 for them.
  EXPECT_EQ(s.actions[0][0], (PipelineAction{false, 0, 0}));
  EXPECT_EQ(s.actions[0][1], (PipelineAction{false, 0, 1}));
  EXPECT_EQ(s.actions[0][2], (PipelineAction{false, 2, 0}));
  // Its first backward is of the last chunk it holds.
  EXPECT_EQ(s.actions[0][leadingForwards(s.actions[0])], (PipelineAction{true, 2, 0}));
  EXPECT_THROW(buildPipelineSchedule(PipelineScheduleKind::Interleaved, 4, 2, 6), RuntimeError);
  EXPECT_THROW(buildPipelineSchedule(PipelineScheduleKind::Interleaved, 2, 1, 4), RuntimeError);
  EXPECT_THROW(buildPipelineSchedule(PipelineScheduleKind::OneFOneB, 2, 2, 4), RuntimeError);
}

// Tests the plan form: a round trip, and lists that cannot run refused with the rank and action.
TEST(PipelineSchedule, JsonRoundTripAndValidation) {
  PipelineSchedule s = buildPipelineSchedule(PipelineScheduleKind::Interleaved, 2, 2, 2);
  PipelineSchedule back = PipelineSchedule::fromJson(s.toJson());
  EXPECT_EQ(back.actions, s.actions);
  EXPECT_EQ(back.kind, PipelineScheduleKind::Interleaved);
  auto refuse = [&](const std::string &rank1, const std::string &expected) {
    nlohmann::json j = buildPipelineSchedule(PipelineScheduleKind::OneFOneB, 2, 1, 2).toJson();
    j["actions"][1] = nlohmann::json::parse(rank1);
    try {
      PipelineSchedule::fromJson(j);
      ADD_FAILURE() << "accepted " << rank1;
    } catch (const RuntimeError &e) {
      EXPECT_NE(std::string(e.what()).find(expected), std::string::npos) << e.what();
    }
  };
  refuse(R"(["B1.0", "F1.0", "F1.1", "B1.1"])", "backward before its forward");
  refuse(R"(["F1.0", "B1.0", "F1.1"])", "without a backward");
  refuse(R"(["F0.0", "B0.0", "F1.1", "B1.1"])", "does not run on this rank");
  refuse(R"(["F1.0", "B1.0", "F1.9", "B1.1"])", "no such microbatch");
  refuse(R"(["F1.0", "B1.0", "X1.1", "B1.1"])", "is not F<chunk>");
}

/// Two stages of one chunk each: forward_0 sends the activation (channel 0) to forward_1, which
/// also hands a saved value to backward_1; backward_1 sends the gradient (channel 1) back.
Plan twoStagePlan() {
  Plan plan;
  plan.mode = PlanMode::Train;
  plan.worldSize = 2;
  plan.meshShape = {2};
  plan.meshAxes = {"pp"};
  plan.buffers.push_back({"act", DType::F32, {2, 3}, BufferKind::Arena});
  plan.buffers.push_back({"saved", DType::F32, {2}, BufferKind::Input});
  auto program = [&](const std::string &name, ProgramPhase phase, int64_t stage, std::vector<StepDesc> steps) {
    RankProgram p;
    p.rank = -1;
    p.coordinates = {{"pp", stage}};
    p.name = name;
    p.phase = phase;
    p.chunk = phase == ProgramPhase::Apply ? -1 : stage;
    p.steps = std::move(steps);
    plan.programs.push_back(p);
  };
  auto p2p = [](OpKind op, int64_t peer, int64_t channel, const std::string &loc) {
    StepDesc s{op, {}, {}, {{"mesh", "mesh"}, {"mesh_axis", "pp"}, {"peer", peer}, {"channel", channel}}, loc};
    (op == OpKind::Send ? s.inputs : s.outputs).push_back(0);
    return s;
  };
  program("forward_0", ProgramPhase::Forward, 0, {p2p(OpKind::Send, 1, 0, "act out")});
  program("forward_1", ProgramPhase::Forward, 1, {p2p(OpKind::Recv, 0, 0, "act in")});
  program("backward_1", ProgramPhase::Backward, 1, {p2p(OpKind::Send, 0, 1, "grad out")});
  program("backward_0", ProgramPhase::Backward, 0, {p2p(OpKind::Recv, 1, 1, "grad in")});
  program("apply_0", ProgramPhase::Apply, 0, {});
  program("apply_1", ProgramPhase::Apply, 1, {});
  plan.outputs.push_back({"transfer.2", 1, "forward_1", RuntimeInputKind::None, 2});
  plan.inputs.push_back({"transfer.2", 1, "backward_1", RuntimeInputKind::None, 2});
  return plan;
}

// Tests the whole-step check of a pipeline: the 1F1B and GPipe lists pass; lists in which
// rank 0 waits for a gradient that rank 1 would send only after a forward that waits for rank 0
// are refused, naming both ranks and the actions; a hand-over read before it is made too.
TEST(PipelineSchedule, TheCheckSimulatesTheWholeStep) {
  Plan plan = twoStagePlan();
  for (auto kind : {PipelineScheduleKind::OneFOneB, PipelineScheduleKind::GPipe}) {
    plan.training["pipeline"] = buildPipelineSchedule(kind, 2, 1, 3).toJson();
    EXPECT_EQ(checkPlanSchedule(plan), "") << scheduleName(kind);
  }
  nlohmann::json j = buildPipelineSchedule(PipelineScheduleKind::OneFOneB, 2, 1, 2).toJson();
  j["actions"][0] = {"F0.0", "B0.0", "F0.1", "B0.1"};
  j["actions"][1] = {"F1.1", "B1.1", "F1.0", "B1.0"};
  plan.training["pipeline"] = j;
  std::string problem = checkPlanSchedule(plan);
  EXPECT_NE(problem.find("would wait forever"), std::string::npos) << problem;
  EXPECT_NE(problem.find("rank 0 waits to receive from rank 1"), std::string::npos) << problem;
  EXPECT_NE(problem.find("B0.0 grad in"), std::string::npos) << problem;
  EXPECT_NE(problem.find("rank 1 waits to receive from rank 0"), std::string::npos) << problem;
  EXPECT_NE(problem.find("F1.1 act in"), std::string::npos) << problem;
  // backward_1 reads what forward_1 hands over: running it first can never proceed.
  j["actions"][0] = {"F0.0", "F0.1", "B0.0", "B0.1"};
  j["actions"][1] = {"F1.0", "F1.1", "B1.0", "B1.1"};
  plan.training["pipeline"] = j;
  EXPECT_EQ(checkPlanSchedule(plan), "");
  plan.inputs[0].program = "forward_1";
  plan.outputs[0].program = "backward_1";
  problem = checkPlanSchedule(plan);
  EXPECT_NE(problem.find("rank 1 waits to receive from rank 1"), std::string::npos) << problem;
}

} // namespace

namespace {

// Tests the forward schedule of a pipelined inference run: every forward in microbatch order,
// no backward and no update (an inference plan has no apply program, and the check asks for
// none); a backward in its lists is refused, and so is a microbatch left without its forward.
TEST(PipelineSchedule, InferenceRunsForwardsAlone) {
  PipelineSchedule s = buildPipelineSchedule(PipelineScheduleKind::Forward, 2, 1, 3);
  EXPECT_TRUE(s.forwardOnly());
  EXPECT_EQ(s.format(), "pipeline rank 0: F0.0 F0.1 F0.2\npipeline rank 1: F1.0 F1.1 F1.2\n");
  EXPECT_EQ(PipelineSchedule::fromJson(s.toJson()).actions, s.actions);
  Plan plan = twoStagePlan();
  plan.mode = PlanMode::Infer;
  plan.programs.erase(std::remove_if(plan.programs.begin(), plan.programs.end(),
                                     [](const RankProgram &p) { return p.phase != ProgramPhase::Forward; }),
                      plan.programs.end());
  plan.inputs.clear();
  plan.outputs.clear();
  plan.inference["pipeline"] = s.toJson();
  EXPECT_EQ(checkPlanSchedule(plan), "");
  auto refusal = [](const nlohmann::json &j) {
    try {
      PipelineSchedule::fromJson(j);
    } catch (const RuntimeError &e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  nlohmann::json j = s.toJson();
  j["actions"][1] = {"F1.0", "B1.0", "F1.1", "F1.2"};
  EXPECT_NE(refusal(j).find("a forward schedule (inference) has no backward"), std::string::npos) << refusal(j);
  j["actions"][1] = {"F1.0", "F1.2"};
  EXPECT_NE(refusal(j).find("without a forward"), std::string::npos) << refusal(j);
}

} // namespace
