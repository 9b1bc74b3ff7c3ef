//===- NormalizationKernelsTest.cpp - layer_norm and softmax ---------------===//
#include "kernels/cpu/Kernel.h"

#include <gtest/gtest.h>

#include <cmath>

using namespace cpc;
using namespace cpc::kernels;

namespace {

template <typename T> TensorRef ref(std::vector<T> &v, DType t, std::vector<int64_t> shape) {
  return TensorRef{v.data(), t, std::move(shape)};
}

void run(OpKind op, std::vector<TensorRef> ins, TensorRef out, nlohmann::json attrs, int threads = 1) {
  KernelFn fn = KernelRegistry::cpu().find(op);
  ASSERT_NE(fn, nullptr) << op;
  KernelContext ctx;
  ctx.op = op;
  ctx.inputs = std::move(ins);
  ctx.outputs = {std::move(out)};
  ctx.setAttrs(attrs);
  ctx.threads = threads;
  fn(ctx);
}

// Reference layer norm over the trailing `n` elements of each row, in double.
std::vector<double> layerNormRef(const std::vector<float> &x, const std::vector<float> &scale,
                                 const std::vector<float> &bias, int64_t n, double eps) {
  std::vector<double> y(x.size());
  for (size_t r = 0; r < x.size() / n; ++r) {
    double mean = 0, var = 0;
    for (int64_t j = 0; j < n; ++j)
      mean += x[r * n + j];
    mean /= n;
    for (int64_t j = 0; j < n; ++j)
      var += (x[r * n + j] - mean) * (x[r * n + j] - mean);
    var /= n;
    for (int64_t j = 0; j < n; ++j)
      y[r * n + j] = (x[r * n + j] - mean) / std::sqrt(var + eps) * scale[j] + bias[j];
  }
  return y;
}

} // namespace

TEST(NormalizationKernels, LayerNormLastAxisMatchesDoubleReference) {
  const int64_t rows = 5, n = 8;
  std::vector<float> x(rows * n), scale(n), bias(n), y(rows * n);
  for (int64_t i = 0; i < rows * n; ++i)
    x[i] = 1000.f + std::sin(float(i)) * 3; // large mean, small spread
  for (int64_t j = 0; j < n; ++j) {
    scale[j] = 0.5f + 0.1f * j;
    bias[j] = -0.25f * j;
  }
  run(OpKind::LayerNorm, {ref(x, DType::F32, {rows, n}), ref(scale, DType::F32, {n}), ref(bias, DType::F32, {n})},
      ref(y, DType::F32, {rows, n}), {{"axis", 1}, {"epsilon", 1e-5}});
  auto expect = layerNormRef(x, scale, bias, n, 1e-5);
  for (size_t i = 0; i < y.size(); ++i)
    EXPECT_NEAR(y[i], expect[i], 2e-4) << i;
}

TEST(NormalizationKernels, LayerNormMultipleDimsInPlace) {
  // axis 1 of [2,3,2]: each of the 2 rows normalizes 6 elements with a [3,2] scale.
  std::vector<float> x(12), scale(6), bias(6);
  for (int i = 0; i < 12; ++i)
    x[i] = float(i * i % 7) - 2;
  for (int j = 0; j < 6; ++j) {
    scale[j] = 1 + j;
    bias[j] = 0.5f;
  }
  auto expect = layerNormRef(x, scale, bias, 6, 1e-3);
  run(OpKind::LayerNorm, {ref(x, DType::F32, {2, 3, 2}), ref(scale, DType::F32, {3, 2}), ref(bias, DType::F32, {3, 2})},
      ref(x, DType::F32, {2, 3, 2}), {{"axis", 1}, {"epsilon", 1e-3}});
  for (int i = 0; i < 12; ++i)
    EXPECT_NEAR(x[i], expect[i], 1e-5) << i;
}

TEST(NormalizationKernels, LayerNormF64AndBadScaleShape) {
  std::vector<double> x{1, 2, 3, 4}, scale{1, 1}, bias{0, 0}, y(4);
  run(OpKind::LayerNorm, {ref(x, DType::F64, {2, 2}), ref(scale, DType::F64, {2}), ref(bias, DType::F64, {2})},
      ref(y, DType::F64, {2, 2}), {{"axis", 1}, {"epsilon", 0.0}});
  EXPECT_DOUBLE_EQ(y[0], -1);
  EXPECT_DOUBLE_EQ(y[1], 1);
  EXPECT_THROW(run(OpKind::LayerNorm, {ref(x, DType::F64, {2, 2}), ref(scale, DType::F64, {1}),
                                      ref(bias, DType::F64, {2})},
                   ref(y, DType::F64, {2, 2}), {{"axis", 1}, {"epsilon", 0.0}}),
               RuntimeError);
}

TEST(NormalizationKernels, SoftmaxLastAxis) {
  std::vector<float> x{1, 2, 3, 1000, 1000, 1000}, y(6);
  run(OpKind::Softmax, {ref(x, DType::F32, {2, 3})}, ref(y, DType::F32, {2, 3}), {{"axis", 1}});
  double z = std::exp(1.0) + std::exp(2.0) + std::exp(3.0);
  for (int j = 0; j < 3; ++j)
    EXPECT_NEAR(y[j], std::exp(1.0 + j) / z, 1e-6);
  for (int j = 3; j < 6; ++j)
    EXPECT_NEAR(y[j], 1.0 / 3, 1e-6); // max subtraction keeps large inputs finite
}

TEST(NormalizationKernels, SoftmaxAxis0AndMiddle) {
  // [3,2] over axis 0: columns sum to one.
  std::vector<double> x{0, 10, 1, 20, 2, 30}, y(6);
  run(OpKind::Softmax, {ref(x, DType::F64, {3, 2})}, ref(y, DType::F64, {3, 2}), {{"axis", 0}});
  for (int c = 0; c < 2; ++c) {
    double z = 0;
    for (int r = 0; r < 3; ++r)
      z += std::exp(x[r * 2 + c]);
    for (int r = 0; r < 3; ++r)
      EXPECT_NEAR(y[r * 2 + c], std::exp(x[r * 2 + c]) / z, 1e-12);
  }
  // [2,4,40] over the middle axis, in place, large enough to go parallel in blocks.
  const int64_t a = 2, len = 4, inner = 40;
  std::vector<float> v(a * len * inner), orig;
  for (size_t i = 0; i < v.size(); ++i)
    v[i] = std::cos(float(i)) * 5;
  orig = v;
  run(OpKind::Softmax, {ref(v, DType::F32, {a, len, inner})}, ref(v, DType::F32, {a, len, inner}),
      {{"axis", 1}}, 4);
  for (int64_t o = 0; o < a; ++o)
    for (int64_t i = 0; i < inner; ++i) {
      double z = 0;
      for (int64_t j = 0; j < len; ++j)
        z += std::exp(double(orig[(o * len + j) * inner + i]));
      for (int64_t j = 0; j < len; ++j)
        EXPECT_NEAR(v[(o * len + j) * inner + i], std::exp(double(orig[(o * len + j) * inner + i])) / z, 1e-6);
    }
}

TEST(NormalizationKernels, SoftmaxRejectsBadAxis) {
  std::vector<float> x(4), y(4);
  EXPECT_THROW(run(OpKind::Softmax, {ref(x, DType::F32, {4})}, ref(y, DType::F32, {4}), {{"axis", 1}}), RuntimeError);
}
