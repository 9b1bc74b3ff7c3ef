//===- GemmTest.cpp - GEMMs split over the pool: the split, and its results ---===//
#include "kernels/cpu/Gemm.h"
#include "tests/unit/TestUtil.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <string>
#include <random>
#include <tuple>

using namespace cpc::kernels;
using cpc::test::randomFloats;
using cpc::test::uniformValues;

namespace {

// openblas_get_config() of Debian 12's library.
constexpr const char *kDebianConfig = "OpenBLAS 0.3.21 NO_LAPACKE DYNAMIC_ARCH NO_AFFINITY SkylakeX MAX_THREADS=64";
const GemmCutRule kUniform = gemmCutRuleFor(kDebianConfig, "SkylakeX", false);
const GemmCutRule kHaswellSingle = gemmCutRuleFor(kDebianConfig, "Haswell", false);
const GemmCutRule kSkylakeDouble = gemmCutRuleFor(kDebianConfig, "SkylakeX", true);

bool onGrid(const GemmSplit &split, int64_t align) {
  for (size_t i = 1; i + 1 < split.bounds.size(); ++i)
    if (split.bounds[i] % align)
      return false;
  return true;
}

// Tests that OpenBLAS runs the core that OPENBLAS_CORETYPE names (the per-core runs of
// tests/e2e/test_gemm_every_core.py set it), so that those runs test what they say.
TEST(GemmCoreTest, RunsTheRequestedCore) {
  std::string running = openBlasDescription();
  if (!gemmCutRule(false).known || !gemmCutRule(true).known)
    GTEST_SKIP() << running << " is not one whose cut points cpc knows: nothing is cut";
  const char *want = std::getenv("OPENBLAS_CORETYPE");
  if (!want || !*want)
    GTEST_SKIP() << "OPENBLAS_CORETYPE is not set: " << running;
  EXPECT_NE(running.find(std::string("(core ") + want + ")"), std::string::npos) << running;
}

// Tests which OpenBLAS builds cpc knows the cut points of: 0.3.21's x86-64 cores; Haswell's and
// Zen's SGEMM (not DGEMM) cut columns only at whole panels.
TEST(GemmCutRuleTest, KnowsOpenBlas0321CoresOnly) {
  EXPECT_TRUE(kUniform.known);
  EXPECT_EQ(kUniform.colAlign, kGemmColAlign);
  EXPECT_EQ(kUniform.colTailUnroll, 0);
  EXPECT_TRUE(kHaswellSingle.known);
  EXPECT_EQ(kHaswellSingle.colAlign, 320);
  EXPECT_EQ(gemmCutRuleFor(kDebianConfig, "Zen", false).colAlign, 320);
  EXPECT_EQ(gemmCutRuleFor(kDebianConfig, "Haswell", true).colAlign, kGemmColAlign);
  EXPECT_EQ(kSkylakeDouble.colPanel, 192);
  EXPECT_EQ(gemmCutRuleFor(kDebianConfig, "Cooperlake", true).colTailUnroll, 8);
  EXPECT_FALSE(gemmCutRuleFor("OpenBLAS 0.3.26 NO_LAPACKE DYNAMIC_ARCH NO_AFFINITY Haswell", "Haswell", false).known);
  EXPECT_FALSE(gemmCutRuleFor("OpenBLAS 0.3.21 NO_LAPACKE SKYLAKEX MAX_THREADS=64", "SkylakeX", false).known);
  EXPECT_FALSE(gemmCutRuleFor(kDebianConfig, "SapphireRapids", false).known);
  EXPECT_FALSE(gemmCutRuleFor(kDebianConfig, "", false).known);
}

// Tests that small GEMMs stay on one thread, that large ones are cut into blocks that cover C on
// the rule's grid, each of kGemmMinBlockWork or more, and that an unknown OpenBLAS cuts nothing.
TEST(GemmSplitTest, CutsOnTheGridWhenWorkPays) {
  EXPECT_EQ(gemmSplit(64, 64, 64, 2, kUniform).parts(), 1); // 256K multiply-adds: not worth a thread
  EXPECT_EQ(gemmSplit(4096, 4096, 4096, 1, kUniform).parts(), 1);
  EXPECT_EQ(gemmSplit(960, 384, 1536, 2, GemmCutRule{}).parts(), 1);
  GemmSplit rows = gemmSplit(960, 384, 1536, 2, kUniform);
  EXPECT_EQ(rows.parts(), 2);
  EXPECT_TRUE(rows.rows);
  EXPECT_TRUE(onGrid(rows, kGemmRowAlign));
  EXPECT_EQ(rows.bounds.front(), 0);
  EXPECT_EQ(rows.bounds, (std::vector<int64_t>{0, 480, 960}));
  EXPECT_TRUE(gemmSplit(800, 384, 1536, 2, kUniform).rows); // 408 + 392 rows: the longer side still
  EXPECT_FALSE(gemmSplit(34, 32, 100000, 2, kUniform).rows); // 24 + 10 rows: columns 16 + 16 are evener
  GemmSplit cols = gemmSplit(100, 3072, 768, 2, kUniform); // MAE-base batch 2: few rows, wide weights
  EXPECT_EQ(cols.parts(), 2);
  EXPECT_FALSE(cols.rows);
  EXPECT_TRUE(onGrid(cols, kGemmColAlign));
  EXPECT_EQ(gemmSplit(17, 8, 100000, 4, kUniform).parts(), 1); // too few rows and columns to cut
  EXPECT_EQ(gemmSplit(100, 3072, 768, 16, kUniform).parts(), 16);
  for (int threads : {2, 3, 5, 16})
    for (auto [M, N, K] : {std::tuple<int64_t, int64_t, int64_t>{803, 129, 700}, {61, 1000, 300}, {250, 40, 120}}) {
      GemmSplit s = gemmSplit(M, N, K, threads, kUniform);
      for (int p = 0; p < s.parts(); ++p)
        EXPECT_GE((s.bounds[p + 1] - s.bounds[p]) * (s.rows ? N : M) * K, kGemmMinBlockWork) << M << "x" << N;
    }
}

// Tests Haswell's SGEMM rule: columns at whole 320-column panels with a panel after the last cut,
// and only when a row remainder of at most 4 follows the last 12-row tile; else rows.
TEST(GemmSplitTest, HaswellSingleCutsColumnsAtWholePanels) {
  GemmSplit cols = gemmSplit(16, 1000, 300, 2, kHaswellSingle);
  EXPECT_FALSE(cols.rows);
  EXPECT_EQ(cols.bounds, (std::vector<int64_t>{0, 640, 1000}));
  EXPECT_EQ(gemmSplit(16, 1000, 300, 3, kHaswellSingle).bounds, (std::vector<int64_t>{0, 320, 640, 1000}));
  EXPECT_EQ(gemmSplit(22, 1000, 300, 2, kHaswellSingle).parts(), 1); // 22 % 12 = 10 rows after the tiles
  EXPECT_EQ(gemmSplit(22, 1000, 300, 2, kUniform).parts(), 2);
  EXPECT_EQ(gemmSplit(16, 600, 300, 2, kHaswellSingle).parts(), 1); // no whole panel after a cut at 320
  EXPECT_TRUE(gemmSplit(70, 1100, 300, 2, kHaswellSingle).rows);
}

// Tests SkylakeX's DGEMM rule: with N % 8 != 0 and N > 192, more than 192 columns after the
// last cut; otherwise columns as everywhere.
TEST(GemmSplitTest, SkylakeDoubleKeepsTheTailColumnsInALaterPanel) {
  GemmSplit tail = gemmSplit(20, 300, 2000, 2, kSkylakeDouble); // 20 rows: too few to cut
  EXPECT_FALSE(tail.rows);
  EXPECT_EQ(tail.bounds, (std::vector<int64_t>{0, 96, 300})); // 204 > 192 columns after the cut
  EXPECT_EQ(gemmSplit(20, 300, 2000, 2, kUniform).bounds, (std::vector<int64_t>{0, 144, 300}));
  EXPECT_TRUE(gemmSplit(64, 300, 300, 2, kSkylakeDouble).rows); // 96 + 204 columns: rows are evener
  EXPECT_EQ(gemmSplit(64, 304, 300, 2, kSkylakeDouble).bounds, (std::vector<int64_t>{0, 160, 304})); // N % 8 == 0
  EXPECT_EQ(gemmSplit(40, 180, 3000, 2, kSkylakeDouble).bounds, (std::vector<int64_t>{0, 96, 180})); // one panel
}

// Tests gemmSplit's promises on random shapes, thread counts and every rule: bounds increase
// from 0 to the extent, at most `threads` blocks, each of kGemmMinBlockWork or more, cuts on the
// rule's grid and leaving what it asks after the last; Haswell's columns only after short tails.
TEST(GemmSplitTest, RandomShapesKeepEveryRule) {
  std::mt19937 rng(29);
  std::uniform_int_distribution<int64_t> side(1, 2000), depth(1, 800);
  int cutRows = 0, cutCols = 0;
  for (int trial = 0; trial < 3000; ++trial) {
    int64_t M = side(rng), N = side(rng), K = depth(rng);
    int threads = 2 + trial % 7;
    for (const GemmCutRule *rule : {&kUniform, &kHaswellSingle, &kSkylakeDouble}) {
      GemmSplit s = gemmSplit(M, N, K, threads, *rule);
      int64_t extent = s.rows ? M : N, other = s.rows ? N : M;
      ASSERT_EQ(s.bounds.front(), 0);
      ASSERT_EQ(s.bounds.back(), extent);
      ASSERT_LE(s.parts(), threads);
      if (s.parts() == 1)
        continue;
      (s.rows ? cutRows : cutCols)++;
      for (int p = 0; p < s.parts(); ++p) {
        ASSERT_LT(s.bounds[p], s.bounds[p + 1]);
        ASSERT_GE((s.bounds[p + 1] - s.bounds[p]) * other * K, kGemmMinBlockWork);
      }
      int64_t align = s.rows ? kGemmRowAlign : rule->colAlign;
      for (int p = 1; p < s.parts(); ++p)
        ASSERT_EQ(s.bounds[p] % align, 0) << M << "x" << N << "x" << K;
      if (s.rows)
        continue;
      int64_t after = N - s.bounds[s.parts() - 1];
      ASSERT_GE(after, rule->colLastAtLeast);
      if (rule->colTileRows)
        ASSERT_LE(M % rule->colTileRows, rule->colTailRows);
      if (rule->colTailUnroll && N % rule->colTailUnroll && N > rule->colPanel)
        ASSERT_GT(after, rule->colPanel) << M << "x" << N << "x" << K;
    }
  }
  EXPECT_GT(cutRows, 100);
  EXPECT_GT(cutCols, 100);
}

// Tests the row panels a staging kernel may use: on the row grid, inside row chunks, each big
// enough, covering every row.
TEST(GemmSplitTest, RowPanelsAreCutsOfTheWholeCall) {
  for (auto [M, N, K] : {std::tuple<int64_t, int64_t, int64_t>{300, 24, 40}, {17000, 64, 64}, {200, 6000, 1}, {5, 3, 2}}) {
    std::vector<int64_t> p = gemmRowPanels(M, N, K, 128);
    ASSERT_EQ(p.front(), 0);
    ASSERT_EQ(p.back(), M);
    for (size_t i = 1; i < p.size(); ++i) {
      EXPECT_GT(p[i], p[i - 1]);
      int64_t chunk = p[i - 1] / kGemmRowChunk * kGemmRowChunk;
      EXPECT_LE(p[i], chunk + kGemmRowChunk) << "panel crosses a row chunk";
      if (i + 1 < p.size() && p[i] % kGemmRowChunk) {
        EXPECT_EQ((p[i] - chunk) % kGemmRowAlign, 0);
      }
      bool wholeChunk = p[i] - p[i - 1] == std::min(kGemmRowChunk, M - chunk);
      EXPECT_TRUE(wholeChunk || (p[i] - p[i - 1]) * N * K >= kGemmMinBlockWork) << M << "x" << N << "x" << K;
    }
  }
}

struct GemmCase {
  bool tA, tB;
  int64_t M, N, K;
};

class GemmThreadsTest : public ::testing::TestWithParam<GemmCase> {};

// Tests that a GEMM run on 2, 3 and 5 threads gives the 1-thread result bit for bit under the
// OpenBLAS core this process runs (tests/e2e/test_gemm_every_core.py runs it under every core
// this machine executes), and that the 1-thread result is the product. The shapes leave remainders inside
// every kernel's unroll (M % 12, % 8, % 4 and N % 16 non-zero), cut rows or columns, and one has
// more rows than a row chunk.
TEST_P(GemmThreadsTest, ThreadCountDoesNotChangeTheResult) {
  GemmCase c = GetParam();
  std::vector<float> A = randomFloats(c.M * c.K, 1), B = randomFloats(c.K * c.N, 2), C0 = randomFloats(c.M * c.N, 3);
  Gemm<float> g{c.tA, c.tB, c.M, c.N, c.K, A.data(), c.tA ? c.M : c.K, B.data(), c.tB ? c.K : c.N, 0.5f, nullptr, c.N};
  std::vector<float> one = C0;
  g.C = one.data();
  gemm(g, 1);
  for (int threads : {2, 3, 5}) {
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
                                           GemmCase{false, false, 70, 1100, 300}, GemmCase{false, true, 64, 1000, 300},
                                           GemmCase{false, true, 16, 1000, 300}, GemmCase{true, false, 22, 1000, 300},
                                           GemmCase{false, false, 250, 41, 120}, GemmCase{false, false, 60, 129, 300},
                                           GemmCase{true, false, 8100, 37, 9}, GemmCase{false, false, 105000, 16, 16},
                                           GemmCase{false, false, 5, 3, 2}));

template <typename T> void expectThreadIndependent(int64_t M, int64_t N, int64_t K) {
  std::vector<T> A = uniformValues<T>(M * K, 4), B = uniformValues<T>(K * N, 5);
  std::vector<T> one(M * N), many(M * N);
  Gemm<T> g{false, false, M, N, K, A.data(), K, B.data(), N, T(0), one.data(), N};
  gemm(g, 1);
  for (int threads : {2, 3, 5}) {
    g.C = many.data();
    gemm(g, threads);
    ASSERT_EQ(many, one) << M << "x" << N << "x" << K << " on " << threads << " threads";
  }
}

// Tests f64 GEMMs (their kernels are other files) cut along rows and along columns, with and
// without a remainder of N % 8 columns (SkylakeX's DGEMM rounds those by panel).
TEST(GemmThreadsTest, DoubleThreadCountDoesNotChangeTheResult) {
  expectThreadIndependent<double>(803, 129, 700);
  expectThreadIndependent<double>(61, 1000, 300);
  expectThreadIndependent<double>(64, 300, 300);
  expectThreadIndependent<double>(20, 300, 2000);
  expectThreadIndependent<double>(61, 1004, 300);
  expectThreadIndependent<double>(40, 180, 3000);
}

// Tests random shapes in f32 and f64 (fixed seed): whatever gemmSplit picks under the running
// core gives the 1-thread bits.
TEST(GemmThreadsTest, RandomShapesThreadCountDoesNotChangeTheResult) {
  std::mt19937 rng(2029);
  std::uniform_int_distribution<int64_t> side(8, 420), depth(16, 300);
  for (int trial = 0; trial < 12; ++trial) {
    int64_t M = side(rng), N = side(rng), K = depth(rng);
    expectThreadIndependent<float>(M, N, K);
    expectThreadIndependent<double>(M, N, K);
  }
}

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
