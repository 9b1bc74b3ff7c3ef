//===- Normalization.cpp - layer_norm and softmax --------------------------===//
//
// Both ops read every element before writing its own position, so the output may alias
// the input (in-place execution).
//
#include "kernels/Checks.h"
#include "kernels/cpu/FastMath.h"
#include "kernels/cpu/Dispatch.h"
#include "kernels/cpu/Kernel.h"
#include "kernels/cpu/RowSums.h"
#include "kernels/cpu/SoftmaxRows.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace cpc::kernels {
namespace {

// Mean and biased variance are two passes in double (in lanes, RowSums.h): one-pass formulas lose precision
// when |mean| >> stddev, common for activations.
// With `residual`, each row of x is first replaced by x + residual, rounded in T as cpc.add
// rounds it, and written to `sum` (cpc.add_layer_norm: the row is normalized while in cache).
template <typename T>
void layerNormRows(const KernelContext &ctx, const T *x, const T *scale, const T *bias, T *y,
                   int64_t rows, int64_t n, double eps, const T *residual = nullptr, T *sum = nullptr) {
  int threads = std::max(1, ctx.threads);
#pragma omp parallel for num_threads(threads) if (rows * n > kParallelMin)
  for (int64_t row = 0; row < rows; ++row) {
    const T *xr = x + row * n;
    T *yr = y + row * n;
    if (residual) {
      T *sr = sum + row * n;
      const T *rr = residual + row * n;
      for (int64_t j = 0; j < n; ++j)
        sr[j] = xr[j] + rr[j];
      xr = sr;
    }
    double mean = laneSum(n, [&](int64_t j) { return double(xr[j]); }) / double(n);
    double sq = laneSum(n, [&](int64_t j) {
      double d = double(xr[j]) - mean;
      return d * d;
    });
    double rstd = 1.0 / std::sqrt(sq / double(n) + eps);
    // Fold into y = x*a + b per element in T, which vectorizes.
    const T m = T(mean), rs = T(rstd);
    for (int64_t j = 0; j < n; ++j)
      yr[j] = (xr[j] - m) * rs * scale[j] + bias[j];
  }
}

/// cpc.layer_norm (input, scale, bias -> result), or cpc.add_layer_norm (WithResidual: lhs, rhs,
/// scale, bias -> sum, result).
template <bool WithResidual> void layerNormKernel(KernelContext &ctx) {
  int64_t axis = WithResidual ? checkAddLayerNorm(ctx) : checkLayerNorm(ctx);
  const size_t s = WithResidual ? 2 : 1; // the scale's input
  const TensorRef &in = ctx.inputs[0], &scale = ctx.inputs[s], &bias = ctx.inputs[s + 1];
  const TensorRef &out = ctx.outputs[WithResidual ? 1 : 0];
  int64_t n = numElements({in.shape.begin() + axis, in.shape.end()}), rows = n ? in.numel() / n : 0;
  if (rows == 0 || n == 0)
    return;
  dispatchFloat(ctx, in.dtype, [&](auto zero) {
    using T = decltype(zero);
    layerNormRows<T>(ctx, in.as<T>(), scale.as<T>(), bias.as<T>(), out.as<T>(), rows, n, ctx.attrs.epsilon,
                     WithResidual ? ctx.inputs[1].as<T>() : nullptr, WithResidual ? ctx.outputs[0].as<T>() : nullptr);
  });
}

// Softmax over the middle dim of [outer, len, inner]. inner == 1 is row-wise; otherwise
// blocks of inner elements are processed side by side (contiguous, vectorizable).
template <typename T>
void softmax(const KernelContext &ctx, const T *x, T *y, int64_t outer, int64_t len, int64_t inner) {
  int threads = std::max(1, ctx.threads);
  int64_t total = outer * len * inner;
  if (inner == 1) {
#pragma omp parallel for num_threads(threads) if (total > kParallelMin)
    for (int64_t o = 0; o < outer; ++o)
      softmaxRow(x + o * len, y + o * len, len, T(1));
    return;
  }
  constexpr int64_t kBlock = 256;
  int64_t block = columnBlock(inner, outer, threads, kBlock);
  int64_t blocks = (inner + block - 1) / block;
#pragma omp parallel for num_threads(threads) if (total > kParallelMin)
  for (int64_t task = 0; task < outer * blocks; ++task) {
    int64_t o = task / blocks, i0 = (task % blocks) * block, n = std::min(block, inner - i0);
    const T *xb = x + o * len * inner + i0;
    T *yb = y + o * len * inner + i0;
    T m[kBlock];
    double sum[kBlock];
    for (int64_t i = 0; i < n; ++i) {
      m[i] = -std::numeric_limits<T>::infinity();
      sum[i] = 0;
    }
    for (int64_t j = 0; j < len; ++j)
      for (int64_t i = 0; i < n; ++i)
        m[i] = std::max(m[i], xb[j * inner + i]);
    for (int64_t j = 0; j < len; ++j)
      for (int64_t i = 0; i < n; ++i) {
        T e = fastExp(xb[j * inner + i] - m[i]);
        yb[j * inner + i] = e;
        sum[i] += e;
      }
    T inv[kBlock];
    for (int64_t i = 0; i < n; ++i)
      inv[i] = T(1.0 / sum[i]);
    for (int64_t j = 0; j < len; ++j)
      for (int64_t i = 0; i < n; ++i)
        yb[j * inner + i] *= inv[i];
  }
}

void softmaxKernel(KernelContext &ctx) {
  int64_t axis = checkSoftmax(ctx);
  const TensorRef &in = ctx.inputs[0], &out = ctx.outputs[0];
  int64_t outer = 1, inner = 1, len = in.shape[axis];
  for (int64_t d = 0; d < axis; ++d)
    outer *= in.shape[d];
  for (int64_t d = axis + 1; d < in.rank(); ++d)
    inner *= in.shape[d];
  if (outer * len * inner == 0)
    return;
  dispatchFloat(ctx, in.dtype, [&](auto zero) {
    using T = decltype(zero);
    softmax<T>(ctx, in.as<T>(), out.as<T>(), outer, len, inner);
  });
}

} // namespace

void registerNormalizationKernels(KernelRegistry &r) {
  r.add(OpKind::LayerNorm, layerNormKernel<false>);
  r.add(OpKind::AddLayerNorm, layerNormKernel<true>);
  r.add(OpKind::Softmax, softmaxKernel);
}

} // namespace cpc::kernels
