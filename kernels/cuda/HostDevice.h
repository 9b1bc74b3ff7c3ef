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

#endif
