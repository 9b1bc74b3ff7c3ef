//===- Movement.cpp - transpose, slice, concat, broadcast, reshape --------===//
//
// All of these are copies that never look at values, so they run on raw element words of
// 1, 2, 4 or 8 bytes and serve every dtype.
//
#include "kernels/Checks.h"
#include "kernels/cpu/Kernel.h"

#include <algorithm>
#include <cstring>
#include <vector>

namespace cpc::kernels {
namespace {

constexpr int64_t kParallelBytes = 1 << 18; // below this, thread start-up costs more than it saves

/// memcpy split across threads when it is large.
void parallelCopy(void *dst, const void *src, size_t bytes, int threads) {
  if (dst == src || bytes == 0)
    return;
  if (threads <= 1 || bytes < (size_t)kParallelBytes) {
    std::memcpy(dst, src, bytes);
    return;
  }
  int64_t chunks = threads * 4, per = (bytes + chunks - 1) / chunks;
#pragma omp parallel for num_threads(threads) schedule(static)
  for (int64_t c = 0; c < chunks; ++c) {
    size_t lo = std::min<size_t>(c * per, bytes), hi = std::min<size_t>(lo + per, bytes);
    std::memcpy((char *)dst + lo, (const char *)src + lo, hi - lo);
  }
}

/// dst (row-major, `shape`) [i] = src[sum idx_d * strides[d]], strides in elements, may be 0 or
/// negative. Shared by transpose, slice and broadcast.
template <typename T>
void stridedCopy(T *dst, const T *src, std::vector<int64_t> shape, std::vector<int64_t> strides,
                 int threads) {
  // Drop unit dims and merge neighbours that are contiguous with each other in src, so the
  // inner loops run as long as possible.
  std::vector<int64_t> sh, st;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == 0)
      return;
    if (shape[i] == 1)
      continue;
    if (!sh.empty() && st.back() == strides[i] * shape[i]) {
      sh.back() *= shape[i];
      st.back() = strides[i];
    } else {
      sh.push_back(shape[i]);
      st.push_back(strides[i]);
    }
  }
  int64_t r = (int64_t)sh.size();
  if (r == 0) {
    dst[0] = src[0];
    return;
  }
  int64_t total = numElements(sh);
  bool par = threads > 1 && total * (int64_t)sizeof(T) >= kParallelBytes;

  // src offset of outer index `o` over dims [0, nd).
  auto outerOffset = [&](int64_t o, int64_t nd) {
    int64_t off = 0;
    for (int64_t d = nd - 1; d >= 0; --d) {
      off += (o % sh[d]) * st[d];
      o /= sh[d];
    }
    return off;
  };

  // Transposed inner pair (dst[i][j] = src[i + j*s]): copy in square tiles so both sides stay
  // in cache. This is the 2-D transpose and the swap of the last two dims.
  if (r >= 2 && st[r - 2] == 1 && st[r - 1] != 1 && st[r - 1] != 0) {
    constexpr int64_t B = 32;
    int64_t R = sh[r - 2], C = sh[r - 1], s = st[r - 1];
    int64_t outer = total / (R * C), rowBlocks = (R + B - 1) / B;
#pragma omp parallel for num_threads(threads) if (par) schedule(static)
    for (int64_t task = 0; task < outer * rowBlocks; ++task) {
      int64_t o = task / rowBlocks, i0 = (task % rowBlocks) * B;
      const T *s0 = src + outerOffset(o, r - 2);
      T *d0 = dst + o * R * C;
      int64_t i1 = std::min(i0 + B, R);
      for (int64_t j0 = 0; j0 < C; j0 += B) {
        int64_t j1 = std::min(j0 + B, C);
        for (int64_t i = i0; i < i1; ++i)
          for (int64_t j = j0; j < j1; ++j)
            d0[i * C + j] = s0[i + j * s];
      }
    }
    return;
  }

  int64_t inner = sh[r - 1], is = st[r - 1], rows = total / inner;
#pragma omp parallel for num_threads(threads) if (par) schedule(static)
  for (int64_t row = 0; row < rows; ++row) {
    const T *s = src + outerOffset(row, r - 1);
    T *d = dst + row * inner;
    if (is == 1)
      std::memcpy(d, s, inner * sizeof(T));
    else if (is == 0)
      std::fill(d, d + inner, *s);
    else
      for (int64_t j = 0; j < inner; ++j)
        d[j] = s[j * is];
  }
}

/// Runs stridedCopy on words of the tensor's element size.
void stridedCopyAny(KernelContext &ctx, const TensorRef &in, TensorRef &out, const void *base,
                    const std::vector<int64_t> &strides) {
  switch (dtypeSize(in.dtype)) {
  case 1: return stridedCopy((uint8_t *)out.data, (const uint8_t *)base, out.shape, strides, ctx.threads);
  case 2: return stridedCopy((uint16_t *)out.data, (const uint16_t *)base, out.shape, strides, ctx.threads);
  case 4: return stridedCopy((uint32_t *)out.data, (const uint32_t *)base, out.shape, strides, ctx.threads);
  case 8: return stridedCopy((uint64_t *)out.data, (const uint64_t *)base, out.shape, strides, ctx.threads);
  }
  ctx.fail(std::string("unsupported element type ") + dtypeName(in.dtype));
}

void transposeKernel(KernelContext &ctx) {
  std::vector<int64_t> perm = checkTranspose(ctx);
  const TensorRef &in = ctx.inputs[0];
  TensorRef &out = ctx.outputs[0];
  std::vector<int64_t> inStrides = rowMajorStrides(in.shape), strides(perm.size());
  for (size_t i = 0; i < perm.size(); ++i)
    strides[i] = inStrides[perm[i]];
  stridedCopyAny(ctx, in, out, in.data, strides);
}

void sliceKernel(KernelContext &ctx) {
  std::vector<int64_t> starts = checkSlice(ctx);
  const TensorRef &in = ctx.inputs[0];
  TensorRef &out = ctx.outputs[0];
  const std::vector<int64_t> &steps = ctx.attrs.strides;
  std::vector<int64_t> inStrides = rowMajorStrides(in.shape), strides(in.rank());
  int64_t offset = 0;
  for (int64_t i = 0; i < in.rank(); ++i) {
    offset += starts[i] * inStrides[i];
    strides[i] = inStrides[i] * steps[i];
  }
  if (out.numel() == 0)
    return;
  stridedCopyAny(ctx, in, out, (const char *)in.data + offset * dtypeSize(in.dtype), strides);
}

void broadcastKernel(KernelContext &ctx) {
  checkBroadcastTo(ctx);
  const TensorRef &in = ctx.inputs[0];
  TensorRef &out = ctx.outputs[0];
  int64_t lead = out.rank() - in.rank();
  std::vector<int64_t> inStrides = rowMajorStrides(in.shape), strides(out.rank(), 0);
  for (int64_t i = 0; i < in.rank(); ++i)
    strides[lead + i] = in.shape[i] == 1 ? 0 : inStrides[i];
  if (out.numel() == 0)
    return;
  stridedCopyAny(ctx, in, out, in.data, strides);
}

void reshapeKernel(KernelContext &ctx) {
  checkReshape(ctx);
  parallelCopy(ctx.outputs[0].data, ctx.inputs[0].data, ctx.inputs[0].bytes(), ctx.threads);
}

void concatKernel(KernelContext &ctx) {
  ConcatOperands concat = checkConcat(ctx);
  const int64_t axis = concat.axis;
  const std::vector<int64_t> &offsets = concat.offsets;
  TensorRef &out = ctx.outputs[0];
  size_t esize = dtypeSize(out.dtype);
  int64_t outer = 1, inner = 1;
  for (int64_t i = 0; i < axis; ++i)
    outer *= out.shape[i];
  for (int64_t i = axis + 1; i < out.rank(); ++i)
    inner *= out.shape[i];
  if (out.numel() == 0)
    return;
  size_t outRow = (size_t)out.shape[axis] * inner * esize;
  int64_t nIn = (int64_t)ctx.inputs.size();
  bool par = ctx.threads > 1 && (int64_t)out.bytes() >= kParallelBytes;
  if (outer == 1) { // each input is one contiguous block: split the big blocks instead
    for (int64_t k = 0; k < nIn; ++k)
      parallelCopy((char *)out.data + offsets[k] * inner * esize, ctx.inputs[k].data,
                   ctx.inputs[k].bytes(), ctx.threads);
    return;
  }
#pragma omp parallel for num_threads(ctx.threads) if (par) schedule(static)
  for (int64_t task = 0; task < outer * nIn; ++task) {
    int64_t o = task / nIn, k = task % nIn;
    const TensorRef &in = ctx.inputs[k];
    size_t row = (size_t)in.shape[axis] * inner * esize;
    std::memcpy((char *)out.data + o * outRow + offsets[k] * inner * esize,
                (const char *)in.data + o * row, row);
  }
}

} // namespace

void registerMovementKernels(KernelRegistry &registry) {
  registry.add(OpKind::Transpose, transposeKernel, Storage16::Native);
  registry.add(OpKind::Slice, sliceKernel, Storage16::Native);
  registry.add(OpKind::Concat, concatKernel, Storage16::Native);
  registry.add(OpKind::Broadcast, broadcastKernel, Storage16::Native);
  registry.add(OpKind::Reshape, reshapeKernel, Storage16::Native);
  registry.add(OpKind::StopGradient, reshapeKernel, Storage16::Native); // a copy (autodiff already read its meaning)
  // A plain copy the plan builder inserts (no dialect op): a program's result that reads a
  // variable the program assigns afterwards keeps the value it read.
  registry.add(OpKind::Copy, reshapeKernel, Storage16::Native);
}

} // namespace cpc::kernels
