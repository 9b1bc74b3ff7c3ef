//===- Reduction.cu - reduce_{sum,mean,prod,max,min,sum_squares} on the GPU ===//
//
// The geometry and the combinations are ReductionMath.h's, the launch ReductionLaunch.h's (see
// there): each block column reduces one output's (slice of the) range, partials merge in a
// shared-memory tree; with slices, a second pass merges them in slice order.
//
#include "kernels/cuda/CudaCommon.cuh"
#include "kernels/cuda/CudaKernels.h"
#include "kernels/cuda/ReductionLaunch.h"
#include "kernels/cuda/ReductionMath.h"

#include <vector>

namespace cpc::kernels {
namespace cuda {
namespace {

// Reads element `offset` of x as the compute type.
template <typename T> struct Loader {
  const T *x;
  __device__ __forceinline__ ComputeT<T> operator()(int64_t offset) const { return load(x, offset); }
};

// Grid: x over tiles of threadsX outputs (grid-stride), y over slices of the reduced range.
// Unsliced, the block's first row writes the results; sliced, it writes Acc partials to
// partials[slice * outputs + j].
template <typename T, typename Op>
__global__ void reduceKernel(const T *x, T *y, typename Op::Acc *partials, const __grid_constant__ ReduceGeometry g,
                             const __grid_constant__ ReductionLaunch l) {
  using Acc = typename Op::Acc;
  extern __shared__ __align__(16) unsigned char sharedBytes[];
  Acc *shared = reinterpret_cast<Acc *>(sharedBytes);
  // Lane -> (output column tx, row ty of its threads); partials are stored row by row.
  const int lane = threadIdx.x;
  const int tx = l.columnOf(lane), ty = l.rowOf(lane);
  const int tid = ty * l.threadsX + tx;
  const int64_t outputs = g.outer * g.inner;
  const int64_t begin = blockIdx.y * l.chunk, end = begin + l.chunk < g.reduced ? begin + l.chunk : g.reduced;
  for (int64_t tile = blockIdx.x; tile < l.tiles; tile += gridDim.x) {
    const int64_t j = tile * l.threadsX + tx;
    Acc a = Op::init();
    if (j < outputs)
      a = accumulateRange<Op>(g, g.baseOffset(j), begin + ty, end, l.threadsY, Loader<T>{x});
    shared[tid] = a;
    __syncthreads();
    for (int half = l.threadsY / 2; half > 0; half /= 2) {
      if (ty < half)
        shared[tid] = Op::merge(shared[tid], shared[tid + half * l.threadsX]);
      __syncthreads();
    }
    if (ty == 0 && j < outputs) { // shared[tx] is row 0's, after the tree
      if (l.splits > 1)
        partials[blockIdx.y * outputs + j] = shared[tx];
      else
        store(y, j, Op::finish(shared[tx], g.reduced));
    }
    __syncthreads(); // the next tile reuses the shared partials
  }
}

// Merges the slices' partials of each output in slice order.
template <typename T, typename Op>
__global__ void mergeSlicesKernel(const typename Op::Acc *partials, T *y, int64_t outputs, int64_t splits,
                                  int64_t reduced) {
  for (int64_t j = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; j < outputs; j += (int64_t)gridDim.x * blockDim.x) {
    typename Op::Acc a = partials[j];
    for (int64_t s = 1; s < splits; ++s)
      a = Op::merge(a, partials[s * outputs + j]);
    store(y, j, Op::finish(a, reduced));
  }
}

// Scratch slot of the slices' partials.
constexpr int kPartialsSlot = 0;

template <template <class> class OpT, unsigned K> void reduceHost(KernelContext &ctx) {
  if (ctx.inputs.size() != 1 || ctx.outputs.size() != 1)
    ctx.fail("expected 1 input and 1 output");
  const TensorRef &in = ctx.inputs[0], &out = ctx.outputs[0];
  if (out.dtype != in.dtype)
    ctx.fail(std::string("output element type ") + dtypeName(out.dtype) + " differs from input " +
             dtypeName(in.dtype));
  ReduceGeometry g;
  std::string error;
  if (!planReduction(in.shape, ctx.attrs.axes, ctx.attrs.keepdims, out.shape, g, &error))
    ctx.fail(error);
  const int64_t outputs = g.outputs();
  if (outputs == 0)
    return;
  CudaDevice &device = deviceOf(ctx);
  dispatchDevice<K>(ctx, in.dtype, [&](auto tag) {
    using T = decltype(tag);
    using Op = OpT<ComputeT<T>>;
    using Acc = typename Op::Acc;
    ReductionLaunch l = reductionLaunch(outputs, g.inner, g.reduced, device.multiprocessors());
    Acc *partials = nullptr;
    if (l.splits > 1)
      partials = static_cast<Acc *>(device.scratch(kPartialsSlot, l.scratchBytes(outputs, sizeof(Acc))));
    dim3 grid((unsigned)l.blocks, (unsigned)l.splits), block(l.threadsX * l.threadsY);
    reduceKernel<T, Op><<<grid, block, l.sharedBytes(sizeof(Acc)), device.stream()>>>(
        static_cast<const T *>(in.data), static_cast<T *>(out.data), partials, g, l);
    checkLaunch(ctx);
    if (l.splits > 1) {
      LaunchConfig merge = elementwiseLaunch(outputs, device.multiprocessors());
      mergeSlicesKernel<T, Op><<<(unsigned)merge.blocks, merge.threads, 0, device.stream()>>>(
          partials, static_cast<T *>(out.data), outputs, l.splits, g.reduced);
      checkLaunch(ctx);
    }
  });
}

} // namespace
} // namespace cuda

void registerCudaReductionKernels(KernelRegistry &r) {
  using namespace cuda;
  addFor(r, OpKind::ReduceSum, reduceHost<SumReduce, kNum>, kNum);
  addFor(r, OpKind::ReduceSumSquares, reduceHost<SumSquaresReduce, kFloat>, kFloat);
  addFor(r, OpKind::ReduceMean, reduceHost<MeanReduce, kFloat>, kFloat);
  addFor(r, OpKind::ReduceMax, reduceHost<MaxReduce, kAny>, kAny);
  addFor(r, OpKind::ReduceMin, reduceHost<MinReduce, kAny>, kAny);
  addFor(r, OpKind::ReduceProd, reduceHost<ProdReduce, kNum>, kNum);
}

} // namespace cpc::kernels
