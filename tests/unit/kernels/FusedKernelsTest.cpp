//===- FusedKernelsTest.cpp - cpc.matmul_bias against the ops it replaces ---===//
#include "kernels/Float16.h"
#include "kernels/cpu/Kernel.h"
#include "tests/unit/kernels/KernelTestUtil.h"

#include <gtest/gtest.h>

#include <cstring>
#include <random>

using namespace cpc;
using namespace cpc::kernels;
using namespace cpc::kernels::testing;

namespace {

/// `n` values in [-1, 1) stored as `t` (f32 or a 16-bit float) bytes.
std::vector<uint8_t> randomBytes(DType t, size_t n, unsigned seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> d(-1, 1);
  std::vector<uint8_t> bytes(n * dtypeSize(t));
  for (size_t i = 0; i < n; ++i) {
    float x = d(gen);
    if (t == DType::F32)
      std::memcpy(bytes.data() + 4 * i, &x, 4);
    else {
      uint16_t h = store16(t, x);
      std::memcpy(bytes.data() + 2 * i, &h, 2);
    }
  }
  return bytes;
}

struct Case {
  DType dtype;
  int64_t rows, k, n;
  bool transposeRhs, gelu, keepSum;
  const char *approximate;
};

class MatMulBias : public ::testing::TestWithParam<Case> {};

// Tests that the fused kernel's results are those of matmul, add (bias) and gelu run apart, bit
// for bit: a plan with the fusion trains exactly as one without (f32 and 16-bit storage, with and
// without the pre-activation result, rows that span several of its panels).
TEST_P(MatMulBias, EqualsTheSeparateKernelsBitForBit) {
  Case c = GetParam();
  std::vector<uint8_t> x = randomBytes(c.dtype, c.rows * c.k, 1), w = randomBytes(c.dtype, c.k * c.n, 2),
                       b = randomBytes(c.dtype, c.n, 3);
  size_t outBytes = c.rows * c.n * dtypeSize(c.dtype);
  std::vector<uint8_t> product(outBytes), sum(outBytes), act(outBytes), fused(outBytes), fusedSum(outBytes);
  std::vector<int64_t> wShape = c.transposeRhs ? std::vector<int64_t>{c.n, c.k} : std::vector<int64_t>{c.k, c.n};
  nlohmann::json mm = {{"transpose_rhs", c.transposeRhs}};
  nlohmann::json gelu = {{"approximate", c.approximate}};
  run(OpKind::MatMul, {ref(x, {c.rows, c.k}, c.dtype), ref(w, wShape, c.dtype)}, {ref(product, {c.rows, c.n}, c.dtype)}, mm);
  run(OpKind::Add, {ref(b, {c.n}, c.dtype), ref(product, {c.rows, c.n}, c.dtype)}, {ref(sum, {c.rows, c.n}, c.dtype)});
  if (c.gelu)
    run(OpKind::Gelu, {ref(sum, {c.rows, c.n}, c.dtype)}, {ref(act, {c.rows, c.n}, c.dtype)}, gelu);
  nlohmann::json attrs = {{"transpose_rhs", c.transposeRhs}, {"activation", c.gelu ? "gelu" : "none"},
                          {"approximate", c.approximate}};
  std::vector<TensorRef> outs{ref(fused, {c.rows, c.n}, c.dtype)};
  if (c.keepSum)
    outs.push_back(ref(fusedSum, {c.rows, c.n}, c.dtype));
  run(OpKind::MatMulBias, {ref(x, {c.rows, c.k}, c.dtype), ref(w, wShape, c.dtype), ref(b, {c.n}, c.dtype)}, outs,
      attrs);
  EXPECT_EQ(fused, c.gelu ? act : sum);
  if (c.keepSum)
    EXPECT_EQ(fusedSum, sum);
}

INSTANTIATE_TEST_SUITE_P(Shapes, MatMulBias,
                         ::testing::Values(Case{DType::F32, 10, 64, 192, true, false, false, "none"},
                                           Case{DType::F32, 300, 64, 256, true, true, true, "none"},
                                           Case{DType::F32, 40, 96, 128, false, true, false, "tanh"},
                                           Case{DType::BF16, 300, 64, 256, true, true, true, "none"},
                                           Case{DType::F16, 34, 32, 128, true, false, false, "none"}));

// Tests that the kernel refuses a bias of the wrong length and a pre-activation without GELU.
TEST(MatMulBiasErrors, RejectsWhatTheVerifierWould) {
  std::vector<float> x(8), w(8), b(3), y(4), y2(4);
  EXPECT_THROW(run(OpKind::MatMulBias, {ref(x, {2, 4}), ref(w, {4, 2}), ref(b, {3})}, {ref(y, {2, 2})}), RuntimeError);
  EXPECT_THROW(run(OpKind::MatMulBias, {ref(x, {2, 4}), ref(w, {4, 2}), ref(b, {2})}, {ref(y, {2, 2}), ref(y2, {2, 2})}),
               RuntimeError);
}

} // namespace
