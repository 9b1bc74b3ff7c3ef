//===- Optimizer.cpp - the AdamW kernels (single and multi-tensor) ---------===//
//
// cpc.adamw(param, grad, exp_avg, exp_avg_sq, lr, step[, grad_scale]) -> (param', exp_avg',
// exp_avg_sq'), bit-for-bit the arithmetic of torch.optim.AdamW's single-tensor (non-foreach)
// CPU path, on grad * grad_scale (rounded to the tensor's type, as cpc.mul; 1 when absent):
//
//   param.mul_(1 - lr * weight_decay)
//   exp_avg.lerp_(grad, 1 - beta1)
//   exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
//   bias_correction1 = 1 - beta1 ** step;  bias_correction2 = 1 - beta2 ** step
//   step_size = lr / bias_correction1;     bias_correction2_sqrt = sqrt(bias_correction2)
//   denom = (exp_avg_sq.sqrt() / bias_correction2_sqrt).add_(eps)
//   param.addcdiv_(exp_avg, denom, value=-step_size)
//
// The scalars are Python floats (double) there and become the tensor's type when they meet
// it; the tensor arithmetic is per element in the tensor's type, in the order written.
// torch's vectorized lerp is fmadd(weight, end - self, self); for f32 that fused multiply-add
// is reproduced exactly enough in double (the product of two floats is exact in double; the
// one double rounding before the float rounding differs from a true fma in rare ties only).
// This file must not be built with FP contraction onto FMA hardware (the kernels library
// targets x86-64-v2, which has none), or the other steps would fuse differently from torch.
//
// All four tensors are read at an index before any output is written there, and nothing else
// is touched, so every output may alias its input (the plan runs the update in place).
//
#include "kernels/Checks.h"
#include "kernels/cpu/Kernel.h"

#include <algorithm>
#include <cmath>

namespace cpc::kernels {
namespace {

// AdamW does more work per element than most kernels: threads pay off sooner.
constexpr int64_t kAdamParallelMin = 1 << 14;

inline float fmadd(float a, float b, float c) { return float(double(a) * double(b) + double(c)); }
inline double fmadd(double a, double b, double c) { return std::fma(a, b, c); }

double readScalar(const KernelContext &ctx, const TensorRef &t, const char *what) {
  if (t.numel() != 1)
    ctx.fail(std::string(what) + " must be a single value, got " + shapeString(t.shape));
  if (t.dtype == DType::F32)
    return *t.as<float>();
  if (t.dtype == DType::F64)
    return *t.as<double>();
  ctx.fail(std::string(what) + " must be f32 or f64, not " + dtypeName(t.dtype));
}

/// What a step's updates share: lr and step (read from their tensors), the gradient's scale and
/// the betas and epsilon.
struct AdamWStep {
  double lr, step, gradScale, beta1, beta2, eps;
};

/// One tensor's update of `n` elements: p, g, m, v -> pOut, mOut, vOut (each may alias its input).
template <typename T>
void adamw(const KernelContext &ctx, const T *p, const T *g, const T *m, const T *v, T *pOut, T *mOut, T *vOut,
           int64_t n, const AdamWStep &s, double wd) {
  const double bc1 = 1.0 - std::pow(s.beta1, s.step), bc2 = 1.0 - std::pow(s.beta2, s.step);
  const T decay = T(1.0 - s.lr * wd);
  const double w1d = 1.0 - s.beta1;
  const T w1 = T(w1d);
  const bool smallWeight = std::abs(w1) < T(0.5); // torch's lerp picks its formula by |weight|
  const T w1m1 = w1 - T(1);
  const T b2 = T(s.beta2), w2 = T(1.0 - s.beta2);
  const T negStepSize = T(-(s.lr / bc1)), bc2Sqrt = T(std::sqrt(bc2)), epsT = T(s.eps);
  const T scale = T(s.gradScale); // x * 1 is x: no scale costs nothing in precision

  int threads = std::max(1, ctx.threads);
#pragma omp parallel for num_threads(threads) if (n > kAdamParallelMin) schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    T pi = p[i], gi = g[i] * scale, mi = m[i], vi = v[i];
    pi = pi * decay;
    T diff = gi - mi;
    mi = smallWeight ? fmadd(w1, diff, mi) : fmadd(w1m1, diff, gi);
    vi = vi * b2;
    vi = vi + w2 * gi * gi;
    T denom = std::sqrt(vi) / bc2Sqrt + epsT;
    pi = pi + negStepSize * mi / denom;
    pOut[i] = pi;
    mOut[i] = mi;
    vOut[i] = vi;
  }
}

/// One tensor's update on its element type (f32 or f64).
void adamwTensor(const KernelContext &ctx, const TensorRef &p, const TensorRef &g, const TensorRef &m,
                 const TensorRef &v, const TensorRef &pOut, const TensorRef &mOut, const TensorRef &vOut,
                 const AdamWStep &s, double wd) {
  if (p.numel() == 0)
    return;
  auto run = [&](auto zero) {
    using T = decltype(zero);
    adamw(ctx, p.as<T>(), g.as<T>(), m.as<T>(), v.as<T>(), pOut.as<T>(), mOut.as<T>(), vOut.as<T>(), p.numel(), s, wd);
  };
  if (p.dtype == DType::F32)
    return run(float{});
  if (p.dtype == DType::F64)
    return run(double{});
  ctx.fail(std::string("element type ") + dtypeName(p.dtype) + " is not supported (f32 or f64 only)");
}

/// The shared part of a step, from its lr, step and (when given) grad_scale tensors.
AdamWStep stepOf(const KernelContext &ctx, const TensorRef &lr, const TensorRef &step, const TensorRef *gradScale) {
  AdamWStep s{readScalar(ctx, lr, "lr"), readScalar(ctx, step, "step"),
              gradScale ? readScalar(ctx, *gradScale, "grad_scale") : 1.0, ctx.attrs.beta1, ctx.attrs.beta2,
              ctx.attrs.epsilon};
  if (!(s.step >= 1))
    ctx.fail("step must be >= 1, got " + std::to_string(s.step));
  return s;
}

void adamwKernel(KernelContext &ctx) {
  checkAdamW(ctx);
  const auto &in = ctx.inputs;
  const auto &out = ctx.outputs;
  AdamWStep s = stepOf(ctx, in[4], in[5], in.size() > 6 ? &in[6] : nullptr);
  adamwTensor(ctx, in[0], in[1], in[2], in[3], out[0], out[1], out[2], s, ctx.attrs.weightDecay);
}

/// cpc.multi_tensor_adamw(lr, step, grad_scale, params..., grads..., exp_avgs..., exp_avg_sqs...):
/// each tensor's update is cpc.adamw's, one after another (each split over the threads when big).
void multiTensorAdamWKernel(KernelContext &ctx) {
  size_t n = checkMultiTensorAdamW(ctx);
  const auto &in = ctx.inputs;
  const auto &out = ctx.outputs;
  AdamWStep s = stepOf(ctx, in[0], in[1], &in[2]);
  for (size_t i = 0; i < n; ++i)
    adamwTensor(ctx, in[3 + i], in[3 + n + i], in[3 + 2 * n + i], in[3 + 3 * n + i], out[i], out[n + i],
                out[2 * n + i], s, ctx.attrs.weightDecays[i]);
}

} // namespace

void registerOptimizerKernels(KernelRegistry &r) {
  r.add(OpKind::AdamW, adamwKernel);
  r.add(OpKind::MultiTensorAdamW, multiTensorAdamWKernel);
}

} // namespace cpc::kernels
