//===- FastMath.h - vectorizable f32 erf and exp --------------------------===//
//
// glibc's erff/expf are scalar calls, which keeps GELU and its gradient from vectorizing; these
// branch-free forms do (max error: erf 4e-7 absolute, exp 3e-7 relative, i.e. a few f32 ulps).
// Doubles use the exact library functions. The f32 forms are CPC_HD: the CUDA kernels
// (kernels/cuda/ElementwiseMath.h) compute the same approximation, from this one definition.
//
#ifndef CPC_KERNELS_CPU_FASTMATH_H
#define CPC_KERNELS_CPU_FASTMATH_H

#include "kernels/cuda/HostDevice.h"

#include <cmath>
#include <cstdint>
#include <cstring>

namespace cpc::kernels {

/// Rational minimax approximation of erf on [-4, 4] (|erf| rounds to 1 in f32 beyond).
CPC_HD float fastErf(float x) {
  x = x < -4.0f ? -4.0f : (x > 4.0f ? 4.0f : x);
  const float x2 = x * x;
  float p = -2.72614225801306e-10f;
  p = p * x2 + 2.77068142495902e-08f;
  p = p * x2 + -2.10102402082508e-06f;
  p = p * x2 + -5.69250639462346e-05f;
  p = p * x2 + -7.34990630326855e-04f;
  p = p * x2 + -2.95459980854025e-03f;
  p = p * x2 + -1.60960333262415e-02f;
  float q = -1.45660718464996e-05f;
  q = q * x2 + -2.13374055278905e-04f;
  q = q * x2 + -1.68282697438203e-03f;
  q = q * x2 + -7.37332916720468e-03f;
  q = q * x2 + -1.42647390514189e-02f;
  return p * x / q;
}
inline double fastErf(double x) { return std::erf(x); }

/// exp(x) = 2^n exp(r) with r = x - n ln2 (Cody-Waite split) and a degree-6 Taylor polynomial.
CPC_HD float fastExp(float x) {
  x = x < -87.3f ? -87.3f : (x > 88.7f ? 88.7f : x);
  // Round to nearest by the 1.5 * 2^23 trick: a plain add, which vectorizes (nearbyint does not).
  const float magic = 12582912.0f;
  float n = (x * 1.44269504088896341f + magic) - magic;
  float r = x - n * 0.693145751953125f;
  r = r - n * 1.42860682030941723212e-6f;
  float p = 1.0f / 720;
  p = p * r + 1.0f / 120;
  p = p * r + 1.0f / 24;
  p = p * r + 1.0f / 6;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  // A NaN input stays NaN through p; its n must not reach the int conversion (undefined).
  int32_t bits = ((n == n ? (int32_t)n : 0) + 127) << 23;
#ifdef __CUDA_ARCH__
  float scale = __int_as_float(bits);
#else
  float scale;
  std::memcpy(&scale, &bits, 4);
#endif
  return p * scale;
}
inline double fastExp(double x) { return std::exp(x); }

} // namespace cpc::kernels

#endif
