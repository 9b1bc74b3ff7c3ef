//===- LinalgKernelsTest.cpp - matmul and conv2d vs naive loops -----------===//
#include "kernels/cpu/Kernel.h"
#include "tests/unit/TestUtil.h"
#include "tests/unit/kernels/KernelTestUtil.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>

using namespace cpc;
using namespace cpc::kernels;
using namespace cpc::kernels::testing;
using cpc::test::randomFloats;

namespace {

template <typename T> void expectNear(const std::vector<T> &got, const std::vector<T> &want, double rel) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i)
    ASSERT_NEAR(got[i], want[i], rel * std::max(1.0, std::fabs((double)want[i]))) << "at " << i;
}

// Naive C[b] = A[b] @ B[b] with per-operand batch offsets already resolved by the caller.
void naiveMatmul(const float *A, const float *B, float *C, int64_t M, int64_t K, int64_t N) {
  for (int64_t m = 0; m < M; ++m)
    for (int64_t n = 0; n < N; ++n) {
      double s = 0;
      for (int64_t k = 0; k < K; ++k)
        s += (double)A[m * K + k] * B[k * N + n];
      C[m * N + n] = (float)s;
    }
}

} // namespace

TEST(LinalgKernels, MatMulPlain2D) {
  auto a = randomFloats(3 * 4, 1), b = randomFloats(4 * 5, 2);
  std::vector<float> c(15), want(15);
  run(OpKind::MatMul, {ref(a, {3, 4}), ref(b, {4, 5})}, {ref(c, {3, 5})});
  naiveMatmul(a.data(), b.data(), want.data(), 3, 4, 5);
  expectNear(c, want, 1e-5);
}

TEST(LinalgKernels, MatMulRank1Operands) {
  auto a = randomFloats(4, 3), b = randomFloats(4 * 5, 4), m = randomFloats(3 * 4, 5);
  std::vector<float> vm(5), want(5);
  run(OpKind::MatMul, {ref(a, {4}), ref(b, {4, 5})}, {ref(vm, {5})}); // [4] @ [4,5] -> [5]
  naiveMatmul(a.data(), b.data(), want.data(), 1, 4, 5);
  expectNear(vm, want, 1e-5);

  std::vector<float> mv(3), want2(3);
  run(OpKind::MatMul, {ref(m, {3, 4}), ref(a, {4})}, {ref(mv, {3})}); // [3,4] @ [4] -> [3]
  naiveMatmul(m.data(), a.data(), want2.data(), 3, 4, 1);
  expectNear(mv, want2, 1e-5);

  std::vector<float> dot(1), want3(1);
  run(OpKind::MatMul, {ref(a, {4}), ref(a, {4})}, {ref(dot, {})}); // [4] @ [4] -> scalar
  naiveMatmul(a.data(), a.data(), want3.data(), 1, 4, 1);
  expectNear(dot, want3, 1e-5);
}

TEST(LinalgKernels, MatMulBroadcastsBatch) {
  // [2,1,3,4] x [5,4,2] -> [2,5,3,2]
  auto a = randomFloats(2 * 3 * 4, 6), b = randomFloats(5 * 4 * 2, 7);
  std::vector<float> c(2 * 5 * 3 * 2), want(c.size());
  run(OpKind::MatMul, {ref(a, {2, 1, 3, 4}), ref(b, {5, 4, 2})}, {ref(c, {2, 5, 3, 2})});
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 5; ++j)
      naiveMatmul(a.data() + i * 12, b.data() + j * 8, want.data() + (i * 5 + j) * 6, 3, 4, 2);
  expectNear(c, want, 1e-5);
}

TEST(LinalgKernels, MatMulLhsBatchWithSharedRhs) {
  // x[B,S,K] @ W[K,N]: the single-GEMM path.
  auto a = randomFloats(3 * 7 * 6, 8), b = randomFloats(6 * 5, 9);
  std::vector<float> c(3 * 7 * 5), want(c.size());
  run(OpKind::MatMul, {ref(a, {3, 7, 6}), ref(b, {6, 5})}, {ref(c, {3, 7, 5})});
  naiveMatmul(a.data(), b.data(), want.data(), 21, 6, 5);
  expectNear(c, want, 1e-5);

  // Lhs without batch dims, rhs batched: lhs is reused for every batch.
  std::vector<float> c2(4 * 7 * 5), want2(c2.size());
  auto rb = randomFloats(4 * 6 * 5, 10);
  run(OpKind::MatMul, {ref(a, {7, 6}), ref(rb, {4, 6, 5})}, {ref(c2, {4, 7, 5})});
  for (int i = 0; i < 4; ++i)
    naiveMatmul(a.data(), rb.data() + i * 30, want2.data() + i * 35, 7, 6, 5);
  expectNear(c2, want2, 1e-5);
}

TEST(LinalgKernels, MatMulLargeMatchesNaive) {
  auto a = randomFloats(64 * 128, 11), b = randomFloats(128 * 96, 12);
  std::vector<float> c(64 * 96), want(c.size());
  run(OpKind::MatMul, {ref(a, {64, 128}), ref(b, {128, 96})}, {ref(c, {64, 96})}, {}, 4);
  naiveMatmul(a.data(), b.data(), want.data(), 64, 128, 96);
  expectNear(c, want, 1e-4);
}

TEST(LinalgKernels, MatMulF64AndBadTypes) {
  std::vector<double> a = {1, 2, 3, 4}, b = {5, 6, 7, 8}, c(4);
  run(OpKind::MatMul, {ref(a, {2, 2}, DType::F64), ref(b, {2, 2}, DType::F64)}, {ref(c, {2, 2}, DType::F64)});
  EXPECT_EQ(c, (std::vector<double>{19, 22, 43, 50}));

  std::vector<int32_t> ia(4), ib(4), ic(4);
  EXPECT_THROW(run(OpKind::MatMul, {ref(ia, {2, 2}, DType::I32), ref(ib, {2, 2}, DType::I32)},
                   {ref(ic, {2, 2}, DType::I32)}),
               RuntimeError);
}

namespace {

struct ConvCase {
  int64_t N, C, H, W, O, KH, KW, sh, sw, pt, pl, pb, pr, dh, dw, G;
  bool bias;
};

void checkConv(const ConvCase &p, unsigned seed) {
  int64_t OH = (p.H + p.pt + p.pb - p.dh * (p.KH - 1) - 1) / p.sh + 1;
  int64_t OW = (p.W + p.pl + p.pr - p.dw * (p.KW - 1) - 1) / p.sw + 1;
  int64_t Cg = p.C / p.G, Og = p.O / p.G;
  auto x = randomFloats(p.N * p.C * p.H * p.W, seed), w = randomFloats(p.O * Cg * p.KH * p.KW, seed + 1),
       b = randomFloats(p.O, seed + 2);
  std::vector<float> y(p.N * p.O * OH * OW), want(y.size());
  for (int64_t n = 0; n < p.N; ++n)
    for (int64_t o = 0; o < p.O; ++o)
      for (int64_t oh = 0; oh < OH; ++oh)
        for (int64_t ow = 0; ow < OW; ++ow) {
          double s = p.bias ? b[o] : 0;
          int64_t g = o / Og;
          for (int64_t c = 0; c < Cg; ++c)
            for (int64_t kh = 0; kh < p.KH; ++kh)
              for (int64_t kw = 0; kw < p.KW; ++kw) {
                int64_t ih = oh * p.sh - p.pt + kh * p.dh, iw = ow * p.sw - p.pl + kw * p.dw;
                if (ih < 0 || ih >= p.H || iw < 0 || iw >= p.W)
                  continue;
                s += (double)x[((n * p.C + g * Cg + c) * p.H + ih) * p.W + iw] *
                     w[((o * Cg + c) * p.KH + kh) * p.KW + kw];
              }
          want[((n * p.O + o) * OH + oh) * OW + ow] = (float)s;
        }
  nlohmann::json attrs = {{"strides", {p.sh, p.sw}},
                          {"padding", {p.pt, p.pl, p.pb, p.pr}},
                          {"dilations", {p.dh, p.dw}},
                          {"groups", p.G}};
  std::vector<TensorRef> ins = {ref(x, {p.N, p.C, p.H, p.W}), ref(w, {p.O, Cg, p.KH, p.KW})};
  if (p.bias)
    ins.push_back(ref(b, {p.O}));
  run(OpKind::Conv2D, ins, {ref(y, {p.N, p.O, OH, OW})}, attrs);
  expectNear(y, want, 1e-4);
}

} // namespace

TEST(LinalgKernels, Conv2DPlain) { checkConv({2, 3, 7, 6, 4, 3, 3, 1, 1, 0, 0, 0, 0, 1, 1, 1, false}, 20); }

TEST(LinalgKernels, Conv2DPaddingStrideDilationBias) {
  checkConv({2, 3, 9, 8, 5, 3, 2, 2, 1, 1, 2, 0, 1, 1, 1, 1, true}, 30);
  checkConv({1, 2, 11, 10, 3, 3, 3, 1, 2, 2, 2, 2, 2, 2, 3, 1, true}, 40);
}

TEST(LinalgKernels, Conv2DGroups) {
  checkConv({2, 4, 6, 6, 6, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 2, true}, 50);
  checkConv({1, 4, 5, 5, 4, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 4, false}, 60); // depthwise
}

TEST(LinalgKernels, Conv2DLargeThreadedIm2col) {
  checkConv({1, 8, 40, 40, 8, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1, true}, 100);
}

TEST(LinalgKernels, Conv2DPointwise) { checkConv({2, 5, 4, 3, 7, 1, 1, 1, 1, 0, 0, 0, 0, 1, 1, 1, true}, 70); }

TEST(LinalgKernels, Conv2DPatchEmbedding) {
  // stride == kernel, no padding: the reshuffle fast path (including a ragged edge).
  checkConv({2, 3, 16, 16, 8, 4, 4, 4, 4, 0, 0, 0, 0, 1, 1, 1, true}, 80);
  checkConv({1, 3, 10, 11, 5, 3, 2, 3, 2, 0, 0, 0, 0, 1, 1, 1, false}, 90);
}

// Tests that transpose_lhs / transpose_rhs read stored operands transposed, batched and not.
TEST(LinalgKernels, MatMulTransposeFlagsMatchExplicitTranspose) {
  const int64_t B = 2, M = 3, K = 4, N = 5;
  std::vector<float> a(B * K * M), w(N * K), out(B * M * N);
  for (size_t i = 0; i < a.size(); ++i)
    a[i] = 0.1f * (float)((i * 7) % 11) - 0.5f;
  for (size_t i = 0; i < w.size(); ++i)
    w[i] = 0.05f * (float)((i * 5) % 13) - 0.3f;
  nlohmann::json attrs = {{"transpose_lhs", true}, {"transpose_rhs", true}};
  cpc::kernels::KernelContext ctx;
  ctx.op = OpKind::MatMul;
  ctx.inputs = {{a.data(), cpc::DType::F32, {B, K, M}}, {w.data(), cpc::DType::F32, {N, K}}};
  ctx.outputs = {{out.data(), cpc::DType::F32, {B, M, N}}};
  ctx.setAttrs(attrs);
  cpc::kernels::KernelRegistry::cpu().find(OpKind::MatMul)(ctx);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t m = 0; m < M; ++m)
      for (int64_t n = 0; n < N; ++n) {
        double ref = 0;
        for (int64_t k = 0; k < K; ++k)
          ref += (double)a[b * K * M + k * M + m] * w[n * K + k];
        EXPECT_NEAR(out[(b * M + m) * N + n], ref, 1e-5) << b << " " << m << " " << n;
      }
}

namespace {

/// The message of the RuntimeError a kernel run throws, or "" when it runs.
std::string failureOf(OpKind op, std::vector<TensorRef> ins, std::vector<TensorRef> outs,
                      const nlohmann::json &attrs = nlohmann::json::object()) {
  try {
    run(op, std::move(ins), std::move(outs), attrs);
  } catch (const RuntimeError &e) {
    return e.what();
  }
  return "";
}

} // namespace

// Tests that the kernels refuse operands an untrusted plan gets wrong with the dialect's own
// shape rules and words (support/ShapeMath.h): contracting dims, a broadcast, a permutation, a
// reduction's axes, a concat's other dims.
TEST(KernelShapeChecks, UseTheDialectsShapeRules) {
  std::vector<float> a(12), b(30), c(18), d(6), e(3), f(9);
  EXPECT_NE(failureOf(OpKind::MatMul, {ref(a, {3, 4}), ref(b, {5, 6})}, {ref(c, {3, 6})})
                .find("contracting dims differ: [3,4] x [5,6]"),
            std::string::npos);
  EXPECT_NE(failureOf(OpKind::Add, {ref(a, {2, 6}), ref(e, {3})}, {ref(a, {2, 6})}).find("shapes [2,6] and [3] do not broadcast"),
            std::string::npos);
  std::string wrongResult = failureOf(OpKind::Add, {ref(e, {3}), ref(e, {3})}, {ref(d, {2, 3})});
  EXPECT_NE(wrongResult.find("result [2,3] should be [3]"), std::string::npos) << wrongResult;
  EXPECT_NE(failureOf(OpKind::Transpose, {ref(d, {2, 3})}, {ref(d, {3, 2})}, {{"permutation", {0, 0}}})
                .find("permutation must be a permutation of [0, rank)"),
            std::string::npos);
  EXPECT_NE(failureOf(OpKind::ReduceSum, {ref(d, {2, 3})}, {ref(e, {3})}, {{"axes", {1, 0}}})
                .find("reduction axes must be sorted and unique"),
            std::string::npos);
  EXPECT_NE(failureOf(OpKind::Concat, {ref(d, {2, 3}), ref(e, {1, 3})}, {ref(f, {3, 3})}, {{"axis", 1}})
                .find("inputs differ in dim 0 outside the axis"),
            std::string::npos);
}
