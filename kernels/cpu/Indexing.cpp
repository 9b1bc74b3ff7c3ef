//===- Indexing.cpp - gather, gather_elements, scatter_nd, topk, argsort --===//
#include "kernels/Checks.h"
#include "kernels/cpu/Kernel.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <type_traits>
#include <vector>

namespace cpc::kernels {
namespace {

constexpr int64_t kParallelWork = 1 << 16;

/// Calls fn(T{}) with T the C++ type of a numeric dtype; i1 is stored as one byte 0/1.
template <typename Fn> void dispatchNumeric(KernelContext &ctx, DType t, Fn &&fn) {
  switch (t) {
  case DType::F32: return fn(float{});
  case DType::F64: return fn(double{});
  case DType::I64: return fn(int64_t{});
  case DType::I32: return fn(int32_t{});
  case DType::I16: return fn(int16_t{});
  case DType::I8: return fn(int8_t{});
  case DType::U8: case DType::I1: return fn(uint8_t{});
  default: ctx.fail(std::string("unsupported element type ") + dtypeName(t));
  }
}

/// Indices as i64, negatives wrapped; fails on the first one outside [-size, size).
std::vector<int64_t> readIndices(KernelContext &ctx, const TensorRef &t) {
  std::vector<int64_t> v(t.numel());
  if (t.dtype == DType::I64) {
    if (!v.empty()) // an empty tensor may have no memory at all
      std::memcpy(v.data(), t.data, v.size() * sizeof(int64_t));
  }
  else if (t.dtype == DType::I32)
    std::copy(t.as<int32_t>(), t.as<int32_t>() + v.size(), v.begin());
  else
    ctx.fail(std::string("indices must be i64 or i32, not ") + dtypeName(t.dtype));
  return v;
}

int64_t wrapIndex(KernelContext &ctx, int64_t idx, int64_t size, int64_t dim) {
  int64_t i = idx < 0 ? idx + size : idx;
  if (i < 0 || i >= size)
    ctx.fail("index " + std::to_string(idx) + " is out of range for dim " + std::to_string(dim) +
             " of size " + std::to_string(size));
  return i;
}

//===----------------------------------------------------------------------===//
// gather, gather_elements, scatter_nd
//===----------------------------------------------------------------------===//

void gatherKernel(KernelContext &ctx) {
  int64_t axis = checkGather(ctx);
  const TensorRef &data = ctx.inputs[0], &indices = ctx.inputs[1];
  TensorRef &out = ctx.outputs[0];
  std::vector<int64_t> idx = readIndices(ctx, indices);
  int64_t size = data.shape[axis];
  IndexBlock block = indexBlock(ctx, size); // slices outside this rank's block are zero
  for (int64_t &i : idx)
    i = block.localIndex(wrapIndex(ctx, i, block.global, axis));
  int64_t outer = numElements({data.shape.begin(), data.shape.begin() + axis});
  int64_t inner = numElements({data.shape.begin() + axis + 1, data.shape.end()});
  int64_t n = (int64_t)idx.size();
  size_t es = dtypeSize(data.dtype), chunk = inner * es;
  const char *src = (const char *)data.data;
  char *dst = (char *)out.data;
#pragma omp parallel for num_threads(ctx.threads) if (out.numel() > kParallelWork) schedule(static)
  for (int64_t t = 0; t < outer * n; ++t) {
    int64_t o = t / n, i = t % n;
    if (idx[i] < 0)
      std::memset(dst + t * chunk, 0, chunk);
    else
      std::memcpy(dst + t * chunk, src + (o * size + idx[i]) * chunk, chunk);
  }
}

/// out[o, i, k] = data[o, indices[o, i, k], k] over (dims before the axis, the axis, dims after),
/// where data's dims other than the axis may be larger than the indices'. Rows of the index
/// tensor run in parallel; elements are moved as unsigned words of the element's size.
template <typename Word>
void gatherElementsRows(const KernelContext &ctx, const TensorRef &data, const TensorRef &indices,
                        const std::vector<int64_t> &idx, int64_t axis, Word *dst) {
  int64_t r = data.rank();
  std::vector<int64_t> strides = rowMajorStrides(data.shape);
  const auto &is = indices.shape;
  int64_t rows = numElements({is.begin(), is.begin() + axis + 1}), len = is[axis];
  int64_t inner = numElements({is.begin() + axis + 1, is.end()}), axisStride = strides[axis];
  std::vector<int64_t> outerOff = positionOffsets(is, strides, 0, axis);
  std::vector<int64_t> innerOff = positionOffsets(is, strides, axis + 1, r);
  const Word *src = (const Word *)data.data;
#pragma omp parallel for num_threads(ctx.threads) if ((int64_t)idx.size() > kParallelWork) schedule(static)
  for (int64_t row = 0; row < rows; ++row) {
    const Word *base = src + outerOff[row / len];
    const int64_t *at = idx.data() + row * inner;
    Word *d = dst + row * inner;
    for (int64_t k = 0; k < inner; ++k)
      d[k] = at[k] < 0 ? Word(0) : base[at[k] * axisStride + innerOff[k]];
  }
}

void gatherElementsKernel(KernelContext &ctx) {
  int64_t axis = checkGatherElements(ctx);
  const TensorRef &data = ctx.inputs[0], &indices = ctx.inputs[1];
  TensorRef &out = ctx.outputs[0];
  std::vector<int64_t> idx = readIndices(ctx, indices);
  IndexBlock block = indexBlock(ctx, data.shape[axis]); // elements outside this rank's block are zero
  for (int64_t &i : idx)
    i = block.localIndex(wrapIndex(ctx, i, block.global, axis));
  if (idx.empty())
    return;
  switch (dtypeSize(data.dtype)) {
  case 1: return gatherElementsRows(ctx, data, indices, idx, axis, (uint8_t *)out.data);
  case 2: return gatherElementsRows(ctx, data, indices, idx, axis, (uint16_t *)out.data);
  case 4: return gatherElementsRows(ctx, data, indices, idx, axis, (uint32_t *)out.data);
  case 8: return gatherElementsRows(ctx, data, indices, idx, axis, (uint64_t *)out.data);
  default: ctx.fail(std::string("unsupported element type ") + dtypeName(data.dtype));
  }
}

template <typename T>
void scatterApply(T *dst, const T *upd, int64_t n, ScatterReduction reduction) {
  if (reduction == ScatterReduction::Add)
    for (int64_t i = 0; i < n; ++i)
      dst[i] = static_cast<T>(dst[i] + upd[i]);
  else if (reduction == ScatterReduction::Mul)
    for (int64_t i = 0; i < n; ++i)
      dst[i] = static_cast<T>(dst[i] * upd[i]);
  else if (reduction == ScatterReduction::Max)
    for (int64_t i = 0; i < n; ++i)
      dst[i] = std::max(dst[i], upd[i]);
  else if (reduction == ScatterReduction::Min)
    for (int64_t i = 0; i < n; ++i)
      dst[i] = std::min(dst[i], upd[i]);
}

void scatterNDKernel(KernelContext &ctx) {
  ScatterOperands scatter = checkScatterND(ctx);
  const int64_t q = scatter.tupleLength;
  const ScatterReduction reduction = scatter.reduction;
  const TensorRef &data = ctx.inputs[0], &indices = ctx.inputs[1], &updates = ctx.inputs[2];
  TensorRef &out = ctx.outputs[0];
  std::vector<int64_t> idx = readIndices(ctx, indices);
  std::vector<int64_t> strides = rowMajorStrides(data.shape);
  int64_t slice = numElements({data.shape.begin() + q, data.shape.end()});
  int64_t nTuples = numElements({indices.shape.begin(), indices.shape.end() - 1});
  std::vector<int64_t> offsets(nTuples, 0);
  for (int64_t t = 0; t < nTuples; ++t)
    for (int64_t d = 0; d < q; ++d)
      offsets[t] += wrapIndex(ctx, idx[t * q + d], data.shape[d], d) * strides[d];

  size_t es = dtypeSize(data.dtype);
  if (out.data != data.data)
    std::memcpy(out.data, data.data, data.bytes());
  // In order, so that with duplicate indices the last update wins (or all accumulate).
  if (reduction == ScatterReduction::None) {
    for (int64_t t = 0; t < nTuples; ++t)
      std::memcpy((char *)out.data + offsets[t] * es, (const char *)updates.data + t * slice * es,
                  slice * es);
    return;
  }
  dispatchNumeric(ctx, data.dtype, [&](auto tag) {
    using T = decltype(tag);
    for (int64_t t = 0; t < nTuples; ++t)
      scatterApply(out.as<T>() + offsets[t], updates.as<T>() + t * slice, slice, reduction);
  });
}

//===----------------------------------------------------------------------===//
// topk, argsort
//===----------------------------------------------------------------------===//

/// a < b in a total order where NaN is above everything (and equal to itself), as numpy sorts.
template <typename T> bool valueLess(T a, T b) {
  if constexpr (std::is_floating_point_v<T>) {
    if (std::isnan(a))
      return false;
    if (std::isnan(b))
      return true;
  }
  return a < b;
}

/// Splits a tensor around `axis` into outer x size x inner rows (stride `inner` along the axis).
struct AxisView {
  int64_t outer, size, inner;
};
AxisView axisView(const std::vector<int64_t> &shape, int64_t axis) {
  return {numElements({shape.begin(), shape.begin() + axis}), shape[axis],
          numElements({shape.begin() + axis + 1, shape.end()})};
}

template <typename T> void topkTyped(KernelContext &ctx, int64_t axis, int64_t k, bool largest) {
  const TensorRef &in = ctx.inputs[0];
  AxisView v = axisView(in.shape, axis);
  const T *src = in.as<T>();
  T *vals = ctx.outputs[0].as<T>();
  int64_t *inds = ctx.outputs[1].as<int64_t>();
  int64_t rows = v.outer * v.inner;
  // Strict weak order: better value first, then the lower index (ONNX's tie rule).
  auto better = [largest](const std::pair<T, int64_t> &a, const std::pair<T, int64_t> &b) {
    if (largest ? valueLess(b.first, a.first) : valueLess(a.first, b.first))
      return true;
    if (largest ? valueLess(a.first, b.first) : valueLess(b.first, a.first))
      return false;
    return a.second < b.second;
  };
#pragma omp parallel for num_threads(ctx.threads) if (rows * v.size > kParallelWork) schedule(static)
  for (int64_t row = 0; row < rows; ++row) {
    int64_t o = row / v.inner, i = row % v.inner;
    const T *s = src + o * v.size * v.inner + i;
    std::vector<std::pair<T, int64_t>> items(v.size);
    for (int64_t j = 0; j < v.size; ++j)
      items[j] = {s[j * v.inner], j};
    if (k < v.size)
      std::partial_sort(items.begin(), items.begin() + k, items.end(), better);
    else
      std::sort(items.begin(), items.end(), better);
    int64_t base = o * k * v.inner + i;
    for (int64_t j = 0; j < k; ++j) {
      vals[base + j * v.inner] = items[j].first;
      inds[base + j * v.inner] = items[j].second;
    }
  }
}

void topkKernel(KernelContext &ctx) {
  TopKOperands operands = checkTopK(ctx);
  int64_t axis = operands.axis, k = operands.k;
  bool largest = ctx.attrs.largest;
  const TensorRef &in = ctx.inputs[0];
  if (ctx.outputs[1].numel() == 0)
    return;
  // `sorted` = false leaves the order unspecified; sorted output satisfies it too.
  dispatchNumeric(ctx, in.dtype, [&](auto tag) { topkTyped<decltype(tag)>(ctx, axis, k, largest); });
}

template <typename T> void argsortTyped(KernelContext &ctx, int64_t axis, bool descending) {
  const TensorRef &in = ctx.inputs[0];
  AxisView v = axisView(in.shape, axis);
  const T *src = in.as<T>();
  int64_t *dst = ctx.outputs[0].as<int64_t>();
  int64_t rows = v.outer * v.inner;
#pragma omp parallel for num_threads(ctx.threads) if (rows * v.size > kParallelWork) schedule(static)
  for (int64_t row = 0; row < rows; ++row) {
    int64_t o = row / v.inner, i = row % v.inner, base = o * v.size * v.inner + i;
    std::vector<T> vals(v.size);
    for (int64_t j = 0; j < v.size; ++j)
      vals[j] = src[base + j * v.inner];
    std::vector<int64_t> order(v.size);
    std::iota(order.begin(), order.end(), 0);
    // stable_sort keeps equal values in input order in both directions.
    if (descending)
      std::stable_sort(order.begin(), order.end(),
                       [&](int64_t a, int64_t b) { return valueLess(vals[b], vals[a]); });
    else
      std::stable_sort(order.begin(), order.end(),
                       [&](int64_t a, int64_t b) { return valueLess(vals[a], vals[b]); });
    for (int64_t j = 0; j < v.size; ++j)
      dst[base + j * v.inner] = order[j];
  }
}

void argsortKernel(KernelContext &ctx) {
  int64_t axis = checkArgsort(ctx);
  const TensorRef &in = ctx.inputs[0];
  if (in.numel() == 0)
    return;
  bool descending = ctx.attrs.descending;
  dispatchNumeric(ctx, in.dtype, [&](auto tag) { argsortTyped<decltype(tag)>(ctx, axis, descending); });
}

} // namespace

void registerIndexingKernels(KernelRegistry &registry) {
  registry.add(OpKind::Gather, gatherKernel, Storage16::Native); // moves bytes
  registry.add(OpKind::GatherElements, gatherElementsKernel, Storage16::Native); // moves bytes
  registry.add(OpKind::ScatterND, scatterNDKernel);
  registry.add(OpKind::TopK, topkKernel);
  registry.add(OpKind::ArgSort, argsortKernel);
}

} // namespace cpc::kernels
