//===- HostDevice.h - code that compiles for the GPU and for the host ------===//
//
// The per-element, per-row and per-tile arithmetic of the CUDA kernels lives in headers marked
// CPC_HD: nvcc compiles it into the kernels, the host compiler into the unit tests that check
// it against the CPU kernels (tests/unit/cuda), so the numerics are tested without a GPU.
//
#ifndef CPC_KERNELS_CUDA_HOSTDEVICE_H
#define CPC_KERNELS_CUDA_HOSTDEVICE_H

#ifdef __CUDACC__
#define CPC_HD __host__ __device__ __forceinline__
#else
#define CPC_HD inline
#endif

#include <cmath>

namespace cpc::kernels::cuda::fmath {

// Exactly rounded single operations that nvcc may not fuse into an FMA (it contracts a * b + c
// by default; the CPU kernels are built without contraction): for results that must match the
// CPU kernels to the bit (AdamW, random_uniform) or where rounding is magnified (LayerNorm rows of
// one element: g * scale - mean(g * scale) must be exactly 0).
CPC_HD float mulRn(float a, float b) {
#ifdef __CUDA_ARCH__
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}
CPC_HD double mulRn(double a, double b) {
#ifdef __CUDA_ARCH__
  return __dmul_rn(a, b);
#else
  return a * b;
#endif
}
CPC_HD float addRn(float a, float b) {
#ifdef __CUDA_ARCH__
  return __fadd_rn(a, b);
#else
  return a + b;
#endif
}
CPC_HD double addRn(double a, double b) {
#ifdef __CUDA_ARCH__
  return __dadd_rn(a, b);
#else
  return a + b;
#endif
}
CPC_HD float subRn(float a, float b) {
#ifdef __CUDA_ARCH__
  return __fsub_rn(a, b);
#else
  return a - b;
#endif
}
CPC_HD double subRn(double a, double b) {
#ifdef __CUDA_ARCH__
  return __dsub_rn(a, b);
#else
  return a - b;
#endif
}
CPC_HD float divRn(float a, float b) {
#ifdef __CUDA_ARCH__
  return __fdiv_rn(a, b);
#else
  return a / b;
#endif
}
CPC_HD double divRn(double a, double b) {
#ifdef __CUDA_ARCH__
  return __ddiv_rn(a, b);
#else
  return a / b;
#endif
}
CPC_HD float sqrtRn(float x) {
#ifdef __CUDA_ARCH__
  return __fsqrt_rn(x);
#else
  return ::sqrtf(x);
#endif
}
CPC_HD double sqrtRn(double x) {
#ifdef __CUDA_ARCH__
  return __dsqrt_rn(x);
#else
  return ::sqrt(x);
#endif
}

} // namespace cpc::kernels::cuda::fmath

#endif
