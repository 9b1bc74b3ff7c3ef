//===- AttentionKernelsTest.cpp - cpc.attention(_grad) against the ops it replaces ===//
#include "kernels/Float16.h"
#include "kernels/cpu/Kernel.h"
#include "tests/unit/TestUtil.h"
#include "tests/unit/kernels/KernelTestUtil.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

using namespace cpc;
using namespace cpc::kernels;
using namespace cpc::kernels::testing;
using cpc::test::expectError;
using cpc::test::randomFloats;

namespace {

struct Shape {
  std::vector<int64_t> batch;
  int64_t n, m, d, dv;
  double scale;
};

void PrintTo(const Shape &s, std::ostream *os) {
  *os << "batch " << s.batch.size() << " dims, N=" << s.n << " M=" << s.m << " D=" << s.d << " Dv=" << s.dv
      << " scale=" << s.scale;
}

std::vector<int64_t> dims(const Shape &s, int64_t rows, int64_t cols) {
  std::vector<int64_t> out = s.batch;
  out.push_back(rows);
  out.push_back(cols);
  return out;
}

int64_t count(const std::vector<int64_t> &shape) { return numElements(shape); }

/// Everything one case computes: the operands, and the results of both paths.
struct Attention {
  Shape s;
  std::vector<float> q, k, v, g;
  std::vector<float> out, p, dq, dk, dv;

  explicit Attention(const Shape &shape)
      : s(shape), q(randomFloats(count(dims(s, s.n, s.d)), 1, -2, 2)), k(randomFloats(count(dims(s, s.m, s.d)), 2, -2, 2)),
        v(randomFloats(count(dims(s, s.m, s.dv)), 3)), g(randomFloats(count(dims(s, s.n, s.dv)), 4)),
        out(count(dims(s, s.n, s.dv))), p(count(dims(s, s.n, s.m))), dq(q.size()), dk(k.size()),
        dv(v.size()) {}

  std::vector<TensorRef> operands() {
    return {ref(q, dims(s, s.n, s.d)), ref(k, dims(s, s.m, s.d)), ref(v, dims(s, s.m, s.dv))};
  }
  nlohmann::json attrs() const { return {{"scale", s.scale}}; }

  /// The fused kernels.
  void fused(int threads) {
    run(OpKind::Attention, operands(), {ref(out, dims(s, s.n, s.dv)), ref(p, dims(s, s.n, s.m))}, attrs(), threads);
    std::vector<TensorRef> in = operands();
    in.push_back(ref(p, dims(s, s.n, s.m)));
    in.push_back(ref(g, dims(s, s.n, s.dv)));
    run(OpKind::AttentionGrad, in, {ref(dq, dims(s, s.n, s.d)), ref(dk, dims(s, s.m, s.d)), ref(dv, dims(s, s.m, s.dv))},
        attrs(), threads);
  }

  /// The ops the graph has without the fusion, and their VJPs as autodiff builds them.
  void separate() {
    auto S = dims(s, s.n, s.m), Q = dims(s, s.n, s.d), K = dims(s, s.m, s.d), V = dims(s, s.m, s.dv),
         O = dims(s, s.n, s.dv);
    std::vector<float> scores(count(S)), scaled(count(S)), dp(count(S)), ds(count(S)), dss(count(S));
    std::vector<float> scale{float(s.scale)};
    run(OpKind::MatMul, {ref(q, Q), ref(k, K)}, {ref(scores, S)}, {{"transpose_rhs", true}});
    run(OpKind::Mul, {ref(scores, S), ref(scale, {})}, {ref(scaled, S)});
    run(OpKind::Softmax, {ref(scaled, S)}, {ref(p, S)}, {{"axis", (int64_t)S.size() - 1}});
    run(OpKind::MatMul, {ref(p, S), ref(v, V)}, {ref(out, O)});
    run(OpKind::MatMul, {ref(p, S), ref(g, O)}, {ref(dv, V)}, {{"transpose_lhs", true}});
    run(OpKind::MatMul, {ref(g, O), ref(v, V)}, {ref(dp, S)}, {{"transpose_rhs", true}});
    run(OpKind::SoftmaxGrad, {ref(p, S), ref(dp, S)}, {ref(ds, S)}, {{"axis", (int64_t)S.size() - 1}});
    run(OpKind::Mul, {ref(ds, S), ref(scale, {})}, {ref(dss, S)});
    run(OpKind::MatMul, {ref(dss, S), ref(k, K)}, {ref(dq, Q)});
    run(OpKind::MatMul, {ref(dss, S), ref(q, Q)}, {ref(dk, K)}, {{"transpose_lhs", true}});
  }
};

/// Largest |a - b| over max(1, |b|).
double worst(const std::vector<float> &a, const std::vector<float> &b) {
  EXPECT_EQ(a.size(), b.size());
  double w = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i)
    w = std::max(w, std::abs(double(a[i]) - double(b[i])) / std::max(1.0, std::abs(double(b[i]))));
  return w;
}

class AttentionKernels : public ::testing::TestWithParam<Shape> {};

// Tests that the fused kernels give what matmul, mul, softmax, matmul and their VJPs give
// (the same roundings; GEMMs cut differently may differ in the last bits): one slice, heads,
// several blocks of query rows in the gradient (M = 1500), keys != queries, Dv != D, a
// negative scale.
TEST_P(AttentionKernels, EqualTheSeparateOps) {
  Attention fused(GetParam()), separate(GetParam());
  fused.fused(2);
  separate.separate();
  EXPECT_LE(worst(fused.out, separate.out), 1e-6);
  EXPECT_LE(worst(fused.p, separate.p), 1e-6);
  EXPECT_LE(worst(fused.dq, separate.dq), 1e-5);
  EXPECT_LE(worst(fused.dk, separate.dk), 1e-5);
  EXPECT_LE(worst(fused.dv, separate.dv), 1e-6);
}

INSTANTIATE_TEST_SUITE_P(Shapes, AttentionKernels,
                         ::testing::Values(Shape{{}, 5, 5, 4, 4, 0.5}, Shape{{2, 3}, 17, 9, 8, 5, 0.35},
                                           Shape{{3}, 40, 1500, 16, 16, 0.25}, Shape{{2}, 7, 3, 6, 2, -1.25},
                                           Shape{{4, 2}, 50, 50, 64, 64, 0.125}));

// Tests that results do not depend on the thread count, bit for bit (slices run whole on one
// thread each).
TEST(AttentionKernelsThreads, OneAndThreeThreadsAgreeBitForBit) {
  Shape s{{8, 6}, 50, 50, 32, 32, 0.17};
  Attention one(s), three(s);
  one.fused(1);
  three.fused(3);
  EXPECT_EQ(one.out, three.out);
  EXPECT_EQ(one.p, three.p);
  EXPECT_EQ(one.dq, three.dq);
  EXPECT_EQ(one.dk, three.dk);
  EXPECT_EQ(one.dv, three.dv);
}

/// [B, X, Y, C] -> [B, Y, X, C]: head-major <-> token-major.
std::vector<float> swapMiddle(const std::vector<float> &in, int64_t b, int64_t x, int64_t y, int64_t c) {
  std::vector<float> out(in.size());
  for (int64_t i = 0; i < b; ++i)
    for (int64_t j = 0; j < x; ++j)
      for (int64_t r = 0; r < y; ++r)
        std::copy_n(in.begin() + ((i * x + j) * y + r) * c, c, out.begin() + ((i * y + r) * x + j) * c);
  return out;
}

// Tests that token-major operands (layout "bnhd": q [B, N, H, D], each token's heads side by
// side) give the head-major results bit for bit: the same GEMMs, with leading dims that step
// over the other heads; probabilities [B, H, N, M] in both; at 1 and 3 threads.
TEST(AttentionKernelsLayout, TokenMajorEqualsHeadMajorBitForBit) {
  const int64_t B = 3, H = 4;
  Shape s{{B, H}, 17, 9, 8, 5, 0.35};
  Attention head(s);
  head.fused(1);
  auto tokenMajor = [&](const std::vector<float> &x, int64_t rows, int64_t cols) {
    return swapMiddle(x, B, H, rows, cols);
  };
  std::vector<float> q = tokenMajor(head.q, s.n, s.d), k = tokenMajor(head.k, s.m, s.d),
                     v = tokenMajor(head.v, s.m, s.dv), g = tokenMajor(head.g, s.n, s.dv);
  nlohmann::json attrs = {{"scale", s.scale}, {"layout", "bnhd"}};
  for (int threads : {1, 3}) {
    std::vector<float> out(head.out.size()), p(head.p.size()), dq(q.size()), dk(k.size()), dv(v.size());
    std::vector<TensorRef> in = {ref(q, {B, s.n, H, s.d}), ref(k, {B, s.m, H, s.d}), ref(v, {B, s.m, H, s.dv})};
    run(OpKind::Attention, in, {ref(out, {B, s.n, H, s.dv}), ref(p, {B, H, s.n, s.m})}, attrs, threads);
    in.push_back(ref(p, {B, H, s.n, s.m}));
    in.push_back(ref(g, {B, s.n, H, s.dv}));
    run(OpKind::AttentionGrad, in, {ref(dq, {B, s.n, H, s.d}), ref(dk, {B, s.m, H, s.d}), ref(dv, {B, s.m, H, s.dv})},
        attrs, threads);
    EXPECT_EQ(out, tokenMajor(head.out, s.n, s.dv)) << threads;
    EXPECT_EQ(p, head.p) << threads;
    EXPECT_EQ(dq, tokenMajor(head.dq, s.n, s.d)) << threads;
    EXPECT_EQ(dk, tokenMajor(head.dk, s.m, s.d)) << threads;
    EXPECT_EQ(dv, tokenMajor(head.dv, s.m, s.dv)) << threads;
  }
  // Probabilities in the token-major order of q are refused by name.
  std::vector<float> out(head.out.size()), p(head.p.size());
  expectError([&] {
    run(OpKind::Attention, {ref(q, {B, s.n, H, s.d}), ref(k, {B, s.m, H, s.d}), ref(v, {B, s.m, H, s.dv})},
        {ref(out, {B, s.n, H, s.dv}), ref(p, {B, s.n, H, s.m})}, attrs);
  }, {"probabilities"});
}

// Tests that 16-bit operands compute in f32: the results are the f32 kernels' on the widened
// operands, rounded once.
TEST(AttentionKernels16, Bf16IsTheF32ResultRounded) {
  Shape s{{2}, 9, 11, 8, 4, 0.3};
  Attention wide(s);
  for (auto *v : {&wide.q, &wide.k, &wide.v, &wide.g}) // values that bf16 holds exactly
    for (float &x : *v)
      x = load16(DType::BF16, store16(DType::BF16, x));
  auto narrow = [](const std::vector<float> &v) {
    std::vector<uint16_t> h(v.size());
    for (size_t i = 0; i < v.size(); ++i)
      h[i] = store16(DType::BF16, v[i]);
    return h;
  };
  std::vector<uint16_t> q = narrow(wide.q), k = narrow(wide.k), v = narrow(wide.v), out(wide.out.size()),
                        p(wide.p.size());
  run(OpKind::Attention,
      {ref(q, dims(s, s.n, s.d), DType::BF16), ref(k, dims(s, s.m, s.d), DType::BF16), ref(v, dims(s, s.m, s.dv), DType::BF16)},
      {ref(out, dims(s, s.n, s.dv), DType::BF16), ref(p, dims(s, s.n, s.m), DType::BF16)}, wide.attrs());
  wide.fused(1);
  for (size_t i = 0; i < out.size(); ++i)
    EXPECT_EQ(out[i], store16(DType::BF16, wide.out[i])) << i;
  for (size_t i = 0; i < p.size(); ++i)
    EXPECT_EQ(p[i], store16(DType::BF16, wide.p[i])) << i;
}

// Tests the empty cases: no keys gives a zero result; no query rows gives zero key and value
// gradients (empty sums).
TEST(AttentionKernelsEdges, EmptySumsAreZero) {
  Shape noKeys{{2}, 3, 0, 4, 5, 1.0};
  Attention a(noKeys);
  std::fill(a.out.begin(), a.out.end(), 7.f);
  run(OpKind::Attention, a.operands(), {ref(a.out, dims(noKeys, 3, 5)), ref(a.p, dims(noKeys, 3, 0))}, a.attrs());
  EXPECT_TRUE(std::all_of(a.out.begin(), a.out.end(), [](float x) { return x == 0.f; }));
  Shape noRows{{2}, 0, 3, 4, 5, 1.0};
  Attention b(noRows);
  std::fill(b.dk.begin(), b.dk.end(), 7.f);
  std::fill(b.dv.begin(), b.dv.end(), 7.f);
  b.fused(1);
  EXPECT_TRUE(std::all_of(b.dk.begin(), b.dk.end(), [](float x) { return x == 0.f; }));
  EXPECT_TRUE(std::all_of(b.dv.begin(), b.dv.end(), [](float x) { return x == 0.f; }));
}

// Tests that mismatched operands fail with a message naming what is wrong.
TEST(AttentionKernelsErrors, MismatchedOperandsFailClearly) {
  Shape s{{2}, 3, 4, 5, 6, 1.0};
  Attention a(s);
  auto call = [&](std::vector<TensorRef> in, std::vector<TensorRef> out) {
    return [&a, in, out] { run(OpKind::Attention, in, out, a.attrs()); };
  };
  std::vector<TensorRef> outs = {ref(a.out, {2, 3, 6}), ref(a.p, {2, 3, 4})};
  expectError(call({ref(a.q, {2, 3, 5}), ref(a.k, {2, 5, 4}), ref(a.v, {2, 4, 6})}, outs), {"[..., M, D]"});
  expectError(call({ref(a.q, {2, 3, 5}), ref(a.k, {1, 8, 5}), ref(a.v, {2, 4, 6})}, outs), {"batch dims"});
  expectError(call({ref(a.q, {2, 3, 5}), ref(a.k, {2, 4, 5})}, outs), {"3"});
  expectError(call(a.operands(), {ref(a.out, {2, 3, 6}), ref(a.p, {2, 3, 5})}), {"probabilities"});
}

} // namespace
