//===- Optimizer.cu - cpc.adamw on the GPU ----------------------------------===//
//
// cpc.adamw(param, grad, exp_avg, exp_avg_sq, lr, step[, grad_scale]) -> (param', exp_avg',
// exp_avg_sq'), one grid-stride launch per step. lr and step live in device memory: each block's first thread
// reads them and computes the step's constants (AdamWMath.h) into shared memory, so the host
// never waits for the device. Each element is read before its own position is written and
// nothing else is touched, so every output may alias its input (the plan updates in place).
//
#include "kernels/Checks.h"
#include "kernels/cuda/AdamWMath.h"
#include "kernels/cuda/CudaCommon.cuh"
#include "kernels/cuda/CudaKernels.h"

#include <string>

namespace cpc::kernels {
namespace cuda {
namespace {

__device__ double readScalar(const void *p, DType t) {
  switch (t) {
  case DType::F64: return *static_cast<const double *>(p);
  case DType::F16: return __half2float(*static_cast<const __half *>(p));
  case DType::BF16: return __bfloat162float(*static_cast<const __nv_bfloat16 *>(p));
  default: return *static_cast<const float *>(p);
  }
}

/// x rounded to the storage type T, as a store and a load would.
template <typename T> __device__ ComputeT<T> roundTo(ComputeT<T> x) {
  T stored;
  store(&stored, 0, x);
  return load(&stored, 0);
}

// gradScale (null: none) multiplies g first, rounded to T as cpc.mul's result would be.
template <typename T>
__global__ void adamwKernel(const T *p, const T *g, const T *m, const T *v, T *pOut, T *mOut, T *vOut, int64_t n,
                            const void *lr, DType lrType, const void *step, DType stepType, const T *gradScale,
                            AdamWAttrs attrs) {
  using C = ComputeT<T>;
  __shared__ AdamWScalars<C> shared;
  if (threadIdx.x == 0)
    shared = adamwScalars<C>(attrs, readScalar(lr, lrType), readScalar(step, stepType));
  __syncthreads();
  const AdamWScalars<C> s = shared;
  const C scale = gradScale ? load(gradScale, 0) : C(1);
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
    C pi = load(p, i), gi = gradScale ? roundTo<T>(fmath::mulRn(load(g, i), scale)) : load(g, i), mi = load(m, i),
      vi = load(v, i);
    adamwUpdate(s, pi, gi, mi, vi);
    store(pOut, i, pi);
    store(mOut, i, mi);
    store(vOut, i, vi);
  }
}

void checkScalar(const KernelContext &ctx, const TensorRef &t, const char *what) {
  if (t.numel() != 1)
    ctx.fail(std::string(what) + " must be a single value, got " + shapeString(t.shape));
  if (!isFloatDType(t.dtype))
    ctx.fail(std::string(what) + " must be a float, not " + dtypeName(t.dtype));
}

// The CPU kernel also rejects step < 1; here step is in device memory, and reading it would
// make the host wait for the device, so that check is the plan's (steps count from 1).
void adamwHost(KernelContext &ctx) {
  checkAdamW(ctx);
  const TensorRef &param = ctx.inputs[0];
  const TensorRef &lr = ctx.inputs[4], &step = ctx.inputs[5];
  checkScalar(ctx, lr, "lr");
  checkScalar(ctx, step, "step");
  AdamWAttrs attrs{ctx.attrs.beta1, ctx.attrs.beta2, ctx.attrs.epsilon, ctx.attrs.weightDecay};
  int64_t n = param.numel();
  if (n == 0)
    return;
  CudaDevice &device = deviceOf(ctx);
  dispatchDevice<kFloat>(ctx, param.dtype, [&](auto tag) {
    using T = decltype(tag);
    LaunchConfig config = elementwiseLaunch(n, device.multiprocessors());
    adamwKernel<T><<<(unsigned)config.blocks, config.threads, 0, device.stream()>>>(
        static_cast<const T *>(param.data), static_cast<const T *>(ctx.inputs[1].data),
        static_cast<const T *>(ctx.inputs[2].data), static_cast<const T *>(ctx.inputs[3].data),
        ctx.outputs[0].as<T>(), ctx.outputs[1].as<T>(), ctx.outputs[2].as<T>(), n, lr.data, lr.dtype, step.data,
        step.dtype, ctx.inputs.size() > 6 ? static_cast<const T *>(ctx.inputs[6].data) : nullptr, attrs);
    checkLaunch(ctx);
  });
}

} // namespace
} // namespace cuda

void registerCudaOptimizerKernels(KernelRegistry &r) {
  for (DType t : cuda::kFloatTypes)
    r.add("cpc.adamw", DeviceKind::Cuda, t, cuda::adamwHost);
}

} // namespace cpc::kernels
