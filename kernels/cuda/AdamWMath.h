//===- AdamWMath.h - the AdamW update of one element, GPU and host ---------===//
//
// The arithmetic of kernels/cpu/Optimizer.cpp (torch.optim.AdamW's single-tensor path), in the
// same order and the same types: the step's scalars in double, rounded once to the tensor's
// type T, then per element in T. Every operation is a separately rounded one (fmath::*Rn), since
// nvcc would otherwise fuse a * b + c into an FMA where the CPU kernel (built without
// contraction) rounds twice; torch's lerp is a true FMA and stays one. f16/bf16 parameters
// compute in f32 (T = float), as the CPU kernel's widening does.
//
#ifndef CPC_KERNELS_CUDA_ADAMWMATH_H
#define CPC_KERNELS_CUDA_ADAMWMATH_H

#include "kernels/cuda/ElementwiseMath.h"
#include "kernels/cuda/HostDevice.h"

#include <cmath>

namespace cpc::kernels::cuda {

/// The attributes of cpc.adamw (known on the host).
struct AdamWAttrs {
  double beta1 = 0, beta2 = 0, eps = 0, weightDecay = 0;
};

/// The per-step constants of the update, in the tensor's type.
template <class T> struct AdamWScalars {
  T decay;       // 1 - lr * weight_decay
  T w1, w1m1;    // lerp weight 1 - beta1, and w1 - 1
  bool smallWeight; // |w1| < 0.5: torch's lerp form from the start, else from the end
  T b2, w2;      // beta2, 1 - beta2
  T negStepSize; // -lr / (1 - beta1^step)
  T bc2Sqrt;     // sqrt(1 - beta2^step)
  T eps;
};

/// The constants for learning rate `lr` and step `step` (both read from tensors; on the GPU
/// once per block).
template <class T> CPC_HD AdamWScalars<T> adamwScalars(const AdamWAttrs &a, double lr, double step) {
  using namespace fmath;
  AdamWScalars<T> s;
  const double bc1 = subRn(1.0, ::pow(a.beta1, step)), bc2 = subRn(1.0, ::pow(a.beta2, step));
  s.decay = T(subRn(1.0, mulRn(lr, a.weightDecay)));
  s.w1 = T(subRn(1.0, a.beta1));
  s.smallWeight = fmath::abs(s.w1) < T(0.5);
  s.w1m1 = subRn(s.w1, T(1));
  s.b2 = T(a.beta2);
  s.w2 = T(subRn(1.0, a.beta2));
  s.negStepSize = T(-divRn(lr, bc1));
  s.bc2Sqrt = T(sqrtRn(bc2));
  s.eps = T(a.eps);
  return s;
}

/// torch's vectorized lerp step: fmadd(weight, diff, base). In f32 the product of two floats is
/// exact in double, so double multiply-add then one rounding to f32 is the CPU kernel's form.
CPC_HD float lerpFma(float w, float diff, float base) {
  using namespace fmath;
  return float(addRn(mulRn(double(w), double(diff)), double(base)));
}
CPC_HD double lerpFma(double w, double diff, double base) {
#ifdef __CUDA_ARCH__
  return __fma_rn(w, diff, base);
#else
  return std::fma(w, diff, base);
#endif
}

/// One element: param p, gradient g, moments m and v, updated in place.
template <class T> CPC_HD void adamwUpdate(const AdamWScalars<T> &s, T &p, T g, T &m, T &v) {
  using namespace fmath;
  p = mulRn(p, s.decay);
  T diff = subRn(g, m);
  m = s.smallWeight ? lerpFma(s.w1, diff, m) : lerpFma(s.w1m1, diff, g);
  v = mulRn(v, s.b2);
  v = addRn(v, mulRn(mulRn(s.w2, g), g));
  T denom = addRn(divRn(sqrtRn(v), s.bc2Sqrt), s.eps);
  p = addRn(p, divRn(mulRn(s.negStepSize, m), denom));
}

} // namespace cpc::kernels::cuda

#endif
