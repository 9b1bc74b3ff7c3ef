//===- CostProfileTest.cpp - the cost model: profile files and predicted steps ===//
#include "runtime/CostProfile.h"
#include "runtime/PipelineSchedule.h"
#include "runtime/StepTime.h"

#include <gtest/gtest.h>

using namespace cpc;

namespace {

std::string refusal(const nlohmann::json &j) {
  try {
    CostProfile::fromJson(j, "p.json");
  } catch (const RuntimeError &e) {
    return e.what();
  }
  return "accepted";
}

// Tests a throughput's log-log interpolation: exact at its points, between them on the line in
// log space, held beyond the ends.
TEST(CostProfile, ThroughputInterpolatesInLogSpace) {
  Throughput t{{{1e3, 1e9}, {1e5, 1e11}}};
  EXPECT_DOUBLE_EQ(t.at(1e3), 1e9);
  EXPECT_NEAR(t.at(1e4), 1e10, 1);
  EXPECT_DOUBLE_EQ(t.at(1), 1e9);
  EXPECT_DOUBLE_EQ(t.at(1e9), 1e11);
}

// Tests the GEMM grid: a measured shape gets its own rate, a shape between two sizes a rate
// between theirs, one beyond the grid the edge's; a GEMM is never faster than its bytes at
// memory speed.
TEST(CostProfile, GemmGridPricesByShape) {
  CostProfile p = CostProfile::builtIn();
  p.gemmGrid.sizes = {16, 256};
  // Rate 1e9 x (1 + index) over (m, n, k) in m-major order: skinny m = 16 is slow.
  for (int i = 0; i < 8; ++i)
    p.gemmGrid.flopsPerSecond.push_back(1e9 * (1 + i));
  EXPECT_NEAR(p.gemmGrid.at({1, 16, 16, 16}), 1e9, 1);
  EXPECT_NEAR(p.gemmGrid.at({1, 256, 256, 256}), 8e9, 1);
  EXPECT_NEAR(p.gemmGrid.at({1, 4096, 256, 256}), 8e9, 1);
  double middle = p.gemmGrid.at({1, 64, 16, 16}); // halfway in log space between m = 16 and 256
  EXPECT_NEAR(middle, std::sqrt(1e9 * 5e9), 1e3);
  GemmDims g{2, 256, 256, 256};
  EXPECT_NEAR(p.gemmSeconds(g, 0), g.flops() / 8e9, 1e-12);
  EXPECT_DOUBLE_EQ(p.gemmSeconds({1, 16, 16, 16}, 4e12), 4e12 / 4e9); // memory bound
}

// Tests the file form: a round trip keeps every rate; a collective of an unmeasured size takes
// the nearest measured one; bad files are refused naming the file and the key.
TEST(CostProfile, FileFormAndRefusals) {
  CostProfile p = CostProfile::builtIn();
  p.machine = "test";
  p.compute[CostClass::Memory] = {{{100, 5e9}, {1e6, 2e9}}};
  p.gemmGrid = {{32}, {7e10}};
  p.collectives["all_reduce"][2] = {1e-5, 2e9};
  p.collectives["all_reduce"][8] = {3e-5, 1e9};
  CostProfile q = CostProfile::fromJson(p.toJson(), "p.json");
  EXPECT_EQ(q.source, "p.json");
  EXPECT_EQ(q.compute[CostClass::Memory].points, p.compute[CostClass::Memory].points);
  EXPECT_EQ(q.gemmGrid.flopsPerSecond, p.gemmGrid.flopsPerSecond);
  EXPECT_DOUBLE_EQ(q.collectiveSeconds("all_reduce", 2, 2e9), 1e-5 + 1);
  EXPECT_DOUBLE_EQ(q.collectiveSeconds("all_reduce", 6, 1e9), 3e-5 + 1); // nearest: 8
  EXPECT_DOUBLE_EQ(q.collectiveSeconds("all_gather", 2, 4e9), 20e-6 + 1); // the default link
  nlohmann::json good = p.toJson();
  EXPECT_NE(refusal({{"format", "other"}}).find("p.json: not a cpc cost profile"), std::string::npos);
  nlohmann::json bad = good;
  bad["compute"]["gemm"] = {{2, 1e9}, {1, 2e9}};
  EXPECT_NE(refusal(bad).find("p.json: key 'compute.gemm': the points must ascend"), std::string::npos);
  bad = good;
  bad["compute"]["vector"] = {{1, 1}};
  EXPECT_NE(refusal(bad).find("key 'compute.vector': unknown class"), std::string::npos);
  bad = good;
  bad["collectives"]["all_reduce"]["two"] = {{"latency_s", 1e-5}, {"bytes_per_s", 1e9}};
  EXPECT_NE(refusal(bad).find("key 'collectives.all_reduce.two'"), std::string::npos);
  bad = good;
  bad["link"]["bytes_per_s"] = -1;
  EXPECT_NE(refusal(bad).find("key 'link': key 'bytes_per_s' must be a positive number"), std::string::npos);
  bad = good;
  bad["compute"]["gemm_grid"]["flops_per_s"] = {1.0, 2.0};
  EXPECT_NE(refusal(bad).find("needs sizes^3 rates"), std::string::npos);
}

/// A two-stage inference pipeline: each stage one forward program of one GEMM step of `flops`
/// FLOPs (priced by the built-in 40 GFLOP/s), stage 0 sending its activation to stage 1.
Plan twoStageInference(int64_t flops0, int64_t flops1, int64_t microbatches) {
  Plan plan;
  plan.mode = PlanMode::Infer;
  plan.worldSize = 2;
  plan.meshShape = {2};
  plan.meshAxes = {"pp"};
  plan.buffers.push_back({"act", DType::F32, {1}, BufferKind::Arena});
  for (int64_t stage = 0; stage < 2; ++stage) {
    RankProgram p;
    p.rank = -1;
    p.coordinates = {{"pp", stage}};
    p.name = "forward_" + std::to_string(stage);
    p.phase = ProgramPhase::Forward;
    p.chunk = stage;
    StepDesc gemm{OpKind::MatMul, {}, {}, nlohmann::json::object(), "gemm"};
    gemm.cost = CostClass::Gemm;
    gemm.flops = stage == 0 ? flops0 : flops1;
    p.steps.push_back(gemm);
    plan.programs.push_back(p);
  }
  plan.inference["microbatches"] = microbatches;
  plan.inference["pipeline"] = buildPipelineSchedule(PipelineScheduleKind::Forward, 2, 1, microbatches).toJson();
  return plan;
}

// Tests the pipeline simulation: with equal stages of time t and M microbatches the step takes
// (M + 1) t and each rank idles t (the bubble (P-1)/(M+P-1) of the step); a slower second stage
// sets the pace and the first rank ends early.
TEST(StepTime, SimulatesThePipelineSchedule) {
  double t = 40e9 * 1e-3; // FLOPs of one millisecond at the built-in rate
  std::vector<PredictedTime> equal = predictStepTime(twoStageInference(t, t, 4), CostProfile::builtIn());
  ASSERT_EQ(equal.size(), 2u);
  EXPECT_NEAR(equal[0].compute, 4e-3, 1e-12);
  EXPECT_NEAR(equal[0].idle, 0, 1e-12);
  EXPECT_NEAR(equal[1].idle, 1e-3, 1e-12);
  EXPECT_NEAR(slowestRank(equal).total(), 5e-3, 1e-12);
  EXPECT_NEAR(slowestRank(equal).idle / slowestRank(equal).total(), 1.0 / 5.0, 1e-12);
  std::vector<PredictedTime> uneven = predictStepTime(twoStageInference(t, 2 * t, 4), CostProfile::builtIn());
  EXPECT_NEAR(uneven[1].total(), 1e-3 + 4 * 2e-3, 1e-12);
  EXPECT_NEAR(uneven[0].total(), 4e-3, 1e-12);
  nlohmann::json j = predictedStepJson(twoStageInference(t, t, 4), CostProfile::builtIn());
  EXPECT_EQ(j["profile"], "built-in");
  EXPECT_EQ(j["per_rank_s"].size(), 2u);
}

// Tests that a pipeline program pays for the hand-overs the runtime copies around it: 1000
// floats kept by stage 0's forward for a later program cost a read and a write of 4000 B at
// the built-in 4 GB/s in each of the 4 microbatches.
TEST(StepTime, PricesTheHandOverCopies) {
  double t = 40e9 * 1e-3;
  Plan plan = twoStageInference(t, t, 4);
  plan.buffers.push_back({"kept", DType::F32, {1000}, BufferKind::Arena});
  NamedBuffer kept;
  kept.name = "kept";
  kept.buffer = (int)plan.buffers.size() - 1;
  kept.program = "forward_0";
  kept.transfer = 0;
  plan.outputs.push_back(kept);
  std::vector<PredictedTime> ranks = predictStepTime(plan, CostProfile::builtIn());
  EXPECT_NEAR(ranks[0].compute, 4e-3 + 4 * (2 * 4000 / 4e9), 1e-12);
  EXPECT_NEAR(ranks[1].compute, 4e-3, 1e-12);
}

} // namespace
