//===- Movement.cu - transpose, slice, concat, broadcast, pad on the GPU --===//
//
// Copies that never look at values, so one kernel per word size serves every element type
// (MovementMath.h has the index maps). transpose, slice and broadcast are a strided gather over
// the result; the swap of the innermost pair goes through shared-memory tiles; concat copies each
// input's rows into place; pad maps each result element to its input element or the pad value.
//
#include "kernels/cuda/CudaCommon.cuh"
#include "kernels/cuda/CudaKernels.h"
#include "kernels/cuda/MovementMath.h"

#include <algorithm>
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

void checkOneToOne(const KernelContext &ctx) {
  if (ctx.inputs.size() != 1 || ctx.outputs.size() != 1)
    ctx.fail("expects 1 input and 1 output");
  if (ctx.inputs[0].dtype != ctx.outputs[0].dtype)
    ctx.fail("input and result element types differ");
}

void transpose(KernelContext &ctx) {
  checkOneToOne(ctx);
  const TensorRef &in = ctx.inputs[0];
  TensorRef &out = ctx.outputs[0];
  const std::vector<int64_t> &perm = ctx.attrs.permutation;
  int64_t r = in.rank();
  if ((int64_t)perm.size() != r || out.rank() != r)
    ctx.fail("permutation size must equal the rank");
  std::vector<bool> seen(r, false);
  std::vector<int64_t> dims(r);
  for (int64_t i = 0; i < r; ++i) {
    int64_t p = perm[i] < 0 ? perm[i] + r : perm[i];
    if (p < 0 || p >= r || seen[p])
      ctx.fail("invalid permutation");
    seen[p] = true;
    if (out.shape[i] != in.shape[p])
      ctx.fail("result " + shapeString(out.shape) + " does not match the permuted input");
    dims[i] = p;
  }
  runStridedCopy(ctx, in, out, transposeStrides(in.shape, dims), 0);
}

void slice(KernelContext &ctx) {
  checkOneToOne(ctx);
  const TensorRef &in = ctx.inputs[0];
  TensorRef &out = ctx.outputs[0];
  const std::vector<int64_t> &starts = ctx.attrs.starts, &limits = ctx.attrs.limits, &steps = ctx.attrs.strides;
  int64_t r = in.rank();
  if ((int64_t)starts.size() != r || (int64_t)steps.size() != r || (int64_t)limits.size() != r || out.rank() != r)
    ctx.fail("starts/limits/strides need one value per dim");
  std::vector<int64_t> first(r);
  for (int64_t i = 0; i < r; ++i) {
    int64_t start = first[i] = starts[i] < 0 ? starts[i] + in.shape[i] : starts[i];
    if (steps[i] == 0)
      ctx.fail("slice stride is 0 in dim " + std::to_string(i));
    int64_t last = start + (out.shape[i] - 1) * steps[i]; // the result's first and last must be inside
    if (out.shape[i] > 0 && (start < 0 || start >= in.shape[i] || last < 0 || last >= in.shape[i]))
      ctx.fail("slice of dim " + std::to_string(i) + " (size " + std::to_string(in.shape[i]) + ") from " +
               std::to_string(start) + " is out of range");
  }
  runStridedCopy(ctx, in, out, sliceStrides(in.shape, steps), sliceBase(in.shape, first));
}

void broadcast(KernelContext &ctx) {
  checkOneToOne(ctx);
  const TensorRef &in = ctx.inputs[0];
  TensorRef &out = ctx.outputs[0];
  int64_t r = out.rank(), lead = r - in.rank();
  if (lead < 0)
    ctx.fail("cannot broadcast " + shapeString(in.shape) + " to " + shapeString(out.shape));
  for (int64_t i = 0; i < in.rank(); ++i) {
    int64_t d = in.shape[i], o = out.shape[lead + i];
    if (d != o && d != 1)
      ctx.fail("cannot broadcast " + shapeString(in.shape) + " to " + shapeString(out.shape));
  }
  runStridedCopy(ctx, in, out, broadcastStrides(in.shape, out.shape), 0);
}

void concat(KernelContext &ctx) {
  if (ctx.inputs.empty() || ctx.outputs.size() != 1)
    ctx.fail("expects at least 1 input and 1 output");
  TensorRef &out = ctx.outputs[0];
  int64_t r = out.rank(), axis = ctx.attrs.axis;
  if (axis < 0)
    axis += r;
  if (axis < 0 || axis >= r)
    ctx.fail("axis " + std::to_string(ctx.attrs.axis) + " is out of range for rank " + std::to_string(r));
  std::vector<int64_t> offsets; // each input's start along the axis
  int64_t total = 0;
  for (const TensorRef &in : ctx.inputs) {
    if (in.dtype != out.dtype || in.rank() != r)
      ctx.fail("inputs must share the result's element type and rank");
    for (int64_t i = 0; i < r; ++i)
      if (i != axis && in.shape[i] != out.shape[i])
        ctx.fail("input " + shapeString(in.shape) + " does not fit result " + shapeString(out.shape));
    offsets.push_back(total);
    total += in.shape[axis];
  }
  if (total != out.shape[axis])
    ctx.fail("input sizes along the axis do not add up to the result's");
  for (size_t k = 0; k < ctx.inputs.size(); ++k) {
    const TensorRef &in = ctx.inputs[k];
    if (in.numel() == 0)
      continue;
    RowCopy c = concatRows(out.shape, axis, in.shape, offsets[k], (int)dtypeSize(out.dtype));
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
  if (ctx.inputs.size() != 1 || ctx.outputs.size() != 1)
    ctx.fail("expected 1 inputs and 1 outputs, got " + std::to_string(ctx.inputs.size()) + " and " +
             std::to_string(ctx.outputs.size()));
  const TensorRef &in = ctx.inputs[0], &out = ctx.outputs[0];
  const auto &low = ctx.attrs.lowPadding, &high = ctx.attrs.highPadding, &interior = ctx.attrs.interior;
  double value = ctx.attrs.hasValue ? ctx.attrs.value : 0.0;
  int64_t r = in.rank();
  if ((int64_t)low.size() != r || (int64_t)high.size() != r || (int64_t)interior.size() != r)
    ctx.fail("low, high and interior need one entry per input dim");
  std::vector<int64_t> expect(r);
  for (int64_t d = 0; d < r; ++d) {
    if (low[d] < 0 || high[d] < 0 || interior[d] < 0)
      ctx.fail("padding amounts must be >= 0");
    int64_t n = in.shape[d];
    expect[d] = low[d] + high[d] + n + std::max<int64_t>(n - 1, 0) * interior[d];
  }
  if (out.shape != expect || out.dtype != in.dtype)
    ctx.fail("result is " + std::string(dtypeName(out.dtype)) + shapeString(out.shape) + ", expected " +
             dtypeName(in.dtype) + shapeString(expect));
  PadPlan p;
  if (!planPad(in.shape, out.shape, low, interior, p))
    ctx.fail("pad of more than " + std::to_string(kMaxCopyDims) + " dims is not supported on the GPU");
  if (p.total == 0)
    return;
  uint64_t bits = padPattern(in.dtype, value);
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
    registry.add("cpc.transpose", DeviceKind::Cuda, t, cuda::transpose);
    registry.add("cpc.slice", DeviceKind::Cuda, t, cuda::slice);
    registry.add("cpc.concat", DeviceKind::Cuda, t, cuda::concat);
    registry.add("cpc.broadcast", DeviceKind::Cuda, t, cuda::broadcast);
    registry.add("cpc.pad", DeviceKind::Cuda, t, cuda::pad);
  }
}

} // namespace cpc::kernels
