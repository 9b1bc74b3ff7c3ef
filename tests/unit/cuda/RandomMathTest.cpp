//===- RandomMathTest.cpp - random_uniform's CUDA generator, on the host ---===//
//
// The GPU must draw exactly the CPU's values: RandomMath.h's generator (what
// kernels/cuda/Random.cu runs per element) over whole tensors equals the CPU kernel's output
// bit for bit, for f32, f64 and the 16-bit floats, across seeds, steps and ranges (including
// the one where rounding reaches `high`).
//
#include "kernels/Float16.h"
#include "kernels/cpu/Kernel.h"
#include "kernels/cuda/RandomMath.h"

#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

using namespace cpc;
using namespace cpc::kernels;
using namespace cpc::kernels::cuda;

namespace {

struct Draw {
  int64_t seed;
  uint64_t step;
  double low, high;
};

const std::vector<Draw> kDraws = {
    {0, 0, 0, 1},
    {42, 1, -1, 1},
    {-7, 123456789, 0.25, 0.75},
    {1234567, 3, -1e3, 1e-3},
    {5, 9, 1e8, 1e8 + 8}, // f32 spacing 8: low + span * u rounds to high, replaced by the value below
    {3, 2, 2.5, 2.5},     // an empty range: every value is low
};

std::vector<uint8_t> runCpu(DType dtype, int64_t n, const Draw &d) {
  std::vector<uint8_t> out(n * dtypeSize(dtype));
  KernelContext ctx;
  ctx.op = OpKind::RandomUniform;
  ctx.outputs.push_back(TensorRef{out.data(), dtype, {n}});
  ctx.setAttrs({{"seed", d.seed}, {"low", d.low}, {"high", d.high}});
  ctx.step = d.step;
  ctx.threads = 2;
  KernelRegistry::cpu().find(OpKind::RandomUniform)(ctx);
  return out;
}

template <class T> std::vector<uint8_t> emulate(int64_t n, const Draw &d) {
  std::vector<uint8_t> out(n * sizeof(T));
  UniformRange<T> range = uniformRange<T>(d.low, d.high);
  uint64_t key = streamKey((uint64_t)d.seed, d.step);
  for (int64_t i = 0; i < n; ++i) {
    T v = uniformAt(range, key, i);
    std::memcpy(out.data() + i * sizeof(T), &v, sizeof(T));
  }
  return out;
}

// Tests f32 and f64: the emulated generator's bytes equal the CPU kernel's.
TEST(RandomMath, MatchesCpuKernelBitForBit) {
  const int64_t n = 40000;
  for (const Draw &d : kDraws) {
    std::string what = "seed " + std::to_string(d.seed) + " step " + std::to_string(d.step);
    EXPECT_EQ(runCpu(DType::F32, n, d), emulate<float>(n, d)) << "f32 " << what;
    EXPECT_EQ(runCpu(DType::F64, n, d), emulate<double>(n, d)) << "f64 " << what;
  }
}

// Tests f16 and bf16: the f32 values rounded once, as the CPU kernel's widening stores them.
TEST(RandomMath, SixteenBitFloatsAreRoundedF32Draws) {
  const int64_t n = 5000;
  for (DType dtype : {DType::F16, DType::BF16})
    for (const Draw &d : kDraws) {
      if (d.low > 60000)
        continue; // beyond f16's range
      std::vector<uint8_t> f32 = emulate<float>(n, d), want = runCpu(dtype, n, d), got(n * 2);
      for (int64_t i = 0; i < n; ++i) {
        float v;
        std::memcpy(&v, f32.data() + 4 * i, 4);
        uint16_t h = store16(dtype, v);
        std::memcpy(got.data() + 2 * i, &h, 2);
      }
      EXPECT_EQ(want, got) << dtypeName(dtype) << " seed " << d.seed;
    }
}

// Tests the range's edge: values stay below `high` even where rounding reaches it, and the
// generator depends on the step and the seed.
TEST(RandomMath, ValuesStayInRangeAndVaryWithStepAndSeed) {
  const Draw edge = kDraws[4];
  UniformRange<float> r = uniformRange<float>(edge.low, edge.high);
  uint64_t key = streamKey(edge.seed, edge.step);
  bool sawBelow = false;
  for (int64_t i = 0; i < 10000; ++i) {
    float v = uniformAt(r, key, i);
    ASSERT_LT(v, r.hi);
    ASSERT_GE(v, r.lo);
    sawBelow |= v == r.below;
  }
  EXPECT_TRUE(sawBelow);
  UniformRange<double> unit = uniformRange<double>(0, 1);
  EXPECT_NE(uniformAt(unit, streamKey(1, 0), 0), uniformAt(unit, streamKey(1, 1), 0));
  EXPECT_NE(uniformAt(unit, streamKey(1, 0), 0), uniformAt(unit, streamKey(2, 0), 0));
  EXPECT_EQ(unitFloat<float>(~0ull), 1.0f - 0x1p-24f);
  EXPECT_EQ(unitFloat<double>(~0ull), 1.0 - 0x1p-53);
}

} // namespace
