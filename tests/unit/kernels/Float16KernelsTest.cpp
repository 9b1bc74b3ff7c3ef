//===- Float16KernelsTest.cpp - f16 and bf16 storage with f32 arithmetic ---===//
#include "kernels/Float16.h"
#include "tests/unit/TestUtil.h"
#include "kernels/cpu/GemmCuts.h"
#include "kernels/cpu/Kernel.h"
#include "tests/unit/kernels/KernelTestUtil.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <limits>
#include <random>

using namespace cpc;
using namespace cpc::kernels;
using namespace cpc::kernels::testing;
using cpc::test::randomFloats;

namespace {

std::vector<uint16_t> to16(DType t, const std::vector<float> &v) {
  std::vector<uint16_t> out(v.size());
  narrowFromFloat(t, v.data(), out.data(), (int64_t)v.size());
  return out;
}

std::vector<float> from16(DType t, const std::vector<uint16_t> &v) {
  std::vector<float> out(v.size());
  widenToFloat(t, v.data(), out.data(), (int64_t)v.size());
  return out;
}

// Tests that bf16 rounds to nearest even (ties go to the even mantissa), keeps inf and NaN, and that
// f16 rounds as IEEE half does (65504 is its largest finite value; 65520 overflows).
TEST(Float16Kernels, ConversionsRoundToNearestEven) {
  EXPECT_EQ(bf16ToFloat(floatToBF16(1.0f + 0x1p-8f)), 1.0f);              // tie, even stays
  EXPECT_EQ(bf16ToFloat(floatToBF16(1.0f + 3 * 0x1p-8f)), 1.0f + 0x1p-6f); // tie, odd rounds up
  EXPECT_EQ(bf16ToFloat(floatToBF16(1.0f + 0x1p-8f + 0x1p-20f)), 1.0f + 0x1p-7f);
  EXPECT_TRUE(std::isinf(bf16ToFloat(floatToBF16(std::numeric_limits<float>::infinity()))));
  EXPECT_TRUE(std::isnan(bf16ToFloat(floatToBF16(std::nanf("")))));
  EXPECT_TRUE(std::isnan(bf16ToFloat(floatToBF16(-std::nanf("")))));
  EXPECT_EQ(halfToFloat(floatToHalf(65504.f)), 65504.f);
  EXPECT_TRUE(std::isinf(halfToFloat(floatToHalf(65520.f))));
  EXPECT_EQ(halfToFloat(floatToHalf(1.0f + 0x1p-11f)), 1.0f);
  std::vector<float> v = randomFloats(1000, 3); // the bulk loops agree with the scalar ones
  for (DType t : {DType::BF16, DType::F16}) {
    auto h = to16(t, v);
    auto back = from16(t, h);
    for (size_t i = 0; i < v.size(); ++i) {
      ASSERT_EQ(h[i], store16(t, v[i]));
      ASSERT_NEAR(back[i], v[i], std::fabs(v[i]) * (t == DType::BF16 ? 0x1p-8 : 0x1p-11));
    }
  }
}

// Tests that a 16-bit matmul multiplies the 16-bit values exactly as f32 does and rounds the result
// once: equal to the f32 matmul of the widened operands, rounded.
TEST(Float16Kernels, MatmulAccumulatesInF32) {
  const int64_t M = 7, K = 300, N = 9;
  for (DType t : {DType::BF16, DType::F16}) {
    auto a = to16(t, randomFloats(M * K, 1)), b = to16(t, randomFloats(K * N, 2));
    std::vector<uint16_t> c(M * N);
    run(OpKind::MatMul, {ref(a, {M, K}, t), ref(b, {K, N}, t)}, {ref(c, {M, N}, t)});
    auto af = from16(t, a), bf = from16(t, b);
    std::vector<float> cf(M * N);
    run(OpKind::MatMul, {ref(af, {M, K}), ref(bf, {K, N})}, {ref(cf, {M, N})});
    EXPECT_EQ(c, to16(t, cf)) << dtypeName(t);
  }
}

// Tests that a sum of many 16-bit values accumulates in f32: 2000 ones in bf16 would stop at 256
// if each partial sum were rounded to bf16.
TEST(Float16Kernels, ReductionAccumulatesInF32) {
  for (DType t : {DType::BF16, DType::F16}) {
    std::vector<uint16_t> x(2000, store16(t, 1.0f)), y(1);
    run(OpKind::ReduceSum, {ref(x, {2000}, t)}, {ref(y, {}, t)}, {{"axes", {0}}, {"keepdims", false}});
    EXPECT_EQ(load16(t, y[0]), 2000.f) << dtypeName(t);
  }
}

// Tests softmax and layer norm on 16-bit storage against the f32 kernels on the same values.
TEST(Float16Kernels, SoftmaxAndLayerNormMatchF32) {
  const DType t = DType::BF16;
  auto x = to16(t, randomFloats(4 * 64, 5));
  auto xf = from16(t, x);
  std::vector<uint16_t> y(x.size());
  std::vector<float> yf(x.size());
  run(OpKind::Softmax, {ref(x, {4, 64}, t)}, {ref(y, {4, 64}, t)}, {{"axis", 1}});
  run(OpKind::Softmax, {ref(xf, {4, 64})}, {ref(yf, {4, 64})}, {{"axis", 1}});
  EXPECT_EQ(y, to16(t, yf));
  std::vector<float> scale(64, 1.5f), bias(64, 0.25f);
  run(OpKind::LayerNorm, {ref(x, {4, 64}, t), ref(scale, {64}), ref(bias, {64})}, {ref(y, {4, 64}, t)},
      {{"axis", 1}, {"epsilon", 1e-5}});
  run(OpKind::LayerNorm, {ref(xf, {4, 64}), ref(scale, {64}), ref(bias, {64})}, {ref(yf, {4, 64})},
      {{"axis", 1}, {"epsilon", 1e-5}});
  EXPECT_EQ(y, to16(t, yf));
}

// Tests casts between f32, the 16-bit floats and integers, in place and out of place.
TEST(Float16Kernels, Casts) {
  std::vector<float> x = {1.5f, -2.25f, 3.0f + 0x1p-12f, 70000.f};
  std::vector<uint16_t> h(4), b(4);
  run(OpKind::Cast, {ref(x, {4})}, {ref(h, {4}, DType::F16)});
  run(OpKind::Cast, {ref(x, {4})}, {ref(b, {4}, DType::BF16)});
  EXPECT_EQ(from16(DType::F16, h)[1], -2.25f);
  EXPECT_TRUE(std::isinf(from16(DType::F16, h)[3]));
  EXPECT_EQ(from16(DType::BF16, b)[2], 3.0f);
  std::vector<uint16_t> hb(4);
  run(OpKind::Cast, {ref(b, {4}, DType::BF16)}, {ref(hb, {4}, DType::F16)}); // bf16 -> f16 via f32
  EXPECT_EQ(from16(DType::F16, hb)[0], 1.5f);
  std::vector<int64_t> i(4);
  run(OpKind::Cast, {ref(b, {4}, DType::BF16)}, {ref(i, {4}, DType::I64)});
  EXPECT_EQ(i[1], -2);
  std::vector<float> back(4);
  run(OpKind::Cast, {ref(b, {4}, DType::BF16)}, {ref(back, {4})});
  EXPECT_EQ(back[0], 1.5f);
  std::vector<float> inPlace = x; // narrowing in place (the memory planner may reuse the input)
  run(OpKind::Cast, {ref(inPlace, {4})}, {ref(inPlace, {4}, DType::BF16)});
  std::vector<uint16_t> first(reinterpret_cast<uint16_t *>(inPlace.data()),
                              reinterpret_cast<uint16_t *>(inPlace.data()) + 4);
  EXPECT_EQ(first, b);
}

// Tests that a result aliasing its operand (in-place elementwise ops) still reads every input
// before writing, through the widened scratch copies.
TEST(Float16Kernels, InPlaceElementwiseAndRandom) {
  const DType t = DType::F16;
  auto a = to16(t, {1, 2, 3, 4}), c = to16(t, {0.5f, 0.5f, 0.5f, 0.5f});
  run(OpKind::Add, {ref(a, {4}, t), ref(c, {4}, t)}, {ref(a, {4}, t)});
  EXPECT_EQ(from16(t, a), (std::vector<float>{1.5f, 2.5f, 3.5f, 4.5f}));
  std::vector<uint16_t> r(1000);
  run(OpKind::RandomUniform, {}, {ref(r, {1000}, DType::BF16)}, {{"low", -1.0}, {"high", 1.0}, {"seed", 3}});
  auto rf = from16(DType::BF16, r);
  EXPECT_GE(*std::min_element(rf.begin(), rf.end()), -1.f);
  EXPECT_LE(*std::max_element(rf.begin(), rf.end()), 1.f);
  EXPECT_LT(*std::min_element(rf.begin(), rf.end()), -0.9f);
}

// Tests the panelled 16-bit matmul on the layouts the plans use: batched with a broadcast rhs
// (more rows than a panel), transposed operands, a batched rhs, more rows than a GEMM's row chunk:
// each, bit for bit, the f32 matmul of the widened operands rounded once (the panels are cuts the
// f32 GEMM may make, kernels/cpu/GemmCuts.h), at 1 and 3 threads.
TEST(Float16Kernels, MatmulPanelsEveryLayout) {
  if (!gemmCutRule(false).known) // the panels are then thread-independent, not the f32 call's bits
    GTEST_SKIP() << openBlasDescription() << ": cpc does not know where its GEMMs may be cut";
  struct Case {
    std::vector<int64_t> a, b, c;
    bool tA, tB;
  };
  for (const Case &k : {Case{{3, 100, 40}, {40, 24}, {3, 100, 24}, false, false},
                        Case{{300, 40}, {24, 40}, {300, 24}, false, true},
                        Case{{40, 300}, {40, 24}, {300, 24}, true, false},
                        Case{{2, 3, 130, 16}, {2, 3, 16, 130}, {2, 3, 130, 130}, false, false},
                        Case{{2, 16, 130}, {2, 130, 16}, {2, 130, 130}, true, true},
                        Case{{8100, 20}, {20, 70}, {8100, 70}, false, false}})
    for (DType t : {DType::BF16, DType::F16}) {
      auto a = to16(t, randomFloats(numElements(k.a), 7)), b = to16(t, randomFloats(numElements(k.b), 8));
      nlohmann::json attrs = {{"transpose_lhs", k.tA}, {"transpose_rhs", k.tB}};
      auto af = from16(t, a), bf = from16(t, b);
      std::vector<float> cf(numElements(k.c));
      run(OpKind::MatMul, {ref(af, k.a), ref(bf, k.b)}, {ref(cf, k.c)}, attrs, 1);
      std::vector<uint16_t> want = to16(t, cf);
      for (int threads : {1, 3}) {
        std::vector<uint16_t> c(numElements(k.c));
        run(OpKind::MatMul, {ref(a, k.a, t), ref(b, k.b, t)}, {ref(c, k.c, t)}, attrs, threads);
        EXPECT_EQ(c, want) << dtypeName(t) << " " << shapeString(k.a) << " x " << shapeString(k.b) << " on "
                           << threads << " threads";
      }
    }
}

// Tests that elementwise kernels over more elements than one chunk, with a bias and a scalar
// broadcast over the leading dims and a mask, give what the f32 kernels give on the widened
// values; and that the scratch they report is a few chunks, not the tensors.
TEST(Float16Kernels, ElementwiseChunksWithBroadcasts) {
  const DType t = DType::BF16;
  const int64_t rows = 700, cols = 300; // 210000 elements: several chunks of kWidenChunk
  auto x = to16(t, randomFloats(rows * cols, 9)), bias = to16(t, randomFloats(cols, 10)), s = to16(t, {0.5f});
  auto xf = from16(t, x), biasf = from16(t, bias), sf = from16(t, s);
  std::vector<uint16_t> y(x.size()), z(x.size());
  std::vector<float> yf(x.size()), zf(x.size());
  run(OpKind::Add, {ref(x, {rows, cols}, t), ref(bias, {cols}, t)}, {ref(y, {rows, cols}, t)});
  run(OpKind::Add, {ref(xf, {rows, cols}), ref(biasf, {cols})}, {ref(yf, {rows, cols})});
  EXPECT_EQ(y, to16(t, yf));
  run(OpKind::Mul, {ref(s, {}, t), ref(y, {rows, cols}, t)}, {ref(z, {rows, cols}, t)});
  std::vector<float> yw = from16(t, y);
  run(OpKind::Mul, {ref(sf, {}), ref(yw, {rows, cols})}, {ref(zf, {rows, cols})});
  EXPECT_EQ(z, to16(t, zf));
  std::vector<uint8_t> mask(x.size());
  for (size_t i = 0; i < mask.size(); ++i)
    mask[i] = i % 3 == 0;
  run(OpKind::Where, {ref(mask, {rows, cols}, DType::I1), ref(x, {rows, cols}, t), ref(z, {rows, cols}, t)},
      {ref(y, {rows, cols}, t)});
  for (size_t i = 0; i < y.size(); i += 997)
    ASSERT_EQ(y[i], mask[i] ? x[i] : z[i]);
  KernelContext ctx;
  nlohmann::json none = nlohmann::json::object();
  ctx.setAttrs(none);
  ctx.inputs = {TensorRef{nullptr, t, {rows, cols}}, TensorRef{nullptr, t, {cols}}};
  ctx.outputs = {TensorRef{nullptr, t, {rows, cols}}};
  int64_t bytes = KernelRegistry::cpu().scratchBytes(OpKind::Add, ctx);
  EXPECT_GT(bytes, 0);
  EXPECT_LE(bytes, 3 * kWidenChunk * 4);
  ctx.inputs[1].shape = {rows, 1}; // broadcast over the trailing dim: whole tensors
  EXPECT_EQ(KernelRegistry::cpu().scratchBytes(OpKind::Add, ctx), (2 * rows * cols + rows) * 4);
}

} // namespace
