//===- Random.cu - cpc.random_uniform on the GPU ----------------------------===//
//
// The CPU kernel's counter-based generator (RandomMath.h), one grid-stride launch: element i is
// a function of (seed, step, position) only, so the values equal the CPU's bit for bit whatever the
// launch shape.
//
#include "kernels/Checks.h"
#include "kernels/cuda/CudaCommon.cuh"
#include "kernels/cuda/CudaKernels.h"
#include "kernels/cuda/RandomMath.h"

#include <string>

namespace cpc::kernels {
namespace cuda {
namespace {

// T is the storage type; values are drawn in its compute type (f32 for f16/bf16).
template <typename T>
__global__ void uniformKernel(T *y, int64_t n, int64_t offset, uint64_t key, UniformRange<ComputeT<T>> range) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
    store(y, i, uniformAt(range, key, offset + i));
}

void randomUniformHost(KernelContext &ctx) {
  checkRandomUniform(ctx);
  const TensorRef &out = ctx.outputs[0];
  double low = ctx.attrs.low, high = ctx.attrs.high;
  int64_t n = out.numel();
  const uint64_t key = streamKey((uint64_t)ctx.attrs.seed, ctx.step);
  CudaDevice &device = deviceOf(ctx);
  dispatchDevice<kFloat>(ctx, out.dtype, [&](auto tag) {
    using T = decltype(tag);
    if (n == 0)
      return;
    LaunchConfig config = elementwiseLaunch(n, device.multiprocessors());
    uniformKernel<T><<<(unsigned)config.blocks, config.threads, 0, device.stream()>>>(
        out.as<T>(), n, ctx.randomOffset(n), key, uniformRange<ComputeT<T>>(low, high));
    checkLaunch(ctx);
  });
}

} // namespace
} // namespace cuda

void registerCudaRandomKernels(KernelRegistry &r) {
  for (DType t : cuda::kFloatTypes)
    r.add(OpKind::RandomUniform, DeviceKind::Cuda, t, cuda::randomUniformHost);
}

} // namespace cpc::kernels
