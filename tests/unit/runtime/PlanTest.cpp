//===- PlanTest.cpp - plan validation, shard placement, data left in the file ===//
#include "runtime/Plan.h"

#include <gtest/gtest.h>

#include <climits>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <iterator>
#include <memory>
#include <fstream>
#include <limits>
#include <thread>
#include <unistd.h>

using namespace cpc;

namespace {

/// A one-program plan over a 2 x 2 mesh (dp x tp) with one parameter of 8 floats.
Plan meshPlan() {
  Plan plan;
  plan.mode = PlanMode::Train;
  plan.worldSize = 4;
  plan.meshShape = {2, 2};
  plan.meshAxes = {"dp", "tp"};
  BufferDesc param{"w", DType::F32, {8}, BufferKind::Parameter};
  param.trainable = true;
  plan.buffers.push_back(param);
  plan.blob.resize(8 * sizeof(float));
  for (int i = 0; i < 8; ++i)
    reinterpret_cast<float *>(plan.blob.data())[i] = float(i);
  RankProgram program;
  program.rank = -1;
  plan.programs.push_back(program);
  return plan;
}

TEST(PlanTest, ShardIndexAndGroupFollowTheMesh) {
  Plan plan = meshPlan();
  // Rank = dp * 2 + tp; over dp the group of rank 3 is {1, 3}, over both axes all four ranks.
  EXPECT_EQ(plan.shardIndex(3, {"dp"}), 1);
  EXPECT_EQ(plan.shardIndex(3, {"tp"}), 1);
  EXPECT_EQ(plan.shardIndex(2, {"dp", "tp"}), 2);
  EXPECT_EQ(plan.shardGroup(3, {"dp"}), (std::vector<int>{1, 3}));
  EXPECT_EQ(plan.shardGroup(2, {"tp"}), (std::vector<int>{2, 3}));
  EXPECT_EQ(plan.shardGroup(0, {"dp", "tp"}), (std::vector<int>{0, 1, 2, 3}));
  EXPECT_THROW(plan.shardIndex(0, {"pp"}), RuntimeError);
}

TEST(PlanTest, ValidateChecksShardedParameters) {
  Plan plan = meshPlan();
  plan.buffers[0].shape = {4};
  plan.buffers[0].globalShape = {2, 4};
  plan.buffers[0].shardDims = {{"dp"}};
  EXPECT_NO_THROW(plan.validate());
  plan.buffers[0].shape = {3}; // not a half of 8 elements
  EXPECT_THROW(plan.validate(), RuntimeError);
  plan.buffers[0].shape = {4};
  plan.buffers[0].shardDims = {{"pp"}}; // not a mesh axis
  EXPECT_THROW(plan.validate(), RuntimeError);
  plan.buffers[0].shardDims = {{"dp"}};
  plan.buffers[0].globalShape = {4, 4}; // the blob holds 8 elements, not 16
  EXPECT_THROW(plan.validate(), RuntimeError);
}

TEST(PlanTest, ValidateChecksStoredOrders) {
  Plan plan = meshPlan();
  plan.buffers[0].storedView = {2, 4};
  plan.buffers[0].storedPerm = {1, 0};
  EXPECT_NO_THROW(plan.validate());
  plan.buffers[0].storedPerm = {1, 1}; // not a permutation
  EXPECT_THROW(plan.validate(), RuntimeError);
  plan.buffers[0].storedPerm = {1, 0};
  plan.buffers[0].storedView = {3, 4}; // 12 elements, the parameter has 8
  EXPECT_THROW(plan.validate(), RuntimeError);
}

/// Expects validate() to throw a RuntimeError whose message contains `phrase`.
void expectInvalid(const Plan &plan, const std::string &phrase) {
  try {
    plan.validate();
    ADD_FAILURE() << "validate() accepted a plan that should fail with '" << phrase << "'";
  } catch (const RuntimeError &e) {
    EXPECT_NE(std::string(e.what()).find(phrase), std::string::npos) << e.what();
  }
}

// Tests that sizes, offsets and world sizes that would overflow int64 are refused, not wrapped.
TEST(PlanTest, ValidateRefusesSizesThatOverflow) {
  Plan plan = meshPlan();
  plan.buffers[0].shape = {int64_t(1) << 62, 4}; // 2^66 bytes: bytes() would wrap to 0
  expectInvalid(plan, "larger than the largest tensor");
  plan = meshPlan();
  plan.buffers[0].shape = {-8};
  expectInvalid(plan, "negative dim");
  plan = meshPlan();
  plan.buffers[0].offset = INT64_MAX - 16; // offset + bytes wraps past the blob check
  expectInvalid(plan, "lies outside the data blob");
  plan = meshPlan();
  plan.buffers.push_back(BufferDesc{"t", DType::F32, {4}, BufferKind::Arena, INT64_MAX - 8});
  plan.programs[0].arenaBytes = 64;
  expectInvalid(plan, "lies outside the arena");
  plan = meshPlan();
  plan.worldSize = INT32_MAX;
  plan.meshShape = {INT32_MAX};
  plan.meshAxes = {"dp"};
  expectInvalid(plan, "world size");
  plan = meshPlan();
  plan.meshShape = {-2, -2}; // the product matches the world size, the dims do not
  expectInvalid(plan, "mesh dim");
  plan = meshPlan();
  plan.buffers[0].aliasOf = -7;
  expectInvalid(plan, "aliases an invalid buffer");
  plan = meshPlan();
  plan.programs[0].arenaBytes = -1;
  expectInvalid(plan, "negative arena");
}

// Tests that a sharded parameter whose block times the number of parts overflows is refused.
TEST(PlanTest, ValidateRefusesOverflowingShards) {
  Plan plan = meshPlan();
  plan.buffers[0].shape = {int64_t(1) << 45};
  plan.buffers[0].globalShape = {8};
  plan.buffers[0].shardDims = {{"dp"}};
  expectInvalid(plan, "block of its global shape");
}

// Tests that roles of state buffers, runtime inputs and programs survive the plan file, and that
// the runtime finds programs by phase.
TEST(PlanTest, RolesRoundTripThroughTheFile) {
  Plan plan = meshPlan();
  BufferDesc acc{"anything", DType::F32, {8}, BufferKind::State};
  acc.role = VariableRole::GradAccumulator;
  plan.buffers.push_back(acc);
  plan.buffers.push_back(BufferDesc{"lr", DType::F32, {}, BufferKind::Input});
  plan.inputs.push_back({"lr", 2, "update", RuntimeInputKind::LearningRate});
  plan.programs[0].name = "update";
  plan.programs[0].phase = ProgramPhase::Apply;
  std::string path = "/tmp/cpc-plan-roles-" + std::to_string(getpid()) + ".plan";
  writePlan(plan, path);
  Plan read = readPlan(path);
  std::remove(path.c_str());
  EXPECT_EQ(read.buffers[1].role, VariableRole::GradAccumulator);
  EXPECT_EQ(read.buffers[0].role, VariableRole::None);
  EXPECT_EQ(read.inputs[0].runtime, RuntimeInputKind::LearningRate);
  EXPECT_TRUE(read.inputs[0].isRuntime());
  EXPECT_EQ(read.programOfPhase(ProgramPhase::Apply), "update");
  EXPECT_EQ(read.programOfPhase(ProgramPhase::TrainStep), "");
  EXPECT_THROW(parseRole<VariableRole>("grad_acc"), RuntimeError);
  EXPECT_THROW(parseRole<ProgramPhase>("?"), RuntimeError);
}

// Tests that the loss scaler's states keep their roles and initial value through the file, and
// that a non-finite initial value, or one on a buffer that is no state, is refused.
TEST(PlanTest, StateInitialValuesRoundTripAndAreChecked) {
  Plan plan = meshPlan();
  BufferDesc scale{"amp.loss_scale", DType::F32, {}, BufferKind::State};
  scale.role = VariableRole::LossScale;
  scale.init = 65536;
  plan.buffers.push_back(scale);
  BufferDesc tracker{"amp.growth_tracker", DType::F32, {}, BufferKind::State};
  tracker.role = VariableRole::GrowthTracker;
  plan.buffers.push_back(tracker);
  std::string path = "/tmp/cpc-plan-init-" + std::to_string(getpid()) + ".plan";
  writePlan(plan, path);
  Plan read = readPlan(path);
  std::remove(path.c_str());
  EXPECT_EQ(read.buffers[1].role, VariableRole::LossScale);
  EXPECT_EQ(read.buffers[1].init, 65536);
  EXPECT_EQ(read.buffers[2].role, VariableRole::GrowthTracker);
  EXPECT_EQ(read.buffers[2].init, 0);
  EXPECT_EQ(parseRole<VariableRole>("overflow_tracker"), VariableRole::OverflowTracker);
  plan.buffers[1].init = std::numeric_limits<double>::infinity();
  EXPECT_THROW(plan.validate(), RuntimeError);
  plan.buffers[1].init = 1;
  plan.buffers[0].init = 2; // a parameter starts from its blob
  EXPECT_THROW(plan.validate(), RuntimeError);
}

// Tests that a synthetic parameter (cpc compile --synthetic-weights) round-trips with no blob data
// and that only a parameter's own buffer at offset 0 may be one; that its values are the same
// for a name and index, differ between names, and have the standard deviation 0.02.
TEST(PlanTest, SyntheticParametersHaveNoBlobData) {
  Plan plan = meshPlan();
  plan.buffers[0].synthetic = true;
  plan.blob.clear();
  std::string path = "/tmp/cpc-plan-synthetic-" + std::to_string(getpid()) + ".plan";
  writePlan(plan, path);
  Plan read = readPlan(path);
  std::remove(path.c_str());
  EXPECT_TRUE(read.buffers[0].synthetic);
  EXPECT_EQ(read.blobSize(), 0u);
  plan.buffers[0].offset = 64;
  expectInvalid(plan, "is synthetic but is not a parameter's own buffer");
  plan.buffers[0].offset = 0;
  plan.buffers[0].kind = BufferKind::Constant;
  expectInvalid(plan, "is synthetic but is not a parameter's own buffer");

  const uint64_t w = syntheticParameterStream("w");
  EXPECT_EQ(syntheticParameterValue(w, 5), syntheticParameterValue(syntheticParameterStream("w"), 5));
  EXPECT_NE(syntheticParameterValue(w, 5), syntheticParameterValue(syntheticParameterStream("v"), 5));
  const uint64_t qkv = syntheticParameterStream("blocks.0.attn.qkv.weight");
  double sum = 0, squares = 0;
  const int n = 100000;
  for (int i = 0; i < n; ++i) {
    double v = syntheticParameterValue(qkv, i);
    ASSERT_LT(std::abs(v), 0.0347);
    sum += v, squares += v * v;
  }
  EXPECT_NEAR(sum / n, 0.0, 5e-4);
  EXPECT_NEAR(std::sqrt(squares / n), 0.02, 5e-4);
}

/// `bytes` bytes of blob made on demand: byte i is (seed + i) mod 251; counts its fills.
BlobPiece countingPiece(size_t offset, size_t bytes, int seed, std::shared_ptr<int> fills) {
  return BlobPiece{offset, bytes, [=](uint8_t *dst) {
                     ++*fills;
                     for (size_t i = 0; i < bytes; ++i)
                       dst[i] = uint8_t((seed + i) % 251);
                   }};
}

// Tests that a blob kept as pieces is written as the same file as the blob in memory (same
// checksum, zero gaps), and that readBlob makes only the pieces a range touches.
TEST(PlanTest, BlobPiecesStreamIntoTheSameFileAsAnInMemoryBlob) {
  auto fills = std::make_shared<int>(0);
  Plan pieces = meshPlan();
  pieces.blob.clear();
  pieces.blobFromPieces = true;
  // 8 floats of a parameter, then an odd-sized piece after an aligned gap, then padding.
  pieces.blobPieces = {countingPiece(0, 32, 0, fills), countingPiece(64, 13, 7, fills)};
  pieces.blobPiecesSize = 80;
  Plan memory = meshPlan();
  memory.blob.assign(80, 0);
  for (const BlobPiece &p : pieces.blobPieces)
    p.fill(memory.blob.data() + p.offset);
  *fills = 0;
  EXPECT_FALSE(pieces.blobInMemory());
  EXPECT_EQ(pieces.blobSize(), 80u);
  uint8_t window[40];
  pieces.readBlob(30, sizeof window, window); // the end of the first piece, the gap, most of the second
  EXPECT_EQ(*fills, 2);
  EXPECT_EQ(0, std::memcmp(window, memory.blob.data() + 30, sizeof window));
  std::string base = ::testing::TempDir() + "/plan-pieces-" + std::to_string(::getpid());
  writePlan(pieces, base + ".a");
  writePlan(memory, base + ".b");
  std::ifstream a(base + ".a", std::ios::binary), b(base + ".b", std::ios::binary);
  std::string bytesA((std::istreambuf_iterator<char>(a)), {}), bytesB((std::istreambuf_iterator<char>(b)), {});
  EXPECT_EQ(bytesA, bytesB);
  EXPECT_EQ(readPlan(base + ".a").blob, memory.blob);
  // A piece that cannot be made (the model's data unreadable) fails the write and leaves no file.
  pieces.blobPieces[1].fill = [](uint8_t *) { throw RuntimeError("model.onnx: cannot read 'w'"); };
  EXPECT_THROW(writePlan(pieces, base + ".c"), RuntimeError);
  EXPECT_FALSE(std::ifstream(base + ".c").good());
  std::remove((base + ".a").c_str());
  std::remove((base + ".b").c_str());
}

TEST(PlanTest, DataLeftInTheFileIsReadOnDemand) {
  Plan plan = meshPlan();
  std::string path = ::testing::TempDir() + "/plan-test-" + std::to_string(::getpid()) + ".plan";
  writePlan(plan, path);
  Plan lazy = readPlan(path, PlanBlob::InFile);
  EXPECT_TRUE(lazy.blob.empty());
  EXPECT_FALSE(lazy.blobInMemory());
  EXPECT_EQ(lazy.blobSize(), plan.blob.size());
  float values[3] = {};
  lazy.readBlob(4 * sizeof(float), sizeof values, values);
  EXPECT_EQ(values[0], 4.f);
  EXPECT_EQ(values[2], 6.f);
  EXPECT_THROW(lazy.readBlob(7 * sizeof(float), 8, values), RuntimeError); // past the end
  EXPECT_THROW(writePlan(lazy, path + ".copy"), RuntimeError);             // no data to write
  // A plan rewritten after it was verified is refused rather than read unchecked.
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  plan.blob[0] ^= 1;
  writePlan(plan, path);
  EXPECT_THROW(lazy.readBlob(0, 4, values), RuntimeError);
  std::remove(path.c_str());
}

} // namespace

namespace {

// Tests programs scoped to mesh coordinates (a pipeline stage: the ranks at pp = s, whatever
// their dp coordinate): which ranks run them, the file round trip, and validation.
TEST(PlanTest, ProgramsAtMeshCoordinatesRunOnThoseRanks) {
  Plan plan = meshPlan();
  plan.meshAxes = {"dp", "pp"};
  plan.programs[0].name = "stage0";
  plan.programs[0].coordinates = {{"pp", 0}};
  RankProgram second = plan.programs[0];
  second.name = "stage1";
  second.coordinates = {{"pp", 1}};
  plan.programs.push_back(second);
  // Rank = dp * 2 + pp.
  EXPECT_TRUE(plan.runsOn(plan.programs[0], 0));
  EXPECT_TRUE(plan.runsOn(plan.programs[0], 2));
  EXPECT_FALSE(plan.runsOn(plan.programs[0], 1));
  EXPECT_TRUE(plan.runsOn(plan.programs[1], 3));
  EXPECT_FALSE(plan.runsOn(plan.programs[1], 2));
  std::string path = "/tmp/cpc-plan-stages-" + std::to_string(getpid()) + ".plan";
  writePlan(plan, path);
  Plan read = readPlan(path);
  std::remove(path.c_str());
  ASSERT_EQ(read.programs.size(), 2u);
  EXPECT_EQ(read.programs[1].coordinates, (std::vector<std::pair<std::string, int64_t>>{{"pp", 1}}));
  EXPECT_TRUE(read.runsOn(read.programs[1], 1));
  plan.programs[1].coordinates = {{"pp", 2}};
  EXPECT_THROW(plan.validate(), RuntimeError);
  plan.programs[1].coordinates = {{"tp", 0}};
  EXPECT_THROW(plan.validate(), RuntimeError);
}

} // namespace
