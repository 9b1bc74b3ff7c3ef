//===- IndexingMath.h - gather, scatter and sort arithmetic, host and device ===//
//
// The index maps of gather and gather_elements, the keys and segment walks that make the
// gradients and scatter_nd deterministic (indices sorted stably by target, then one thread per
// target applies its updates in index order: the CPU kernels' order, without atomics), and the
// order and compare-exchange step of the bitonic sort behind topk and argsort. The host unit test
// runs them over whole tensors and compares with the CPU kernels.
//
#ifndef CPC_KERNELS_CUDA_INDEXINGMATH_H
#define CPC_KERNELS_CUDA_INDEXINGMATH_H

#include "kernels/KernelFault.h"
#include "kernels/OpAttrs.h"
#include "kernels/cuda/HostDevice.h"

#include <cstdint>

namespace cpc::kernels::cuda {

/// Dims an index map holds (kernel parameters are fixed-size).
constexpr int kMaxIndexDims = 12;

/// An indexed dim held as this rank's block [offset, offset + local) of `global` (IndexBlock).
struct IndexRange {
  int64_t offset = 0, local = 0, global = 0;
};
constexpr int64_t kOutsideBlock = -1, kOutOfRange = -2;

/// The local position of index `idx`: negatives wrap once; kOutsideBlock outside this rank's block
/// (the result is zero there, as on the CPU); kOutOfRange outside [-global, global), where the CPU
/// kernel fails and the GPU kernels record the fault for the host and treat it as outside.
CPC_HD int64_t localIndex(int64_t idx, const IndexRange &r) {
  int64_t i = idx < 0 ? idx + r.global : idx;
  if (i < 0 || i >= r.global)
    return kOutOfRange;
  return i >= r.offset && i < r.offset + r.local ? i - r.offset : kOutsideBlock;
}
/// localIndex, reporting an index out of range to `fault` as the CPU kernel words it: with the
/// indexed dim `dim` (gather, gather_elements) or without (-1: their gradients).
CPC_HD int64_t checkedLocalIndex(int64_t idx, const IndexRange &r, const FaultSink &fault, int32_t dim) {
  int64_t p = localIndex(idx, r);
  if (p == kOutOfRange)
    fault.report(FaultKind::IndexOutOfRange, idx, r.global, dim);
  return p;
}

/// gather over [outer, size, inner] with n indices: result element e is (o, i, k) of
/// [outer, n, inner] and reads data (o, idx[i], k).
struct GatherShape {
  int64_t n = 0, size = 0, inner = 1;
};
struct GatherCoord {
  int64_t o, i, k;
};
CPC_HD GatherCoord gatherCoord(const GatherShape &g, int64_t e) {
  int64_t k = e % g.inner, rest = e / g.inner;
  return {rest / g.n, rest % g.n, k};
}
CPC_HD int64_t gatherSource(const GatherShape &g, const GatherCoord &c, int64_t position) {
  return (c.o * g.size + position) * g.inner + c.k;
}

/// gather_elements: element e of the indices' shape maps to the element of a tensor with `strides`
/// at e's coordinates with the axis coordinate replaced (by the index).
struct ElementsMap {
  int rank = 0, axis = 0;
  int64_t shape[kMaxIndexDims] = {}, strides[kMaxIndexDims] = {};
};
CPC_HD int64_t elementsOffset(const ElementsMap &m, int64_t e, int64_t position) {
  int64_t offset = 0;
  for (int d = m.rank - 1; d >= 0; --d) {
    int64_t c = e % m.shape[d];
    e /= m.shape[d];
    offset += (d == m.axis ? position : c) * m.strides[d];
  }
  return offset;
}

/// Sort keys: an index's target (gather_grad: its local position; scatter_nd: its slot), or
/// `sentinel` (the number of targets, sorting last) for one that adds nowhere.
CPC_HD uint32_t targetKey(int64_t target, int64_t sentinel) { return target < 0 ? uint32_t(sentinel) : uint32_t(target); }

/// After a stable sort by key, entry s starts a segment (the thread that walks it) when its key
/// differs from the previous one.
CPC_HD bool segmentHead(const uint32_t *keys, int64_t s) { return s == 0 || keys[s - 1] != keys[s]; }

/// scatter_nd's slot of an index tuple: the row-major position over the data's first q dims.
struct ScatterDims {
  int q = 0;
  int64_t shape[kMaxIndexDims] = {};
};
/// kOutOfRange (reported to `fault`) when an index is outside [-n, n) of its dim.
template <typename I> CPC_HD int64_t scatterSlot(const ScatterDims &dims, const I *tuple, const FaultSink &fault = {}) {
  int64_t slot = 0;
  for (int d = 0; d < dims.q; ++d) {
    int64_t idx = int64_t(tuple[d]), n = dims.shape[d];
    int64_t i = idx < 0 ? idx + n : idx;
    if (i < 0 || i >= n) {
      fault.report(FaultKind::IndexOutOfRange, idx, n, d);
      return kOutOfRange;
    }
    slot = slot * n + i;
  }
  return slot;
}

/// scatter_nd's combination of an update with the current value, as the CPU kernel's (std::max
/// and std::min's orders: a NaN update never replaces, a NaN current value stays).
template <typename T> CPC_HD T scatterCombine(T current, T update, ScatterReduction reduction) {
  switch (reduction) {
  case ScatterReduction::Add: return T(current + update);
  case ScatterReduction::Mul: return T(current * update);
  case ScatterReduction::Max: return current < update ? update : current;
  case ScatterReduction::Min: return update < current ? update : current;
  default: return update;
  }
}

/// The values' order of topk and argsort: NaN above everything and equal to itself (numpy's).
template <typename K> CPC_HD bool valueLess(K a, K b) {
  if (a != a)
    return false;
  if (b != b)
    return true;
  return a < b;
}

/// Whether entry (va, ia) comes before (vb, ib) in a sorted row of n entries: real entries
/// (index < n) before the padding up to a power of two, then by value (larger first when
/// `descending`), then by index, which makes the order total and the sort stable.
template <typename K> CPC_HD bool sortsBefore(K va, int32_t ia, K vb, int32_t ib, bool descending, int32_t n) {
  bool padA = ia >= n, padB = ib >= n;
  if (padA != padB)
    return padB;
  if (!padA) {
    if (descending ? valueLess(vb, va) : valueLess(va, vb))
      return true;
    if (descending ? valueLess(va, vb) : valueLess(vb, va))
      return false;
  }
  return ia < ib;
}

/// Compare-exchange t (of count/2) of the bitonic network's stage (size, stride) over `count`
/// entries (a power of two): pairs (i, i + stride) inside blocks of `size`, blocks alternately
/// ascending and descending until the last stage (size == count) puts all in order.
template <typename K>
CPC_HD void bitonicStep(K *keys, int32_t *index, int t, int size, int stride, bool descending, int32_t n) {
  int i = 2 * t - (t & (stride - 1)), j = i + stride;
  bool ascending = (i & size) == 0;
  bool swap = ascending ? sortsBefore(keys[j], index[j], keys[i], index[i], descending, n)
                        : sortsBefore(keys[i], index[i], keys[j], index[j], descending, n);
  if (swap) {
    K k = keys[i];
    keys[i] = keys[j];
    keys[j] = k;
    int32_t x = index[i];
    index[i] = index[j];
    index[j] = x;
  }
}

} // namespace cpc::kernels::cuda

#endif
