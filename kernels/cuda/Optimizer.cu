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
#include "kernels/cuda/MultiTensorLaunch.h"

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

// gradScale (null: none) multiplies g first, in the compute type: a 16-bit gradient is widened
// and scaled in f32, as the CPU kernel (which runs 16-bit tensors widened) does.
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
    C pi = load(p, i), gi = gradScale ? fmath::mulRn(load(g, i), scale) : load(g, i), mi = load(m, i),
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

/// A launch's tensors, by value in the kernel's parameters (MultiTensorLaunch.h).
template <typename T> struct MultiTensorArgs {
  const T *p[kTensorsPerLaunch], *g[kTensorsPerLaunch], *m[kTensorsPerLaunch], *v[kTensorsPerLaunch];
  T *pOut[kTensorsPerLaunch], *mOut[kTensorsPerLaunch], *vOut[kTensorsPerLaunch];
  int64_t n[kTensorsPerLaunch];
  double weightDecay[kTensorsPerLaunch];
  int64_t blockStart[kTensorsPerLaunch + 1];
  int count;
};

template <typename T>
__global__ void multiTensorAdamWKernel(const __grid_constant__ MultiTensorArgs<T> a, const void *lr, DType lrType,
                                       const void *step, DType stepType, const T *gradScale, double beta1,
                                       double beta2, double eps) {
  using C = ComputeT<T>;
  __shared__ AdamWScalars<C> shared;
  const int t = tensorOfBlock(a.blockStart, a.count, blockIdx.x);
  if (threadIdx.x == 0)
    shared = adamwScalars<C>(AdamWAttrs{beta1, beta2, eps, a.weightDecay[t]}, readScalar(lr, lrType),
                             readScalar(step, stepType));
  __syncthreads();
  const AdamWScalars<C> s = shared;
  const C scale = load(gradScale, 0);
  const int64_t begin = (blockIdx.x - a.blockStart[t]) * kElementsPerBlock;
  const int64_t end = begin + kElementsPerBlock < a.n[t] ? begin + kElementsPerBlock : a.n[t];
  for (int64_t i = begin + threadIdx.x; i < end; i += blockDim.x) {
    C pi = load(a.p[t], i), gi = fmath::mulRn(load(a.g[t], i), scale), mi = load(a.m[t], i),
      vi = load(a.v[t], i);
    adamwUpdate(s, pi, gi, mi, vi);
    store(a.pOut[t], i, pi);
    store(a.mOut[t], i, mi);
    store(a.vOut[t], i, vi);
  }
}

void multiTensorAdamWHost(KernelContext &ctx) {
  size_t n = checkMultiTensorAdamW(ctx);
  checkScalar(ctx, ctx.inputs[0], "lr");
  checkScalar(ctx, ctx.inputs[1], "step");
  if (n == 0)
    return;
  std::vector<int64_t> sizes(n);
  for (size_t i = 0; i < n; ++i)
    sizes[i] = ctx.inputs[3 + i].numel();
  CudaDevice &device = deviceOf(ctx);
  const TensorRef &lr = ctx.inputs[0], &step = ctx.inputs[1];
  dispatchDevice<kFloat>(ctx, ctx.inputs[3].dtype, [&](auto tag) {
    using T = decltype(tag);
    auto in = [&](size_t i) { return static_cast<const T *>(ctx.inputs[i].data); };
    for (const MultiTensorChunk &c : multiTensorChunks(sizes)) {
      MultiTensorArgs<T> a{};
      a.count = c.count;
      for (int t = 0; t <= c.count; ++t)
        a.blockStart[t] = c.blockStart[t];
      for (int t = 0; t < c.count; ++t) {
        size_t i = c.first + t;
        a.p[t] = in(3 + i), a.g[t] = in(3 + n + i), a.m[t] = in(3 + 2 * n + i), a.v[t] = in(3 + 3 * n + i);
        a.pOut[t] = ctx.outputs[i].as<T>(), a.mOut[t] = ctx.outputs[n + i].as<T>();
        a.vOut[t] = ctx.outputs[2 * n + i].as<T>();
        a.n[t] = sizes[i];
        a.weightDecay[t] = ctx.attrs.weightDecays[i];
      }
      multiTensorAdamWKernel<T><<<(unsigned)c.blocks(), kMultiTensorThreads, 0, device.stream()>>>(
          a, lr.data, lr.dtype, step.data, step.dtype, in(2), ctx.attrs.beta1, ctx.attrs.beta2, ctx.attrs.epsilon);
      checkLaunch(ctx);
    }
  });
}

} // namespace
} // namespace cuda

void registerCudaOptimizerKernels(KernelRegistry &r) {
  for (DType t : cuda::kFloatTypes) {
    r.add(OpKind::AdamW, DeviceKind::Cuda, t, cuda::adamwHost);
    r.add(OpKind::MultiTensorAdamW, DeviceKind::Cuda, t, cuda::multiTensorAdamWHost);
  }
}

} // namespace cpc::kernels
