//===- ModelStateTest.cpp - model-state bytes against the ZeRO formulas ---===//
#include "runtime/ModelState.h"

#include <gtest/gtest.h>

using namespace cpc;

namespace {

/// A training plan for 2 ranks with one trainable parameter of `n` elements laid out as ZeRO
/// `stage` would: its (block of) parameter, moments, and one adamw step reading a gradient.
Plan zeroPlan(int stage, int64_t n, int64_t ranks) {
  Plan plan;
  plan.mode = PlanMode::Train;
  plan.worldSize = ranks;
  plan.meshShape = {ranks};
  plan.meshAxes = {"dp"};
  plan.training = {{"zero", stage}, {"data_parallel", ranks}, {"batch_axes", {"dp"}}};
  bool sharded = stage > 0 && n % ranks == 0;
  int64_t block = sharded ? n / ranks : n;
  auto add = [&](BufferDesc b) {
    plan.buffers.push_back(b);
    return (int)plan.buffers.size() - 1;
  };
  BufferDesc param{"w", DType::F32, {stage == 3 && sharded ? block : n}, BufferKind::Parameter};
  param.trainable = true;
  if (stage == 3 && sharded) {
    param.globalShape = {n};
    param.shardDims = {{"dp"}};
  }
  int p = add(param);
  int frozen = add({"frozen", DType::F32, {7}, BufferKind::Parameter});
  // Roles, not names, make these optimizer states: the names say nothing to the count.
  BufferDesc mDesc{"m", DType::F32, {block}, BufferKind::State}, vDesc{"v", DType::F32, {block}, BufferKind::State};
  mDesc.role = VariableRole::ExpAvg;
  vDesc.role = VariableRole::ExpAvgSq;
  if (sharded)
    for (BufferDesc *d : {&mDesc, &vDesc}) {
      d->globalShape = {n};
      d->shardDims = {{"dp"}};
    }
  int m = add(mDesc);
  int v = add(vDesc);
  int whole = add({"grad", DType::F32, {n}, BufferKind::Arena});
  int grad = whole;
  RankProgram program;
  program.rank = -1;
  program.name = "train_step";
  if (sharded && stage == 1) { // ZeRO-1 slices the whole gradient right before the update
    grad = add({"grad.block", DType::F32, {block}, BufferKind::Arena});
    program.steps.push_back({OpKind::ShardSlice, {whole}, {grad}, nlohmann::json::object(), "slice"});
  } else if (sharded) { // ZeRO-2/3 reduce-scatter it
    grad = add({"grad.block", DType::F32, {block}, BufferKind::Arena});
    program.steps.push_back({OpKind::ReduceScatter, {whole}, {grad}, nlohmann::json::object(), "rs"});
  }
  program.steps.push_back({OpKind::AdamW, {p, grad, m, v}, {p, m, v}, nlohmann::json::object(), "adamw"});
  // A rank counts what its programs use: the frozen parameter is read (by the forward).
  int scaled = add({"scaled", DType::F32, {7}, BufferKind::Arena});
  program.steps.push_back({OpKind::Neg, {frozen}, {scaled}, nlohmann::json::object(), "forward"});
  plan.programs.push_back(program);
  return plan;
}

TEST(ModelStateTest, EachStageMatchesItsFormula) {
  const int64_t n = 1000, ranks = 4;
  const int64_t expected[] = {16 * n, 8 * n + 8 * n / ranks, 4 * n + 12 * n / ranks, 16 * n / ranks};
  for (int stage = 0; stage <= 3; ++stage) {
    ModelStateBytes m = modelStateBytes(zeroPlan(stage, n, ranks));
    EXPECT_EQ(m.trainableElements, n) << "stage " << stage;
    EXPECT_EQ(m.frozenParameters, 7 * 4) << "stage " << stage;
    EXPECT_EQ(m.total(), expected[stage]) << "stage " << stage;
    EXPECT_EQ(m.formula(), expected[stage]) << "stage " << stage;
  }
}

TEST(ModelStateTest, ParametersKeptWholeCountSixteenBytesEach) {
  // 1001 elements do not divide by 4 ranks: ZeRO keeps this parameter's optimizer whole.
  for (int stage = 1; stage <= 3; ++stage) {
    ModelStateBytes m = modelStateBytes(zeroPlan(stage, 1001, 4));
    EXPECT_EQ(m.shardableElements, 0);
    EXPECT_EQ(m.total(), 16 * 1001) << "stage " << stage;
    EXPECT_EQ(m.formula(), 16 * 1001) << "stage " << stage;
  }
}

TEST(ModelStateTest, SummaryNamesTheStageAndFormula) {
  std::string line = modelStateBytes(zeroPlan(3, 1000, 4)).summary();
  EXPECT_NE(line.find("ZeRO-3 formula"), std::string::npos) << line;
  EXPECT_NE(line.find("4000 B"), std::string::npos) << line;
}

// Tests DeepSpeed's mixed-precision formulas (K = 12: 16-bit parameters and gradients, f32
// master weights and moments) and that a mixed-precision plan's line names them and the 16-bit
// copies its programs cast from the trainable parameters.
TEST(ModelStateTest, MixedPrecisionFormulas) {
  const int64_t n = 1000, ranks = 4;
  const int64_t expected[] = {16 * n, 4 * n + 12 * n / ranks, 2 * n + 14 * n / ranks, 16 * n / ranks};
  for (int stage = 0; stage <= 3; ++stage)
    EXPECT_EQ(modelStateBytes(zeroPlan(stage, n, ranks)).mixedPrecisionFormula(), expected[stage]) << stage;
  Plan plan = zeroPlan(0, n, ranks);
  plan.training["recipe"] = {{"precision", "bf16"}};
  plan.buffers.push_back({"w.bf16", DType::BF16, {n}, BufferKind::Arena});
  StepDesc cast;
  cast.op = OpKind::Cast;
  cast.inputs = {0};
  cast.outputs = {(int)plan.buffers.size() - 1};
  plan.programs[0].steps.push_back(cast);
  ModelStateBytes m = modelStateBytes(plan);
  EXPECT_EQ(m.precision, "bf16");
  EXPECT_EQ(m.lowPrecisionCopies, 2 * n);
  std::string line = m.summary();
  EXPECT_NE(line.find("16-bit copies of 2000 B"), std::string::npos) << line;
  EXPECT_NE(line.find("mixed-precision ZeRO-0 formula 16000 B"), std::string::npos) << line;
}

} // namespace
