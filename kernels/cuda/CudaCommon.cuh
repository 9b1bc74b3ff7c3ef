//===- CudaCommon.cuh - what every CUDA kernel file uses -------------------===//
//
// Element types on the device (f32, f64, f16 as __half, bf16 as __nv_bfloat16, the integers,
// i1 as bool), their loads and stores through float (16-bit floats compute in f32 as the CPU
// kernels do), the device and stream of a step, and the launch check.
//
#ifndef CPC_KERNELS_CUDA_CUDACOMMON_CUH
#define CPC_KERNELS_CUDA_CUDACOMMON_CUH

#include "kernels/Kernel.h"
#include "kernels/cuda/HostDevice.h"
#include "kernels/cuda/Launch.h"
#include "runtime/cuda/CudaDevice.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <string>

namespace cpc::kernels::cuda {

/// The GPU a step runs on; fails the step when the context has none.
inline CudaDevice &deviceOf(const KernelContext &ctx) {
  if (!ctx.device || ctx.device->kind() != DeviceKind::Cuda)
    ctx.fail("a CUDA kernel needs a CUDA device");
  return *static_cast<CudaDevice *>(ctx.device);
}
inline cudaStream_t streamOf(const KernelContext &ctx) { return deviceOf(ctx).stream(); }
/// A grid-stride loop of `i` over [0, n) (elementwiseLaunch's grids).
#define CPC_GRID_STRIDE(i, n)                                                                                        \
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < (n); i += (int64_t)gridDim.x * blockDim.x)

/// Where a kernel that can fault reports (kernels/KernelFault.h).
inline FaultSink faultSinkOf(const KernelContext &ctx) { return deviceOf(ctx).faultSink(); }

/// Fails the step when the last launch was refused (bad configuration, no kernel image).
inline void checkLaunch(const KernelContext &ctx) {
  cudaError_t status = cudaGetLastError();
  if (status != cudaSuccess)
    ctx.fail(std::string("kernel launch failed: ") + cudaGetErrorString(status));
}

/// Float arithmetic type of a storage type: 16-bit floats compute in f32.
template <typename T> struct Compute { using type = T; };
template <> struct Compute<__half> { using type = float; };
template <> struct Compute<__nv_bfloat16> { using type = float; };
template <typename T> using ComputeT = typename Compute<T>::type;

template <typename T> __device__ __forceinline__ ComputeT<T> load(const T *p, int64_t i) { return p[i]; }
template <> __device__ __forceinline__ float load(const __half *p, int64_t i) { return __half2float(p[i]); }
template <> __device__ __forceinline__ float load(const __nv_bfloat16 *p, int64_t i) { return __bfloat162float(p[i]); }
template <typename T> __device__ __forceinline__ void store(T *p, int64_t i, ComputeT<T> v) { p[i] = v; }
template <> __device__ __forceinline__ void store(__half *p, int64_t i, float v) { p[i] = __float2half_rn(v); }
template <> __device__ __forceinline__ void store(__nv_bfloat16 *p, int64_t i, float v) { p[i] = __float2bfloat16_rn(v); }

/// Calls f(T{}) for the device storage type of `t` (kinds as kernels/cpu/Dispatch.h).
enum : unsigned { kFloat = 1, kInt = 2, kBool = 4, kNum = kFloat | kInt, kAny = 7 };
template <unsigned K, typename F> void dispatchDevice(const KernelContext &ctx, DType t, F &&f) {
  switch (t) {
  case DType::F32: if constexpr ((K & kFloat) != 0) return f(float{}); break;
  case DType::F64: if constexpr ((K & kFloat) != 0) return f(double{}); break;
  case DType::F16: if constexpr ((K & kFloat) != 0) return f(__half{}); break;
  case DType::BF16: if constexpr ((K & kFloat) != 0) return f(__nv_bfloat16{}); break;
  case DType::I64: if constexpr ((K & kInt) != 0) return f(int64_t{}); break;
  case DType::I32: if constexpr ((K & kInt) != 0) return f(int32_t{}); break;
  case DType::I16: if constexpr ((K & kInt) != 0) return f(int16_t{}); break;
  case DType::I8: if constexpr ((K & kInt) != 0) return f(int8_t{}); break;
  case DType::U8: if constexpr ((K & kInt) != 0) return f(uint8_t{}); break;
  case DType::I1: if constexpr ((K & kBool) != 0) return f(bool{}); break;
  }
  ctx.fail(std::string("element type ") + dtypeName(t) + " is not supported by this CUDA kernel");
}

/// The element types a family registers for, by kind.
constexpr DType kFloatTypes[] = {DType::F32, DType::F64, DType::F16, DType::BF16};
constexpr DType kIntTypes[] = {DType::I64, DType::I32, DType::I16, DType::I8, DType::U8};

/// Registers `fn` for `op` on CUDA for every element type of `kinds`.
inline void addFor(KernelRegistry &r, OpKind op, KernelPtr fn, unsigned kinds) {
  if (kinds & kFloat)
    for (DType t : kFloatTypes)
      r.add(op, DeviceKind::Cuda, t, fn);
  if (kinds & kInt)
    for (DType t : kIntTypes)
      r.add(op, DeviceKind::Cuda, t, fn);
  if (kinds & kBool)
    r.add(op, DeviceKind::Cuda, DType::I1, fn);
}

} // namespace cpc::kernels::cuda

#endif
