//===- GemmTest.cpp - GEMMs split over the pool: the split, and its results ---===//
#include "kernels/cpu/Gemm.h"
#include "tests/unit/TestUtil.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>

using namespace cpc::kernels;
using cpc::test::randomFloats;

namespace {

// Tests that small GEMMs stay on one thread and large ones are cut along their longer side in
// aligned blocks that cover it exactly.
TEST(GemmSplitTest, CutsTheLongerSideInAlignedBlocksWhenWorkPays) {
  EXPECT_EQ(gemmSplit(64, 64, 64, 2).parts, 1); // 256K multiply-adds: not worth a thread
  EXPECT_EQ(gemmSplit(4096, 4096, 4096, 1).parts, 1);
  GemmSplit rows = gemmSplit(800, 384, 1536, 2);
  EXPECT_EQ(rows.parts, 2);
  EXPECT_TRUE(rows.rows);
  EXPECT_EQ(rows.block % kGemmBlockAlign, 0);
  EXPECT_GE(rows.block * rows.parts, 800);
  EXPECT_LT(rows.block * (rows.parts - 1), 800);
  GemmSplit cols = gemmSplit(100, 3072, 768, 2); // MAE-base batch 2: few rows, wide weights
  EXPECT_EQ(cols.parts, 2);
  EXPECT_FALSE(cols.rows);
  EXPECT_EQ(gemmSplit(17, 8, 100000, 4).parts, 1); // one aligned block of rows only
  EXPECT_EQ(gemmSplit(100, 3072, 768, 16).parts, 16);
}

struct GemmCase {
  bool tA, tB;
  int64_t M, N, K;
};

class GemmThreadsTest : public ::testing::TestWithParam<GemmCase> {};

// Tests that a GEMM run on 2 and 3 threads gives the 1-thread result bit for bit (the blocks run
// the same micro-kernels on the same data), and that the 1-thread result is the product.
TEST_P(GemmThreadsTest, ThreadCountDoesNotChangeTheResult) {
  GemmCase c = GetParam();
  std::vector<float> A = randomFloats(c.M * c.K, 1), B = randomFloats(c.K * c.N, 2), C0 = randomFloats(c.M * c.N, 3);
  Gemm<float> g{c.tA, c.tB, c.M, c.N, c.K, A.data(), c.tA ? c.M : c.K, B.data(), c.tB ? c.K : c.N, 0.5f, nullptr, c.N};
  std::vector<float> one = C0;
  g.C = one.data();
  gemm(g, 1);
  for (int threads : {2, 3}) {
    std::vector<float> many = C0;
    g.C = many.data();
    gemm(g, threads);
    ASSERT_EQ(many, one) << threads << " threads";
  }
  for (int64_t m = 0; m < c.M; m += 7)
    for (int64_t n = 0; n < c.N; n += 5) {
      double want = 0.5 * C0[m * c.N + n];
      for (int64_t k = 0; k < c.K; ++k)
        want += (double)A[c.tA ? k * c.M + m : m * c.K + k] * B[c.tB ? n * c.K + k : k * c.N + n];
      ASSERT_NEAR(one[m * c.N + n], want, 1e-4 * std::max(1.0, std::fabs(want))) << m << "," << n;
    }
}

INSTANTIATE_TEST_SUITE_P(Shapes, GemmThreadsTest,
                         ::testing::Values(GemmCase{false, false, 803, 129, 700}, GemmCase{true, false, 803, 129, 700},
                                           GemmCase{false, true, 61, 1000, 300}, GemmCase{true, true, 61, 1000, 300},
                                           GemmCase{false, false, 5, 3, 2}));

// Tests that a batch of small GEMMs spread whole over threads gives the serial results.
TEST(GemmBatchTest, ManySmallGemmsMatchSerial) {
  const int64_t batch = 24, M = 50, N = 50, K = 64;
  std::vector<float> A = randomFloats(batch * M * K, 4), B = randomFloats(batch * K * N, 5);
  std::vector<float> serial(batch * M * N), threaded(batch * M * N, 7.0f);
  std::vector<Gemm<float>> gemms;
  for (int64_t b = 0; b < batch; ++b)
    gemms.push_back(Gemm<float>{false, true, M, N, K, A.data() + b * M * K, K, B.data() + b * K * N, K, 0.0f,
                                serial.data() + b * M * N, N});
  gemmBatch(gemms, 1);
  for (int64_t b = 0; b < batch; ++b)
    gemms[b].C = threaded.data() + b * M * N;
  gemmBatch(gemms, 2);
  EXPECT_EQ(threaded, serial);
}

} // namespace
