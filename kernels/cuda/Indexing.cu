//===- Indexing.cu - gather*, their gradients, scatter_nd, topk, argsort --===//
//
// gather and gather_elements move words. Their gradients and scatter_nd are deterministic and
// atomic-free: gather_grad and scatter_nd sort their indices stably by target (CUB's radix sort)
// and one thread per target and column walks its run of indices in index order, which is the CPU
// kernels' order of additions (bit-identical sums); gather_elements_grad gives each column of the
// indices (the elements differing only along the axis) one thread, which cannot collide with
// another's. topk and argsort sort each row in shared memory (bitonic network, ties by index).
//
// Indices wrap once when negative and honour block_axes (indexBlock) as on the CPU. An index out
// of range, where the CPU kernels fail, is recorded in the device's fault record (the host fails
// the step with the CPU's message when it next looks, kernels/KernelFault.h) and treated as
// outside this rank's block meanwhile (a zero result, no update).
//
#include "kernels/Checks.h"
#include "kernels/cuda/CudaCommon.cuh"
#include "kernels/cuda/CudaKernels.h"
#include "kernels/cuda/IndexingLaunch.h"
#include "kernels/cuda/IndexingMath.h"
#include "kernels/cuda/NormalizationMath.h" // RowShape: rows along an axis

#include <cub/device/device_radix_sort.cuh>

#include <string>
#include <type_traits>
#include <vector>

namespace cpc::kernels {
namespace cuda {
namespace {

template <typename W, typename I>
__global__ void gatherKernel(W *out, const W *data, const I *indices, GatherShape g, IndexRange r, int64_t total,
                             FaultSink fault, int32_t axis) {
  CPC_GRID_STRIDE(e, total) {
    GatherCoord c = gatherCoord(g, e);
    int64_t p = checkedLocalIndex(int64_t(indices[c.i]), r, fault, axis);
    out[e] = p < 0 ? W(0) : data[gatherSource(g, c, p)];
  }
}

template <typename W, typename I>
__global__ void gatherElementsKernel(W *out, const W *data, const I *indices, ElementsMap m, IndexRange r, int64_t total,
                                     FaultSink fault) {
  CPC_GRID_STRIDE(e, total) {
    int64_t p = checkedLocalIndex(int64_t(indices[e]), r, fault, m.axis);
    out[e] = p < 0 ? W(0) : data[elementsOffset(m, e, p)];
  }
}

template <typename I>
__global__ void gatherGradKeys(const I *indices, uint32_t *keys, int32_t *positions, int64_t n, IndexRange r,
                               FaultSink fault) {
  CPC_GRID_STRIDE(i, n) {
    keys[i] = targetKey(checkedLocalIndex(int64_t(indices[i]), r, fault, -1), r.local);
    positions[i] = int32_t(i);
  }
}

/// One thread per (o, sorted entry, k) that starts a run: the run's gradient rows summed in index
/// order into result row `key` (the other result rows stay zero).
template <typename T>
__global__ void gatherGradRuns(T *out, const T *grad, const uint32_t *keys, const int32_t *positions, GatherShape g,
                               int64_t total) {
  using Acc = ComputeT<T>;
  CPC_GRID_STRIDE(e, total) {
    GatherCoord c = gatherCoord(g, e); // c.i: the entry in sorted order
    uint32_t key = keys[c.i];
    if (key >= g.size || !segmentHead(keys, c.i))
      continue;
    Acc sum = 0;
    for (int64_t s = c.i; s < g.n && keys[s] == key; ++s)
      sum += load(grad, (c.o * g.n + positions[s]) * g.inner + c.k);
    store(out, gatherSource(g, c, key), sum);
  }
}

/// One thread per column (o, k) of the indices: adds its gradients along the axis, in order.
template <typename T, typename Acc, typename I>
__global__ void gatherElementsGradColumns(Acc *sums, const T *grad, const I *indices, ElementsMap m, IndexRange r,
                                          int64_t outer, int64_t len, int64_t inner, FaultSink fault) {
  CPC_GRID_STRIDE(column, outer * inner) {
    int64_t o = column / inner, k = column % inner;
    for (int64_t j = 0; j < len; ++j) {
      int64_t e = (o * len + j) * inner + k, p = checkedLocalIndex(int64_t(indices[e]), r, fault, -1);
      if (p >= 0)
        sums[elementsOffset(m, e, p)] += load(grad, e);
    }
  }
}

template <typename T> __global__ void narrowKernel(T *out, const float *in, int64_t n) {
  CPC_GRID_STRIDE(i, n) { store(out, i, in[i]); }
}

template <typename I>
__global__ void scatterKeys(const I *indices, uint32_t *keys, int32_t *positions, int64_t tuples, ScatterDims dims,
                            int64_t slots, FaultSink fault) {
  CPC_GRID_STRIDE(t, tuples) {
    keys[t] = targetKey(scatterSlot(dims, indices + t * dims.q, fault), slots);
    positions[t] = int32_t(t);
  }
}

/// One thread per (sorted tuple, k) that starts a run: the run's updates applied in tuple order.
template <typename T>
__global__ void scatterRuns(T *out, const T *updates, const uint32_t *keys, const int32_t *positions, int64_t tuples,
                            int64_t slice, int64_t slots, ScatterReduction reduction) {
  using Acc = ComputeT<T>;
  CPC_GRID_STRIDE(e, tuples * slice) {
    int64_t s = e / slice, k = e % slice;
    uint32_t key = keys[s];
    if (key >= slots || !segmentHead(keys, s))
      continue;
    int64_t at = key * slice + k;
    Acc value = load(out, at);
    for (int64_t t = s; t < tuples && keys[t] == key; ++t)
      value = scatterCombine(value, load(updates, positions[t] * slice + k), reduction);
    store(out, at, value);
  }
}

/// One block per row (grid-stride): the row, padded to `padded` entries, sorted in shared memory;
/// the first `keep` positions (and values, for topk) written along the axis.
template <typename T, typename K>
__global__ void sortRowsKernel(const T *in, T *values, int64_t *positions, RowShape shape, int padded, int64_t keep,
                               bool descending) {
  extern __shared__ __align__(16) unsigned char sortShared[];
  K *keys = reinterpret_cast<K *>(sortShared);
  int32_t *index = reinterpret_cast<int32_t *>(keys + padded);
  int32_t len = (int32_t)shape.len;
  for (int64_t row = blockIdx.x; row < shape.rows; row += gridDim.x) {
    int64_t base = rowBase(shape, row);
    for (int t = threadIdx.x; t < padded; t += blockDim.x) {
      keys[t] = t < len ? K(load(in, base + t * shape.inner)) : K(0);
      index[t] = t;
    }
    __syncthreads();
    for (int size = 2; size <= padded; size *= 2)
      for (int stride = size / 2; stride > 0; stride /= 2) {
        for (int t = threadIdx.x; t < padded / 2; t += blockDim.x)
          bitonicStep(keys, index, t, size, stride, descending, len);
        __syncthreads();
      }
    int64_t outBase = (row / shape.inner) * keep * shape.inner + row % shape.inner;
    for (int64_t j = threadIdx.x; j < keep; j += blockDim.x) {
      int64_t at = outBase + j * shape.inner;
      positions[at] = index[j];
      if (values)
        values[at] = in[base + int64_t(index[j]) * shape.inner];
    }
    __syncthreads(); // the row's results are read out before the next row overwrites them
  }
}

//===----------------------------------------------------------------------===//
// Host side.
//===----------------------------------------------------------------------===//

/// Calls f(S{}) with the device storage type of t (i1 as its byte).
template <typename F> void withStorage(const KernelContext &ctx, DType t, F &&f) {
  if (t == DType::I1)
    return f(uint8_t{});
  dispatchDevice<kNum>(ctx, t, f);
}

template <typename F> void withIndexType(const KernelContext &ctx, const TensorRef &t, F &&f) {
  if (t.dtype == DType::I64)
    return f(int64_t{});
  if (t.dtype == DType::I32)
    return f(int32_t{});
  ctx.fail(std::string("indices must be i64 or i32, not ") + dtypeName(t.dtype));
}

/// Calls f(W{}) with the unsigned word of `bytes` (an element moved as is).
template <typename F> void withWord(const KernelContext &ctx, size_t bytes, F &&f) {
  switch (bytes) {
  case 1: return f(uint8_t{});
  case 2: return f(uint16_t{});
  case 4: return f(uint32_t{});
  case 8: return f(uint64_t{});
  }
  ctx.fail("unsupported element size " + std::to_string(bytes));
}

LaunchConfig gridFor(const KernelContext &ctx, int64_t n) { return elementwiseLaunch(n, deviceOf(ctx).multiprocessors()); }

IndexRange rangeOf(const KernelContext &ctx, int64_t local) {
  IndexBlock b = indexBlock(ctx, local);
  return {b.offset, b.local, b.global};
}

/// The indices' shape with `strides` (of the tensor they index) around `axis`.
ElementsMap elementsMap(const KernelContext &ctx, const std::vector<int64_t> &shape, const std::vector<int64_t> &strides,
                        int64_t axis) {
  if (shape.size() > (size_t)kMaxIndexDims)
    ctx.fail("more than " + std::to_string(kMaxIndexDims) + " dims are not supported on the GPU");
  ElementsMap m;
  m.rank = (int)shape.size();
  m.axis = (int)axis;
  for (int d = 0; d < m.rank; ++d) {
    m.shape[d] = shape[d];
    m.strides[d] = strides[d];
  }
  return m;
}

void zeroFill(const KernelContext &ctx, void *p, size_t bytes) {
  if (bytes)
    checkCuda(cudaMemsetAsync(p, 0, bytes, streamOf(ctx)), opName(ctx.op));
}

struct SortedTargets {
  const uint32_t *keys;
  const int32_t *positions;
};

/// Sorts n (target key, position) pairs stably by key in scratch slot 0; makeKeys(keys, positions)
/// queues the kernel that writes them.
template <typename MakeKeys>
SortedTargets sortByTarget(const KernelContext &ctx, int64_t n, uint64_t sentinel,
                                                          MakeKeys &&makeKeys) {
  if (n >= (int64_t(1) << 31) || sentinel >= (uint64_t(1) << 32) - 1)
    ctx.fail("too many indices or targets for the GPU's 32-bit sort");
  cudaStream_t stream = streamOf(ctx);
  int bits = radixBits(sentinel);
  size_t tempBytes = 0;
  checkCuda(cub::DeviceRadixSort::SortPairs(nullptr, tempBytes, (const uint32_t *)nullptr, (uint32_t *)nullptr,
                                            (const int32_t *)nullptr, (int32_t *)nullptr, (int)n, 0, bits, stream),
            "radix sort size");
  SortScratch layout = sortScratch(n, tempBytes);
  char *base = (char *)deviceOf(ctx).scratch(0, layout.total);
  auto *keysIn = (uint32_t *)(base + layout.keysIn), *keysOut = (uint32_t *)(base + layout.keysOut);
  auto *positionsIn = (int32_t *)(base + layout.positionsIn), *positionsOut = (int32_t *)(base + layout.positionsOut);
  makeKeys(keysIn, positionsIn);
  checkLaunch(ctx);
  checkCuda(cub::DeviceRadixSort::SortPairs(base + layout.temp, tempBytes, keysIn, keysOut, positionsIn, positionsOut,
                                            (int)n, 0, bits, stream),
            "radix sort");
  return {keysOut, positionsOut};
}

/// gather and gather_elements: launch(I{}, W{}, config) with the index type of input 1 and the
/// word of the data's elements, over the result's elements.
template <typename Launch> void launchOverResult(KernelContext &ctx, Launch &&launch) {
  int64_t total = ctx.outputs[0].numel();
  withIndexType(ctx, ctx.inputs[1], [&](auto index) {
    if (total == 0)
      return;
    LaunchConfig l = gridFor(ctx, total);
    withWord(ctx, dtypeSize(ctx.inputs[0].dtype), [&](auto word) { launch(index, word, l); });
  });
  checkLaunch(ctx);
}

void gather(KernelContext &ctx) {
  int64_t axis = checkGather(ctx);
  const TensorRef &data = ctx.inputs[0], &indices = ctx.inputs[1];
  TensorRef &out = ctx.outputs[0];
  GatherShape g{indices.numel(), data.shape[axis], numElements({data.shape.begin() + axis + 1, data.shape.end()})};
  IndexRange r = rangeOf(ctx, g.size);
  launchOverResult(ctx, [&](auto index, auto word, LaunchConfig l) {
    using I = decltype(index);
    using W = decltype(word);
    gatherKernel<W, I><<<l.blocks, l.threads, 0, streamOf(ctx)>>>(out.as<W>(), data.as<W>(), indices.as<I>(), g, r,
                                                                   out.numel(), faultSinkOf(ctx), int32_t(axis));
  });
}

void gatherElements(KernelContext &ctx) {
  int64_t axis = checkGatherElements(ctx);
  const TensorRef &data = ctx.inputs[0], &indices = ctx.inputs[1];
  TensorRef &out = ctx.outputs[0];
  ElementsMap m = elementsMap(ctx, indices.shape, rowMajorStrides(data.shape), axis);
  IndexRange range = rangeOf(ctx, data.shape[axis]);
  launchOverResult(ctx, [&](auto index, auto word, LaunchConfig l) {
    using I = decltype(index);
    using W = decltype(word);
    gatherElementsKernel<W, I><<<l.blocks, l.threads, 0, streamOf(ctx)>>>(out.as<W>(), data.as<W>(), indices.as<I>(),
                                                                           m, range, out.numel(), faultSinkOf(ctx));
  });
}

void gatherGrad(KernelContext &ctx) {
  int64_t axis = checkGatherGrad(ctx);
  const TensorRef &grad = ctx.inputs[0], &indices = ctx.inputs[1], &out = ctx.outputs[0];
  GatherShape g{indices.numel(), out.shape[axis], numElements({out.shape.begin() + axis + 1, out.shape.end()})};
  IndexRange range = rangeOf(ctx, g.size);
  withIndexType(ctx, indices, [&](auto index) {
    using I = decltype(index);
    dispatchDevice<kFloat>(ctx, out.dtype, [&](auto zero) {
      using T = decltype(zero);
      zeroFill(ctx, out.data, out.bytes());
      if (grad.numel() == 0)
        return;
      SortedTargets sorted = sortByTarget(ctx, g.n, (uint64_t)g.size, [&](uint32_t *k, int32_t *p) {
        LaunchConfig l = gridFor(ctx, g.n);
        gatherGradKeys<I><<<l.blocks, l.threads, 0, streamOf(ctx)>>>(indices.as<I>(), k, p, g.n, range, faultSinkOf(ctx));
      });
      LaunchConfig l = gridFor(ctx, grad.numel());
      gatherGradRuns<T><<<l.blocks, l.threads, 0, streamOf(ctx)>>>(out.as<T>(), grad.as<T>(), sorted.keys, sorted.positions, g,
                                                                    grad.numel());
    });
  });
  checkLaunch(ctx);
}

void gatherElementsGrad(KernelContext &ctx) {
  int64_t axis = checkGatherElementsGrad(ctx);
  const TensorRef &grad = ctx.inputs[0], &indices = ctx.inputs[1], &out = ctx.outputs[0];
  ElementsMap m = elementsMap(ctx, indices.shape, rowMajorStrides(out.shape), axis);
  IndexRange range = rangeOf(ctx, out.shape[axis]);
  const auto &is = indices.shape;
  int64_t outer = numElements({is.begin(), is.begin() + axis}), len = is[axis];
  int64_t inner = numElements({is.begin() + axis + 1, is.end()});
  withIndexType(ctx, indices, [&](auto index) {
    using I = decltype(index);
    dispatchDevice<kFloat>(ctx, out.dtype, [&](auto zero) {
      using T = decltype(zero);
      using Acc = ComputeT<T>;
      // 16-bit results accumulate in f32 scratch and round once, as the CPU kernel's widening does.
      constexpr bool narrow = !std::is_same_v<T, Acc>;
      Acc *sums = narrow ? (Acc *)deviceOf(ctx).scratch(1, out.numel() * sizeof(Acc)) : (Acc *)out.data;
      zeroFill(ctx, sums, out.numel() * sizeof(Acc));
      if (grad.numel() > 0) {
        LaunchConfig l = gridFor(ctx, outer * inner);
        gatherElementsGradColumns<T, Acc, I><<<l.blocks, l.threads, 0, streamOf(ctx)>>>(
            sums, grad.as<T>(), indices.as<I>(), m, range, outer, len, inner, faultSinkOf(ctx));
      }
      if constexpr (narrow) {
        if (out.numel() > 0) {
          LaunchConfig l = gridFor(ctx, out.numel());
          narrowKernel<T><<<l.blocks, l.threads, 0, streamOf(ctx)>>>(out.as<T>(), sums, out.numel());
        }
      }
    });
  });
  checkLaunch(ctx);
}

void scatterND(KernelContext &ctx) {
  ScatterOperands scatter = checkScatterND(ctx);
  const TensorRef &data = ctx.inputs[0], &indices = ctx.inputs[1], &updates = ctx.inputs[2];
  TensorRef &out = ctx.outputs[0];
  const int64_t q = scatter.tupleLength;
  const ScatterReduction reduction = scatter.reduction;
  if (q > kMaxIndexDims)
    ctx.fail("index tuples longer than " + std::to_string(kMaxIndexDims) + " are not supported on the GPU");
  ScatterDims dims;
  dims.q = (int)q;
  for (int d = 0; d < dims.q; ++d)
    dims.shape[d] = data.shape[d];
  int64_t slots = numElements({data.shape.begin(), data.shape.begin() + q});
  int64_t slice = numElements({data.shape.begin() + q, data.shape.end()});
  int64_t tuples = numElements({indices.shape.begin(), indices.shape.end() - 1});
  withIndexType(ctx, indices, [&](auto index) {
    using I = decltype(index);
    if (out.data != data.data && data.bytes())
      checkCuda(cudaMemcpyAsync(out.data, data.data, data.bytes(), cudaMemcpyDeviceToDevice, streamOf(ctx)),
                "scatter_nd copy");
    if (tuples == 0 || slice == 0)
      return;
    SortedTargets sorted = sortByTarget(ctx, tuples, (uint64_t)slots, [&](uint32_t *k, int32_t *p) {
      LaunchConfig l = gridFor(ctx, tuples);
      scatterKeys<I><<<l.blocks, l.threads, 0, streamOf(ctx)>>>(indices.as<I>(), k, p, tuples, dims, slots,
                                                                 faultSinkOf(ctx));
    });
    withStorage(ctx, data.dtype, [&](auto zero) {
      using T = decltype(zero);
      LaunchConfig l = gridFor(ctx, tuples * slice);
      scatterRuns<T><<<l.blocks, l.threads, 0, streamOf(ctx)>>>(out.as<T>(), updates.as<T>(), sorted.keys, sorted.positions, tuples,
                                                                 slice, slots, reduction);
    });
  });
  checkLaunch(ctx);
}

/// Sorts the rows along `axis` of the step's input and writes the first `keep` positions (and,
/// for topk, values) of each: topk and argsort.
void sortRows(KernelContext &ctx, int64_t axis, int64_t keep, bool descending, TensorRef *values, TensorRef &positions) {
  const TensorRef &in = ctx.inputs[0];
  RowShape shape = rowShapeAlong(in.shape, axis);
  withStorage(ctx, in.dtype, [&](auto zero) {
    using T = decltype(zero);
    using K = ComputeT<T>; // 16-bit floats compare as f32, as the CPU kernels widen them
    SortLaunch l = sortLaunch(shape.len, sizeof(K));
    if (!l.fits)
      ctx.fail("sorting rows of " + std::to_string(shape.len) + " " + dtypeName(in.dtype) +
               " elements is not supported on the GPU yet (at most " + std::to_string(kMaxSortLength) + ")");
    sortRowsKernel<T, K><<<blocksFor(shape.rows, 1), l.threads, l.sharedBytes, streamOf(ctx)>>>(
        in.as<T>(), values ? values->as<T>() : nullptr, positions.as<int64_t>(), shape, l.padded, keep, descending);
  });
  checkLaunch(ctx);
}

void topk(KernelContext &ctx) {
  TopKOperands operands = checkTopK(ctx);
  if (ctx.outputs[1].numel() == 0)
    return;
  // `sorted` = false leaves the order unspecified; sorted results satisfy it too.
  sortRows(ctx, operands.axis, operands.k, ctx.attrs.largest, &ctx.outputs[0], ctx.outputs[1]);
}

void argsort(KernelContext &ctx) {
  int64_t axis = checkArgsort(ctx);
  const TensorRef &in = ctx.inputs[0];
  if (in.numel() == 0)
    return;
  sortRows(ctx, axis, in.shape[axis], ctx.attrs.descending, nullptr, ctx.outputs[0]);
}

constexpr DType kEveryType[] = {DType::F32, DType::F64, DType::F16, DType::BF16, DType::I64,
                                DType::I32, DType::I16, DType::I8,  DType::U8,   DType::I1};

} // namespace
} // namespace cuda

void registerCudaIndexingKernels(KernelRegistry &registry) {
  for (DType t : cuda::kEveryType) {
    registry.add(OpKind::Gather, DeviceKind::Cuda, t, cuda::gather);
    registry.add(OpKind::GatherElements, DeviceKind::Cuda, t, cuda::gatherElements);
    registry.add(OpKind::ScatterND, DeviceKind::Cuda, t, cuda::scatterND);
    registry.add(OpKind::TopK, DeviceKind::Cuda, t, cuda::topk);
    // A step is looked up by its first result's type, i64 for argsort; the input's type is
    // dispatched inside, so every entry is the same kernel.
    registry.add(OpKind::ArgSort, DeviceKind::Cuda, t, cuda::argsort);
  }
  for (DType t : cuda::kFloatTypes) {
    registry.add(OpKind::GatherGrad, DeviceKind::Cuda, t, cuda::gatherGrad);
    registry.add(OpKind::GatherElementsGrad, DeviceKind::Cuda, t, cuda::gatherElementsGrad);
  }
}

} // namespace cpc::kernels
