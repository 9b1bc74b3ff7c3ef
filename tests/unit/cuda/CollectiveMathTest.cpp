//===- CollectiveMathTest.cpp - the NaN-keeping max's keys on the host -----===//
//
// Tests that the integer keys the NCCL communicator's float max reduces order as the floats do
// (NaN above everything), map back to the same value, and that a max over ranks' keys gives
// what the MPI communicator's max gives: NaN when any rank has one.
//
#include "kernels/Float16.h"
#include "kernels/cuda/CollectiveMath.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

using namespace cpc;
using namespace cpc::kernels::cuda;

namespace {

/// The same bytes as another type of their size (floats' bits and back).
template <typename To, typename From> To bitCast(From x) {
  static_assert(sizeof(To) == sizeof(From));
  To to;
  std::memcpy(&to, &x, sizeof(To));
  return to;
}
uint32_t bitsOf(float x) { return bitCast<uint32_t>(x); }
uint64_t bitsOf(double x) { return bitCast<uint64_t>(x); }
float floatOf(uint32_t b) { return bitCast<float>(b); }
double doubleOf(uint64_t b) { return bitCast<double>(b); }

int32_t key32(float x) { return maxKey<int32_t>(bitsOf(x), kF32Format); }
float back32(int32_t k) { return floatOf(bitsOfMaxKey<int32_t>(k, kF32Format)); }

/// The MPI communicator's max of two values: a NaN wins.
template <typename T> T mpiMax(T a, T b) { return a != a || a > b ? a : b; }

std::vector<float> specialFloats() {
  const float inf = std::numeric_limits<float>::infinity();
  return {0.0f, -0.0f, 1.0f, -1.0f, 1.5f, -1.5f, inf, -inf, std::numeric_limits<float>::min(),
          -std::numeric_limits<float>::min(), std::numeric_limits<float>::denorm_min(),
          -std::numeric_limits<float>::denorm_min(), std::numeric_limits<float>::max(),
          std::numeric_limits<float>::lowest(), 3.0e-39f, -7.25e12f};
}

TEST(CollectiveMath, FloatKeysOrderAsTheFloatsAndMapBack) {
  std::vector<float> values = specialFloats();
  std::mt19937 rng(3);
  std::uniform_int_distribution<uint32_t> bits;
  for (int i = 0; i < 2000; ++i) {
    float x = floatOf(bits(rng));
    if (!std::isnan(x))
      values.push_back(x);
  }
  for (float a : values) {
    EXPECT_EQ(bitsOf(back32(key32(a))), bitsOf(a)) << a;
    for (float b : {values[0], values[3], values[6], values[7], values[12], values[values.size() / 2]}) {
      if (a < b) {
        EXPECT_LT(key32(a), key32(b)) << a << " < " << b;
      } else if (a > b) {
        EXPECT_GT(key32(a), key32(b)) << a << " > " << b;
      }
    }
  }
  EXPECT_LT(key32(-0.0f), key32(0.0f)); // the max of -0 and +0 is +0
}

TEST(CollectiveMath, EveryNaNIsTheLargestKeyAndComesBackAsNaN) {
  const float inf = std::numeric_limits<float>::infinity();
  for (uint32_t nan : {0x7fc00000u, 0x7f800001u, 0xffc00000u, 0xff800001u, 0x7fffffffu, 0xffffffffu}) {
    EXPECT_EQ(maxKey<int32_t>(nan, kF32Format), nanKey<int32_t>());
    EXPECT_GT(maxKey<int32_t>(nan, kF32Format), key32(inf));
    EXPECT_TRUE(std::isnan(back32(maxKey<int32_t>(nan, kF32Format))));
  }
  EXPECT_EQ(nanKey<int32_t>(), std::numeric_limits<int32_t>::max());
  EXPECT_EQ(nanKey<int64_t>(), std::numeric_limits<int64_t>::max());
}

TEST(CollectiveMath, AMaxOverRanksKeysIsTheMpiMax) {
  // Four ranks' partial maxima, element by element; rank 2 has a NaN in element 1, rank 0 in 3.
  const float nan = std::numeric_limits<float>::quiet_NaN();
  std::vector<std::vector<float>> ranks = {{1.0f, 2.0f, -3.0f, nan, -0.0f},
                                           {4.0f, -2.0f, -1.0f, 5.0f, 0.0f},
                                           {-4.0f, nan, -7.0f, 6.0f, -0.0f},
                                           {0.5f, 3.0f, -2.0f, 1e30f, -1.0f}};
  for (size_t e = 0; e < ranks[0].size(); ++e) {
    int32_t key = std::numeric_limits<int32_t>::min();
    float expected = ranks[0][e];
    for (size_t r = 0; r < ranks.size(); ++r) {
      key = std::max(key, key32(ranks[r][e])); // what ncclMax does on the keys
      if (r > 0)
        expected = mpiMax(expected, ranks[r][e]);
    }
    float got = back32(key);
    if (std::isnan(expected))
      EXPECT_TRUE(std::isnan(got)) << "element " << e;
    else
      EXPECT_EQ(got, expected) << "element " << e;
  }
}

TEST(CollectiveMath, DoubleKeysOrderAndMapBack) {
  const double inf = std::numeric_limits<double>::infinity();
  std::vector<double> values = {0.0, -0.0, 1.0, -1.0, inf, -inf, 1e-310, -1e-310, 1e300, -1e300, 2.5, -2.5};
  for (double a : values) {
    EXPECT_EQ(bitsOfMaxKey<int64_t>(maxKey<int64_t>(bitsOf(a), kF64Format), kF64Format), bitsOf(a)) << a;
    for (double b : values) {
      if (a < b) {
        EXPECT_LT(maxKey<int64_t>(bitsOf(a), kF64Format), maxKey<int64_t>(bitsOf(b), kF64Format)) << a << " " << b;
      }
    }
  }
  uint64_t nan = bitsOf(std::numeric_limits<double>::quiet_NaN()) | kF64Format.sign;
  EXPECT_EQ(maxKey<int64_t>(nan, kF64Format), nanKey<int64_t>());
  EXPECT_TRUE(std::isnan(doubleOf(bitsOfMaxKey<int64_t>(nanKey<int64_t>(), kF64Format))));
}

TEST(CollectiveMath, SixteenBitKeysCoverEveryValue) {
  for (DType t : {DType::F16, DType::BF16}) {
    FloatFormat<uint16_t> f = t == DType::F16 ? kF16Format : kBF16Format;
    for (uint32_t a = 0; a < 0x10000; ++a) {
      float x = load16(t, uint16_t(a));
      int32_t k = maxKey<int32_t>(uint16_t(a), f);
      if (std::isnan(x)) {
        EXPECT_EQ(k, nanKey<int32_t>());
        EXPECT_TRUE(std::isnan(load16(t, bitsOfMaxKey<int32_t>(k, f))));
        continue;
      }
      EXPECT_EQ(bitsOfMaxKey<int32_t>(k, f), uint16_t(a));
      for (uint16_t b : {uint16_t(0x0000), uint16_t(0x8000), uint16_t(0x3c00), uint16_t(0xbc00), uint16_t(0x0001),
                         uint16_t(0x8001), uint16_t(0x7bff), uint16_t(0xfbff)}) {
        float y = load16(t, b);
        int32_t kb = maxKey<int32_t>(b, f);
        if (x < y) {
          EXPECT_LT(k, kb) << dtypeName(t) << " " << a << " " << b;
        } else if (x > y) {
          EXPECT_GT(k, kb) << dtypeName(t) << " " << a << " " << b;
        }
      }
    }
  }
}

} // namespace
