//===- BlocksTest.cpp - blocks of split tensors, stored element orders ----===//
#include "runtime/Blocks.h"
#include "runtime/Plan.h"

#include <gtest/gtest.h>

#include <numeric>

using namespace cpc;

namespace {

std::vector<float> iota(size_t n) {
  std::vector<float> v(n);
  std::iota(v.begin(), v.end(), 0.f);
  return v;
}

// Tests that each rank of a 2 x 2 mesh gets its block of a [4, 6] tensor split over dp along
// dim 0 and tp along dim 1, and that writing the blocks back rebuilds the tensor.
TEST(BlocksTest, BlocksOfADimByDimSplitRebuildTheWhole) {
  std::vector<int64_t> mesh = {2, 2};
  std::vector<std::string> axes = {"dp", "tp"};
  std::vector<std::vector<std::string>> dims = {{"dp"}, {"tp"}};
  std::vector<float> whole = iota(24), back(24, -1);
  for (int rank = 0; rank < 4; ++rank) {
    std::vector<int64_t> starts = blockStarts(mesh, axes, rank, dims, {2, 3});
    EXPECT_EQ(starts, (std::vector<int64_t>{2 * (rank / 2), 3 * (rank % 2)}));
    std::vector<float> block(6);
    copyBlock(whole.data(), {4, 6}, block.data(), {2, 3}, starts, sizeof(float), true);
    EXPECT_EQ(block[0], float(starts[0] * 6 + starts[1]));
    EXPECT_EQ(block[5], float((starts[0] + 1) * 6 + starts[1] + 2));
    copyBlock(back.data(), {4, 6}, block.data(), {2, 3}, starts, sizeof(float), false);
  }
  EXPECT_EQ(back, whole);
}

// Tests that a dim split over two axes numbers its blocks major (dp) to minor (tp).
TEST(BlocksTest, TwoAxesOnOneDimAreMajorToMinor) {
  std::vector<int64_t> starts = blockStarts({2, 2}, {"dp", "tp"}, 1, {{"dp", "tp"}}, {2});
  EXPECT_EQ(starts, (std::vector<int64_t>{2}));
  starts = blockStarts({2, 2}, {"dp", "tp"}, 2, {{"dp", "tp"}}, {2});
  EXPECT_EQ(starts, (std::vector<int64_t>{4}));
}

// Tests the head-major order of a fused qkv weight: rows [3, H=2, Dh=2] stored as [H, 3, Dh]
// (view [3, 2, 2, 1], perm [1, 0, 2, 3]); the inverse gives the model's order back.
TEST(BlocksTest, StoredOrderPermutesAndUndoes) {
  std::vector<float> model = iota(12), stored(12), back(12);
  permuteElements(model.data(), stored.data(), {3, 2, 2, 1}, {1, 0, 2, 3}, sizeof(float), false);
  // Head 0: q rows 0-1, k rows 4-5, v rows 8-9; then head 1.
  EXPECT_EQ(stored, (std::vector<float>{0, 1, 4, 5, 8, 9, 2, 3, 6, 7, 10, 11}));
  permuteElements(stored.data(), back.data(), {3, 2, 2, 1}, {1, 0, 2, 3}, sizeof(float), true);
  EXPECT_EQ(back, model);
}

} // namespace
