//===- Movement.cu - transpose, slice, concat, broadcast, pad on the GPU --===//
//
// Copies that never look at values, so one kernel per word size serves every element type
// (MovementMath.h has the index maps). transpose, slice and broadcast are a strided gather over
// the result; the swap of the innermost pair goes through shared-memory tiles; concat copies each
// input's rows into place; pad maps each result element to its input element or the pad value.
//
#include "kernels/Checks.h"
#include "kernels/cuda/CudaCommon.cuh"
#include "kernels/cuda/CudaKernels.h"
#include "kernels/cuda/MovementMath.h"

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

namespace cpc::kernels {
namespace cuda {
namespace {

template <typename W, typename Index> __global__ void stridedCopyKernel(W *dst, const W *src, StridedCopy plan) {
  Index step = Index(gridDim.x) * blockDim.x;
  for (Index i = Index(blockIdx.x) * blockDim.x + threadIdx.x; i < Index(plan.total); i += step)
    dst[i] = src[plan.base + sourceOffset(plan, i)];
}

/// One tile per iteration: read with threadIdx.x along the source's contiguous rows, write with
/// threadIdx.x along the result's (the +1 column keeps the transposed reads off one bank).
template <typename W> __global__ void tileTransposeKernel(W *dst, const W *src, TileTranspose t) {
  __shared__ W tile[kTile][kTile + 1];
  for (int64_t k = blockIdx.x; k < t.tiles; k += gridDim.x) {
    TileOrigin at = tileOrigin(t, k);
    const W *s = src + t.outer.base + sourceOffset(t.outer, (uint64_t)at.slab);
    W *d = dst + at.slab * t.rows * t.cols;
    for (int step = 0; step < kTile; step += kTileRowsPerStep) {
      int64_t i = at.row0 + threadIdx.x, j = at.col0 + threadIdx.y + step;
      if (i < t.rows && j < t.cols)
        tile[threadIdx.y + step][threadIdx.x] = s[i + j * t.colStride];
    }
    __syncthreads();
    for (int step = 0; step < kTile; step += kTileRowsPerStep) {
      int64_t i = at.row0 + threadIdx.y + step, j = at.col0 + threadIdx.x;
      if (i < t.rows && j < t.cols)
        d[i * t.cols + j] = tile[threadIdx.x][threadIdx.y + step];
    }
    __syncthreads(); // the tile is read before the next iteration overwrites it
  }
}

template <typename W, typename Index> __global__ void rowCopyKernel(W *dst, const W *src, RowCopy c, int64_t total) {
  Index step = Index(gridDim.x) * blockDim.x;
  for (Index i = Index(blockIdx.x) * blockDim.x + threadIdx.x; i < Index(total); i += step)
    dst[rowCopyTarget(c, int64_t(i))] = src[i];
}

template <typename W, typename Index> __global__ void padKernel(W *dst, const W *src, PadPlan p, W fill) {
  Index step = Index(gridDim.x) * blockDim.x;
  for (Index i = Index(blockIdx.x) * blockDim.x + threadIdx.x; i < Index(p.total); i += step) {
    int64_t from = padSource(p, i);
    dst[i] = from < 0 ? fill : src[from];
  }
}

/// Calls f(W{}) with the unsigned word type of `bytes` (16: uint4).
template <typename F> void withWord(const KernelContext &ctx, int bytes, F &&f) {
  switch (bytes) {
  case 1: return f(uint8_t{});
  case 2: return f(uint16_t{});
  case 4: return f(uint32_t{});
  case 8: return f(uint64_t{});
  case 16: return f(uint4{});
  }
  ctx.fail("unsupported word of " + std::to_string(bytes) + " bytes");
}

/// The grid of a grid-stride kernel over `n` items.
LaunchConfig gridFor(const KernelContext &ctx, int64_t n) { return elementwiseLaunch(n, deviceOf(ctx).multiprocessors()); }

/// Launches kernel<W, Index> with 32-bit indices when `total` allows.
#define CPC_LAUNCH_INDEXED(kernel, W, total, config, ...)                                                             \
  do {                                                                                                               \
    if (fitsIndex32(total))                                                                                          \
      kernel<W, uint32_t><<<(config).blocks, (config).threads, 0, streamOf(ctx)>>>(__VA_ARGS__);                     \
    else                                                                                                             \
      kernel<W, uint64_t><<<(config).blocks, (config).threads, 0, streamOf(ctx)>>>(__VA_ARGS__);                     \
  } while (0)

/// out = the strided view (strides, from element `base`) of in: transpose, slice, broadcast.
void runStridedCopy(KernelContext &ctx, const TensorRef &in, TensorRef &out, const std::vector<int64_t> &strides,
                    int64_t base) {
  if (out.numel() == 0)
    return;
  StridedCopy plan;
  if (!planStridedCopy(out.shape, strides, base, (int)dtypeSize(in.dtype), plan))
    ctx.fail("more than " + std::to_string(kMaxCopyDims) + " dims remain after merging: not supported on the GPU");
  TileTranspose tiles;
  if (planTileTranspose(plan, tiles)) {
    int64_t blocks = std::clamp<int64_t>(tiles.tiles, 1, (int64_t)deviceOf(ctx).multiprocessors() * 16);
    withWord(ctx, plan.wordBytes, [&](auto word) {
      using W = decltype(word);
      if constexpr (sizeof(W) <= 8)
        tileTransposeKernel<W><<<blocks, dim3(kTile, kTileRowsPerStep), 0, streamOf(ctx)>>>(out.as<W>(), in.as<W>(),
                                                                                            tiles);
    });
  } else {
    widenWords(plan, (uint64_t)out.data, (uint64_t)in.data);
    LaunchConfig config = gridFor(ctx, plan.total);
    withWord(ctx, plan.wordBytes, [&](auto word) {
      using W = decltype(word);
      CPC_LAUNCH_INDEXED(stridedCopyKernel, W, plan.total, config, out.as<W>(), in.as<W>(), plan);
    });
  }
  checkLaunch(ctx);
}

void transpose(KernelContext &ctx) {
  std::vector<int64_t> dims = checkTranspose(ctx);
  runStridedCopy(ctx, ctx.inputs[0], ctx.outputs[0], transposeStrides(ctx.inputs[0].shape, dims), 0);
}

void slice(KernelContext &ctx) {
  std::vector<int64_t> first = checkSlice(ctx);
  const TensorRef &in = ctx.inputs[0];
  runStridedCopy(ctx, in, ctx.outputs[0], sliceStrides(in.shape, ctx.attrs.strides), sliceBase(in.shape, first));
}

void broadcast(KernelContext &ctx) {
  checkBroadcastTo(ctx);
  const TensorRef &in = ctx.inputs[0];
  TensorRef &out = ctx.outputs[0];
  runStridedCopy(ctx, in, out, broadcastStrides(in.shape, out.shape), 0);
}

void concat(KernelContext &ctx) {
  ConcatOperands concat = checkConcat(ctx);
  TensorRef &out = ctx.outputs[0];
  for (size_t k = 0; k < ctx.inputs.size(); ++k) {
    const TensorRef &in = ctx.inputs[k];
    if (in.numel() == 0)
      continue;
    RowCopy c = concatRows(out.shape, concat.axis, in.shape, concat.offsets[k], (int)dtypeSize(out.dtype));
    widenWords(c, (uint64_t)out.data, (uint64_t)in.data);
    int64_t words = c.rows * c.width;
    LaunchConfig config = gridFor(ctx, words);
    withWord(ctx, c.wordBytes, [&](auto word) {
      using W = decltype(word);
      CPC_LAUNCH_INDEXED(rowCopyKernel, W, words, config, out.as<W>(), in.as<W>(), c, words);
    });
    checkLaunch(ctx);
  }
}

void pad(KernelContext &ctx) {
  uint64_t bits = checkPad(ctx);
  const TensorRef &in = ctx.inputs[0], &out = ctx.outputs[0];
  PadPlan p;
  if (!planPad(in.shape, out.shape, ctx.attrs.lowPadding, ctx.attrs.interiorPadding, p))
    ctx.fail("pad of more than " + std::to_string(kMaxCopyDims) + " dims is not supported on the GPU");
  if (p.total == 0)
    return;
  LaunchConfig config = gridFor(ctx, p.total);
  withWord(ctx, (int)dtypeSize(in.dtype), [&](auto word) {
    using W = decltype(word);
    if constexpr (sizeof(W) <= 8) {
      W fill;
      std::memcpy(&fill, &bits, sizeof(W));
      CPC_LAUNCH_INDEXED(padKernel, W, p.total, config, out.as<W>(), in.as<W>(), p, fill);
    }
  });
  checkLaunch(ctx);
}

constexpr DType kEveryType[] = {DType::F32, DType::F64, DType::F16, DType::BF16, DType::I64,
                                DType::I32, DType::I16, DType::I8,  DType::U8,   DType::I1};

} // namespace
} // namespace cuda

void registerCudaMovementKernels(KernelRegistry &registry) {
  for (DType t : cuda::kEveryType) {
    registry.add(OpKind::Transpose, DeviceKind::Cuda, t, cuda::transpose);
    registry.add(OpKind::Slice, DeviceKind::Cuda, t, cuda::slice);
    registry.add(OpKind::Concat, DeviceKind::Cuda, t, cuda::concat);
    registry.add(OpKind::Broadcast, DeviceKind::Cuda, t, cuda::broadcast);
    registry.add(OpKind::Pad, DeviceKind::Cuda, t, cuda::pad);
  }
}

} // namespace cpc::kernels
