//===- ResidualNormKernelsTest.cpp - add_layer_norm, layer_norm_grad_add ----===//
//
// The fused residual kernels against the separate ones they replace (cpc.add then
// cpc.layer_norm; cpc.layer_norm_grad then cpc.add): bit for bit, in f32 and f64, normalizing
// the last dim or the last two, at 1 and 2 threads.
//
#include "tests/unit/TestUtil.h"
#include "tests/unit/kernels/KernelTestUtil.h"

#include <gtest/gtest.h>

using namespace cpc;
using namespace cpc::kernels;
using namespace cpc::kernels::testing;
using cpc::test::expectError;
using cpc::test::uniformValues;

namespace {

struct Case {
  std::vector<int64_t> shape;
  int64_t axis;
};

std::vector<int64_t> normalizedShape(const Case &c) { return {c.shape.begin() + c.axis, c.shape.end()}; }

template <typename T> void checkForward(const Case &c, DType t, int threads) {
  int64_t n = numElements(c.shape), k = numElements(normalizedShape(c));
  std::vector<T> a = uniformValues<T>(n, 1, T(-3), T(3)), b = uniformValues<T>(n, 2), scale = uniformValues<T>(k, 3),
                 bias = uniformValues<T>(k, 4);
  nlohmann::json attrs = {{"axis", c.axis}, {"epsilon", 1e-6}};
  std::vector<T> sum(n), want(n), fusedSum(n), fused(n);
  run(OpKind::Add, {ref(a, c.shape, t), ref(b, c.shape, t)}, {ref(sum, c.shape, t)}, nlohmann::json::object(), threads);
  run(OpKind::LayerNorm, {ref(sum, c.shape, t), ref(scale, normalizedShape(c), t), ref(bias, normalizedShape(c), t)},
      {ref(want, c.shape, t)}, attrs, threads);
  run(OpKind::AddLayerNorm,
      {ref(a, c.shape, t), ref(b, c.shape, t), ref(scale, normalizedShape(c), t), ref(bias, normalizedShape(c), t)},
      {ref(fusedSum, c.shape, t), ref(fused, c.shape, t)}, attrs, threads);
  EXPECT_EQ(fusedSum, sum);
  EXPECT_EQ(fused, want);
}

template <typename T> void checkBackward(const Case &c, DType t, int threads) {
  int64_t n = numElements(c.shape), k = numElements(normalizedShape(c));
  std::vector<T> x = uniformValues<T>(n, 5, T(-3), T(3)), g = uniformValues<T>(n, 6), r = uniformValues<T>(n, 7),
                 scale = uniformValues<T>(k, 8);
  nlohmann::json attrs = {{"axis", c.axis}, {"epsilon", 1e-6}};
  std::vector<T> dx(n), want(n), ds(k), db(k), fused(n), fds(k), fdb(k);
  std::vector<TensorRef> in = {ref(x, c.shape, t), ref(scale, normalizedShape(c), t), ref(g, c.shape, t)};
  run(OpKind::LayerNormGrad, in, {ref(dx, c.shape, t), ref(ds, normalizedShape(c), t), ref(db, normalizedShape(c), t)},
      attrs, threads);
  run(OpKind::Add, {ref(dx, c.shape, t), ref(r, c.shape, t)}, {ref(want, c.shape, t)}, nlohmann::json::object(), threads);
  in.push_back(ref(r, c.shape, t));
  run(OpKind::LayerNormGradAdd, in,
      {ref(fused, c.shape, t), ref(fds, normalizedShape(c), t), ref(fdb, normalizedShape(c), t)}, attrs, threads);
  EXPECT_EQ(fused, want);
  EXPECT_EQ(fds, ds);
  EXPECT_EQ(fdb, db);
}

/// Runs check(case, threads) on MAE's row shape, two normalized dims and many rows, at 1 and 2
/// threads.
template <typename F> void forEachCase(F check) {
  for (const Case &c : {Case{{4, 17, 192}, 2}, Case{{3, 5, 6, 7}, 2}, Case{{600, 128}, 1}})
    for (int threads : {1, 2}) {
      SCOPED_TRACE(threads);
      check(c, threads);
    }
}

// Tests that add_layer_norm writes the add's sum and the LayerNorm of it, bit for bit.
TEST(ResidualNormKernels, AddLayerNormIsAddThenLayerNorm) {
  forEachCase([](const Case &c, int threads) {
    checkForward<float>(c, DType::F32, threads);
    checkForward<double>(c, DType::F64, threads);
  });
}

// Tests that layer_norm_grad_add is layer_norm_grad with the addend added to its input
// gradient, bit for bit (the scale and bias gradients unchanged).
TEST(ResidualNormKernels, LayerNormGradAddIsGradThenAdd) {
  forEachCase([](const Case &c, int threads) {
    checkBackward<float>(c, DType::F32, threads);
    checkBackward<double>(c, DType::F64, threads);
  });
}

// Tests that operands of different shapes fail by name.
TEST(ResidualNormKernels, MismatchedOperandsFailClearly) {
  std::vector<float> a(12), b(8), s(4), out(12), sum(12);
  expectError([&] {
    run(OpKind::AddLayerNorm, {ref(a, {3, 4}), ref(b, {2, 4}), ref(s, {4}), ref(s, {4})}, {ref(sum, {3, 4}), ref(out, {3, 4})},
        {{"axis", 1}, {"epsilon", 1e-5}});
  }, {"rhs"});
  expectError([&] {
    run(OpKind::LayerNormGradAdd, {ref(a, {3, 4}), ref(s, {4}), ref(a, {3, 4}), ref(b, {2, 4})},
        {ref(out, {3, 4}), ref(s, {4}), ref(s, {4})}, {{"axis", 1}, {"epsilon", 1e-5}});
  }, {"addend"});
}

} // namespace
