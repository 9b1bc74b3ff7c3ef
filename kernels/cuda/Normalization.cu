//===- Normalization.cu - softmax, LayerNorm and their gradients on the GPU ===//
//
// Row-wise kernels: a warp per row up to kWarpRowMax elements, else a block per row
// (NormalizationLaunch.h). Each thread folds a strided share of its row, warp shuffles and one
// shared-memory step combine the partials in a fixed order (NormalizationMath.h), so results are
// deterministic. Every element is read before its own position is written by the same thread, so
// outputs may alias same-shaped inputs, as on the CPU. layer_norm_grad sums its scale and bias
// gradients over fixed chunks of rows, then over chunks in order: no atomics.
//
#include "kernels/Checks.h"
#include "kernels/cuda/CudaCommon.cuh"
#include "kernels/cuda/CudaKernels.h"
#include "kernels/cuda/NormalizationLaunch.h"
#include "kernels/cuda/NormalizationMath.h"
#include "kernels/cuda/Softmax.h"

#include <string>
#include <vector>

namespace cpc::kernels {
namespace cuda {
namespace {

template <typename Acc, typename Op> __device__ Acc warpAllReduce(Acc v, Op op) {
  for (int offset = kWarpSize / 2; offset > 0; offset >>= 1)
    v = op(v, __shfl_xor_sync(0xffffffffu, v, offset));
  return v;
}

/// Combines the partials of a row's threads (the order of rowGroupReduce); every thread of the
/// group gets the result. A block-wide group (threadsPerRow > one warp) syncs the block, which
/// every thread reaches because such a block holds one row.
template <typename Acc, typename Op>
__device__ Acc groupAllReduce(Acc v, Op op, Acc identity, int threadsPerRow, Acc *shared) {
  v = warpAllReduce(v, op);
  if (threadsPerRow <= kWarpSize)
    return v;
  int lane = threadIdx.x % kWarpSize, warp = threadIdx.x / kWarpSize;
  __syncthreads(); // the previous reduction's reads of `shared` are done
  if (lane == 0)
    shared[warp] = v;
  __syncthreads();
  v = lane < threadsPerRow / kWarpSize ? shared[lane] : identity;
  return warpAllReduce(v, op);
}

/// Visits this thread's rows: fn(row, lane). Rows are handed out to row groups (a warp or the
/// block) by a grid-stride loop; a warp past the last row skips the iteration as a whole.
template <typename Fn> __device__ void forEachRow(int64_t rows, int threadsPerRow, Fn &&fn) {
  int rowsPerBlock = blockDim.x / threadsPerRow, group = threadIdx.x / threadsPerRow;
  int lane = threadIdx.x % threadsPerRow;
  for (int64_t first = (int64_t)blockIdx.x * rowsPerBlock; first < rows; first += (int64_t)gridDim.x * rowsPerBlock) {
    int64_t row = first + group;
    if (row < rows)
      fn(row, lane);
  }
}

/// Shared memory of a row-wise kernel: one partial per warp, for Acc and for f64 sums.
template <typename Acc> struct RowShared {
  Acc acc[kWarpSize];
  double wide[kWarpSize];
};

/// The moments of a contiguous row: two passes, both summed in f64 (RowMoments).
template <typename T, typename Acc>
__device__ RowMoments<Acc> rowMomentsOf(const T *x, int64_t base, int64_t len, int lane, int threadsPerRow, double eps,
                                        RowShared<Acc> &shared) {
  double sum = 0;
  for (int64_t j = lane; j < len; j += threadsPerRow)
    sum += double(load(x, base + j));
  RowMean<Acc> mean = rowMean<Acc>(groupAllReduce(sum, SumOp{}, 0.0, threadsPerRow, shared.wide), len);
  double squares = 0;
  for (int64_t j = lane; j < len; j += threadsPerRow) {
    double d = wideDeviation(load(x, base + j), mean);
    squares += fmath::mulRn(d, d);
  }
  return rowMoments(mean, groupAllReduce(squares, SumOp{}, 0.0, threadsPerRow, shared.wide), len, eps);
}

/// With `residual` (cpc.add_layer_norm), x + residual is first stored to `sum` and normalized
/// from there: every thread reads back only the elements it wrote (the same lanes in each loop).
template <typename T>
__global__ void __launch_bounds__(kMaxThreadsPerBlock) layerNormRows(const T *x, const T *scale, const T *bias, T *y, int64_t rows, int64_t len,
                              int threadsPerRow, double eps, const T *residual = nullptr, T *sum = nullptr) {
  using Acc = ComputeT<T>;
  __shared__ RowShared<Acc> shared;
  forEachRow(rows, threadsPerRow, [&](int64_t row, int lane) {
    int64_t base = row * len;
    if (residual)
      for (int64_t j = lane; j < len; j += threadsPerRow)
        store(sum, base + j, load(x, base + j) + load(residual, base + j));
    const T *in = residual ? sum : x;
    RowMoments<Acc> m = rowMomentsOf(in, base, len, lane, threadsPerRow, eps, shared);
    for (int64_t j = lane; j < len; j += threadsPerRow)
      store(y, base + j, layerNormValue(load(in, base + j), m, load(scale, j), load(bias, j)));
  });
}

/// softmax(scale * x) along rows (scale 1 for cpc.softmax; attention's factor for its scores).
template <typename T>
__global__ void __launch_bounds__(kMaxThreadsPerBlock) softmaxRows(const T *x, T *y, RowShape shape, int threadsPerRow, ComputeT<T> scale) {
  using Acc = ComputeT<T>;
  __shared__ Acc shared[kWarpSize];
  forEachRow(shape.rows, threadsPerRow, [&](int64_t row, int lane) {
    int64_t base = rowBase(shape, row), step = shape.inner;
    const Acc negInf = -Acc(INFINITY);
    Acc m = negInf;
    for (int64_t j = lane; j < shape.len; j += threadsPerRow)
      m = MaxOp{}(m, load(x, base + j * step) * scale);
    m = groupAllReduce(m, MaxOp{}, negInf, threadsPerRow, shared);
    Acc sum = 0;
    for (int64_t j = lane; j < shape.len; j += threadsPerRow)
      sum += expAcc(load(x, base + j * step) * scale - m);
    Acc inv = Acc(1) / groupAllReduce(sum, SumOp{}, Acc(0), threadsPerRow, shared);
    // exp again rather than a stored value: 16-bit outputs must round once, from Acc.
    for (int64_t j = lane; j < shape.len; j += threadsPerRow)
      store(y, base + j * step, expAcc(load(x, base + j * step) * scale - m) * inv);
  });
}

/// softmax's VJP times `scale` (1 for cpc.softmax_grad; attention's factor for its scores).
template <typename T>
__global__ void __launch_bounds__(kMaxThreadsPerBlock) softmaxGradRows(const T *y, const T *g, T *out, RowShape shape, int threadsPerRow, ComputeT<T> scale) {
  using Acc = ComputeT<T>;
  __shared__ Acc shared[kWarpSize];
  forEachRow(shape.rows, threadsPerRow, [&](int64_t row, int lane) {
    int64_t base = rowBase(shape, row), step = shape.inner;
    Acc dot = 0;
    for (int64_t j = lane; j < shape.len; j += threadsPerRow)
      dot += load(g, base + j * step) * load(y, base + j * step);
    dot = groupAllReduce(dot, SumOp{}, Acc(0), threadsPerRow, shared);
    for (int64_t j = lane; j < shape.len; j += threadsPerRow) {
      int64_t e = base + j * step;
      store(out, e, softmaxGradValue(load(y, e), load(g, e), dot) * scale);
    }
  });
}

/// layer_norm_grad, first pass: each row's statistics and its means of g*scale and g*scale*xhat.
template <typename T, typename Acc>
__global__ void __launch_bounds__(kMaxThreadsPerBlock) layerNormGradRows(const T *x, const T *scale, const T *g, LayerNormGradRow<Acc> *stats, int64_t rows,
                                  int64_t len, int threadsPerRow, double eps) {
  __shared__ RowShared<Acc> shared;
  forEachRow(rows, threadsPerRow, [&](int64_t row, int lane) {
    int64_t base = row * len;
    RowMoments<Acc> m = rowMomentsOf(x, base, len, lane, threadsPerRow, eps, shared);
    double sumGs = 0, sumGsXhat = 0;
    for (int64_t j = lane; j < len; j += threadsPerRow) {
      double gs = layerNormGradGs<Acc>(load(g, base + j), load(scale, j));
      sumGs += gs;
      sumGsXhat += fmath::mulRn(gs, layerNormGradXhat<Acc>(load(x, base + j), m));
    }
    sumGs = groupAllReduce(sumGs, SumOp{}, 0.0, threadsPerRow, shared.wide);
    sumGsXhat = groupAllReduce(sumGsXhat, SumOp{}, 0.0, threadsPerRow, shared.wide);
    if (lane == 0)
      stats[row] = {m, sumGs / double(len), sumGsXhat / double(len)};
  });
}

/// Second pass, one thread per column of a chunk of rows: the input gradient, and the chunk's
/// partial sums of the scale and bias gradients ([chunk][col], scale partials then bias partials).
template <typename T, typename Acc>
__global__ void layerNormGradColumns(const T *x, const T *scale, const T *g, const LayerNormGradRow<Acc> *stats, T *dx,
                                     double *partials, int64_t rows, int64_t len, int64_t chunkRows, int64_t chunks,
                                     const T *addend) {
  int64_t col = (int64_t)blockIdx.x * blockDim.x + threadIdx.x, chunk = blockIdx.y;
  if (col >= len)
    return;
  Acc s = load(scale, col);
  double sumScale = 0, sumBias = 0;
  int64_t end = (chunk + 1) * chunkRows < rows ? (chunk + 1) * chunkRows : rows;
  for (int64_t row = chunk * chunkRows; row < end; ++row) {
    LayerNormGradRow<Acc> r = stats[row];
    int64_t e = row * len + col;
    Acc xv = load(x, e), gv = load(g, e);
    sumScale += layerNormGradScaleTerm(xv, gv, r);
    sumBias += double(gv);
    store(dx, e, layerNormGradInput(xv, gv, s, r)); // dx may alias x or g: this element is read
    if (addend) // cpc.layer_norm_grad_add: the stored gradient plus the addend, rounded again
      store(dx, e, load(dx, e) + load(addend, e));
  }
  partials[chunk * len + col] = sumScale;
  partials[(chunks + chunk) * len + col] = sumBias;
}

template <typename T>
__global__ void layerNormGradFinish(const double *partials, T *dscale, T *dbias, int64_t len, int64_t chunks) {
  for (int64_t col = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; col < len; col += (int64_t)gridDim.x * blockDim.x) {
    double s = 0, b = 0;
    for (int64_t c = 0; c < chunks; ++c) {
      s += partials[c * len + col];
      b += partials[(chunks + c) * len + col];
    }
    store(dscale, col, ComputeT<T>(s));
    store(dbias, col, ComputeT<T>(b));
  }
}

//===----------------------------------------------------------------------===//
// Host side: the ops' checks (kernels/Checks.h), then launches.
//===----------------------------------------------------------------------===//

/// cpc.layer_norm (input, scale, bias -> result), or cpc.add_layer_norm (WithResidual: lhs, rhs,
/// scale, bias -> sum, result).
template <bool WithResidual> void layerNorm(KernelContext &ctx) {
  int64_t axis = WithResidual ? checkAddLayerNorm(ctx) : checkLayerNorm(ctx);
  const size_t s = WithResidual ? 2 : 1; // the scale's input
  const TensorRef &in = ctx.inputs[0], &scale = ctx.inputs[s], &bias = ctx.inputs[s + 1];
  const TensorRef &out = ctx.outputs[WithResidual ? 1 : 0];
  int64_t len = numElements({in.shape.begin() + axis, in.shape.end()}), rows = len ? in.numel() / len : 0;
  if (rows == 0 || len == 0)
    return;
  RowGroupLaunch l = rowGroupLaunch(rows, len);
  dispatchDevice<kFloat>(ctx, in.dtype, [&](auto zero) {
    using T = decltype(zero);
    layerNormRows<T><<<l.blocks, l.threads, 0, streamOf(ctx)>>>(
        in.as<T>(), scale.as<T>(), bias.as<T>(), out.as<T>(), rows, len, l.threadsPerRow, ctx.attrs.epsilon,
        WithResidual ? ctx.inputs[1].as<T>() : nullptr, WithResidual ? ctx.outputs[0].as<T>() : nullptr);
  });
  checkLaunch(ctx);
}

void softmax(KernelContext &ctx) {
  int64_t axis = checkSoftmax(ctx);
  launchSoftmax(ctx, ctx.inputs[0], ctx.outputs[0], axis, 1.0);
}

void softmaxGrad(KernelContext &ctx) {
  int64_t axis = checkSoftmaxGrad(ctx);
  launchSoftmaxGrad(ctx, ctx.inputs[0], ctx.inputs[1], ctx.outputs[0], axis, 1.0);
}

size_t alignUp(size_t bytes) { return (bytes + 255) / 256 * 256; }

/// cpc.layer_norm_grad, or cpc.layer_norm_grad_add (WithAddend: a 4th input added to dx).
template <bool WithAddend> void layerNormGrad(KernelContext &ctx) {
  int64_t axis = WithAddend ? checkLayerNormGradAdd(ctx) : checkLayerNormGrad(ctx);
  const TensorRef &x = ctx.inputs[0], &scale = ctx.inputs[1], &g = ctx.inputs[2];
  int64_t len = numElements({x.shape.begin() + axis, x.shape.end()}), rows = len ? x.numel() / len : 0;
  if (len == 0)
    return;
  cudaStream_t stream = streamOf(ctx);
  dispatchDevice<kFloat>(ctx, x.dtype, [&](auto zero) {
    using T = decltype(zero);
    using Acc = ComputeT<T>;
    T *dx = ctx.outputs[0].as<T>(), *dscale = ctx.outputs[1].as<T>(), *dbias = ctx.outputs[2].as<T>();
    ColumnChunkLaunch c = columnChunkLaunch(rows, len);
    size_t statBytes = alignUp(rows * sizeof(LayerNormGradRow<Acc>));
    size_t partialBytes = 2 * c.chunks * len * sizeof(double);
    char *scratch = (char *)deviceOf(ctx).scratch(0, statBytes + partialBytes);
    auto *stats = (LayerNormGradRow<Acc> *)scratch;
    double *partials = (double *)(scratch + statBytes);
    if (rows > 0) {
      RowGroupLaunch l = rowGroupLaunch(rows, len);
      layerNormGradRows<T, Acc><<<l.blocks, l.threads, 0, stream>>>(x.as<T>(), scale.as<T>(), g.as<T>(), stats, rows,
                                                                    len, l.threadsPerRow, ctx.attrs.epsilon);
      dim3 grid((unsigned)c.columnBlocks, (unsigned)c.chunks);
      layerNormGradColumns<T, Acc><<<grid, c.columnsPerBlock, 0, stream>>>(x.as<T>(), scale.as<T>(), g.as<T>(), stats,
                                                                           dx, partials, rows, len, c.chunkRows, c.chunks,
                                                                           WithAddend ? ctx.inputs[3].as<T>() : nullptr);
    } else {
      checkCuda(cudaMemsetAsync(partials, 0, partialBytes, stream), "layer_norm_grad"); // no rows: zero gradients
    }
    LaunchConfig f = elementwiseLaunch(len, deviceOf(ctx).multiprocessors());
    layerNormGradFinish<T><<<f.blocks, f.threads, 0, stream>>>(partials, dscale, dbias, len, c.chunks);
  });
  checkLaunch(ctx);
}

} // namespace

void launchSoftmax(const KernelContext &ctx, const TensorRef &in, const TensorRef &out, int64_t axis, double scale) {
  RowShape shape = rowShapeAlong(in.shape, axis);
  if (shape.rows * shape.len == 0)
    return;
  RowGroupLaunch l = rowGroupLaunch(shape.rows, shape.len);
  dispatchDevice<kFloat>(ctx, in.dtype, [&](auto zero) {
    using T = decltype(zero);
    softmaxRows<T><<<l.blocks, l.threads, 0, streamOf(ctx)>>>(in.as<T>(), out.as<T>(), shape, l.threadsPerRow,
                                                             ComputeT<T>(scale));
  });
  checkLaunch(ctx);
}

void launchSoftmaxGrad(const KernelContext &ctx, const TensorRef &y, const TensorRef &g, const TensorRef &out,
                       int64_t axis, double scale) {
  RowShape shape = rowShapeAlong(y.shape, axis);
  if (shape.rows * shape.len == 0)
    return;
  RowGroupLaunch l = rowGroupLaunch(shape.rows, shape.len);
  dispatchDevice<kFloat>(ctx, y.dtype, [&](auto zero) {
    using T = decltype(zero);
    softmaxGradRows<T><<<l.blocks, l.threads, 0, streamOf(ctx)>>>(y.as<T>(), g.as<T>(), out.as<T>(), shape,
                                                                  l.threadsPerRow, ComputeT<T>(scale));
  });
  checkLaunch(ctx);
}
} // namespace cuda

void registerCudaNormalizationKernels(KernelRegistry &registry) {
  for (DType t : cuda::kFloatTypes) {
    registry.add(OpKind::LayerNorm, DeviceKind::Cuda, t, cuda::layerNorm<false>);
    registry.add(OpKind::Softmax, DeviceKind::Cuda, t, cuda::softmax);
    registry.add(OpKind::SoftmaxGrad, DeviceKind::Cuda, t, cuda::softmaxGrad);
    registry.add(OpKind::LayerNormGrad, DeviceKind::Cuda, t, cuda::layerNormGrad<false>);
  }
  for (DType t : {DType::F32, DType::F64}) { // the residual fusions are f32/f64 only (FusedOps.cpp)
    registry.add(OpKind::AddLayerNorm, DeviceKind::Cuda, t, cuda::layerNorm<true>);
    registry.add(OpKind::LayerNormGradAdd, DeviceKind::Cuda, t, cuda::layerNormGrad<true>);
  }
}

} // namespace cpc::kernels
