//===- RandomKernelsTest.cpp - random_uniform ------------------------------===//
#include "kernels/cpu/Kernel.h"

#include <gtest/gtest.h>

#include <set>

using namespace cpc;
using namespace cpc::kernels;

namespace {

template <typename T>
std::vector<T> uniform(DType dtype, int64_t n, double low, double high, int64_t seed, uint64_t step,
                       int threads = 1, const int64_t *microbatch = nullptr) {
  std::vector<T> y(n);
  nlohmann::json attrs = {{"low", low}, {"high", high}, {"seed", seed}};
  KernelContext ctx;
  ctx.op = OpKind::RandomUniform;
  ctx.outputs = {TensorRef{y.data(), dtype, {n}}};
  ctx.setAttrs(attrs);
  ctx.threads = threads;
  ctx.step = step;
  ctx.microbatch = microbatch;
  KernelFn fn = KernelRegistry::cpu().find(OpKind::RandomUniform);
  EXPECT_NE(fn, nullptr);
  if (fn)
    fn(ctx);
  return y;
}

} // namespace

TEST(RandomKernels, SameSeedAndStepGiveSameValuesAcrossThreadCounts) {
  auto a = uniform<float>(DType::F32, 100000, 0, 1, 42, 3, 1);
  auto b = uniform<float>(DType::F32, 100000, 0, 1, 42, 3, 4);
  EXPECT_EQ(a, b);
}

// Microbatch m of a step draws the positions after those of microbatches 0..m-1: two halves
// drawn as microbatches 0 and 1 are the whole tensor drawn at once (docs/random.md).
TEST(RandomKernels, MicrobatchesContinueTheStepsStream) {
  const int64_t first = 0, second = 1;
  auto whole = uniform<float>(DType::F32, 1000, 0, 1, 9, 4);
  auto a = uniform<float>(DType::F32, 500, 0, 1, 9, 4, 1, &first);
  auto b = uniform<float>(DType::F32, 500, 0, 1, 9, 4, 1, &second);
  a.insert(a.end(), b.begin(), b.end());
  EXPECT_EQ(a, whole);
}

TEST(RandomKernels, DifferentStepOrSeedDiffers) {
  auto a = uniform<double>(DType::F64, 64, 0, 1, 7, 0);
  auto b = uniform<double>(DType::F64, 64, 0, 1, 7, 1);
  auto c = uniform<double>(DType::F64, 64, 0, 1, 8, 0);
  int sameStep = 0, sameSeed = 0;
  for (int i = 0; i < 64; ++i) {
    sameStep += a[i] == b[i];
    sameSeed += a[i] == c[i];
  }
  EXPECT_EQ(sameStep, 0);
  EXPECT_EQ(sameSeed, 0);
  EXPECT_EQ(std::set<double>(a.begin(), a.end()).size(), 64u); // no repeats within a stream
}

TEST(RandomKernels, MeanAndRangeF32) {
  const int64_t n = 100000;
  auto x = uniform<float>(DType::F32, n, 0, 1, 1234, 0);
  double sum = 0, sq = 0;
  for (float v : x) {
    ASSERT_GE(v, 0.f);
    ASSERT_LT(v, 1.f);
    sum += v;
    sq += double(v) * v;
  }
  double mean = sum / n;
  EXPECT_NEAR(mean, 0.5, 0.005); // stddev of the mean is ~0.0009
  EXPECT_NEAR(sq / n - mean * mean, 1.0 / 12, 0.003);
}

TEST(RandomKernels, RangeLowHighF64AndF32) {
  auto d = uniform<double>(DType::F64, 100000, -3, 5, 9, 2);
  double lo = 1e9, hi = -1e9;
  for (double v : d) {
    ASSERT_GE(v, -3.0);
    ASSERT_LT(v, 5.0);
    lo = std::min(lo, v);
    hi = std::max(hi, v);
  }
  EXPECT_LT(lo, -2.99);
  EXPECT_GT(hi, 4.99);
  // A narrow float range where rounding low + span*u could otherwise land on `high`.
  auto f = uniform<float>(DType::F32, 100000, 1.0, 1.0 + 1e-6, 5, 0);
  for (float v : f) {
    ASSERT_GE(v, 1.0f);
    ASSERT_LT(v, float(1.0 + 1e-6));
  }
}

TEST(RandomKernels, RejectsIntegerOutputs) {
  EXPECT_THROW(uniform<int64_t>(DType::I64, 4, 0, 1, 1, 0), RuntimeError);
}
