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

/// a * b rounded to the type before it is used: nvcc contracts `a * b - c` into one fma, which
/// skips that rounding. Where the CPU's result depends on it (g * scale - mean(g * scale) is
/// exactly 0 for a LayerNorm row of one element, and rstd = 1/sqrt(eps) magnifies any residue),
/// the device must round as the host does.
CPC_HD float roundedProduct(float a, float b) {
#ifdef __CUDA_ARCH__
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}
CPC_HD double roundedProduct(double a, double b) {
#ifdef __CUDA_ARCH__
  return __dmul_rn(a, b);
#else
  return a * b;
#endif
}

#endif
