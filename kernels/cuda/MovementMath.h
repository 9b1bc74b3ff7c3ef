//===- MovementMath.h - index maps of transpose, slice, broadcast, pad, concat ===//
//
// The movement kernels never look at values: they copy words (1 to 16 bytes) from a source
// position computed per destination element. These are the maps, shared by the kernels and the
// host unit tests that apply them to whole tensors and compare with the CPU kernels.
//
// transpose, slice and broadcast are one strided copy: destination element i (row-major over the
// result's shape) reads src[sum of coord_d * strides[d]], with strides in elements that may be 0
// (broadcast) or negative (a slice's negative steps). The plan merges dims as the CPU kernel does,
// then widens the words when the innermost run is contiguous and aligned. A transpose of the
// innermost pair goes through 32x32 tiles in shared memory instead (TileTranspose).
//
#ifndef CPC_KERNELS_CUDA_MOVEMENTMATH_H
#define CPC_KERNELS_CUDA_MOVEMENTMATH_H

#include "kernels/Tensor.h"
#include "kernels/cuda/HostDevice.h"
#include "kernels/cuda/Launch.h"

#include <cstdint>
#include <vector>

namespace cpc::kernels::cuda {

/// Dims a plan holds after merging (kernel parameters are fixed-size).
constexpr int kMaxCopyDims = 12;

struct StridedCopy {
  int rank = 0;
  int64_t shape[kMaxCopyDims] = {}, strides[kMaxCopyDims] = {};
  int64_t total = 0;     // elements (words once widened)
  int64_t base = 0;      // source offset of the first element
  int wordBytes = 0;     // bytes a kernel moves per element
};

/// The source offset (in words, from `base`) of destination element i. Index is the unsigned type
/// the divisions run in (32 bits when the tensor allows: much cheaper on a GPU).
template <typename Index> CPC_HD int64_t sourceOffset(const StridedCopy &c, Index i) {
  int64_t offset = 0;
  for (int d = c.rank - 1; d >= 0; --d) {
    Index n = Index(c.shape[d]);
    offset += int64_t(i % n) * c.strides[d];
    i /= n;
  }
  return offset;
}

/// The plan for `shape` (the result's) read with `strides` from element `base` of elements of
/// `elementBytes`: unit dims dropped, neighbours contiguous in the source merged. False when more
/// than kMaxCopyDims dims remain.
inline bool planStridedCopy(const std::vector<int64_t> &shape, const std::vector<int64_t> &strides, int64_t base,
                            int elementBytes, StridedCopy &plan) {
  plan = StridedCopy{};
  plan.base = base;
  plan.wordBytes = elementBytes;
  plan.total = 1;
  for (size_t i = 0; i < shape.size(); ++i) {
    plan.total *= shape[i];
    if (shape[i] == 1)
      continue;
    if (plan.rank > 0 && plan.strides[plan.rank - 1] == strides[i] * shape[i]) {
      plan.shape[plan.rank - 1] *= shape[i];
      plan.strides[plan.rank - 1] = strides[i];
    } else {
      if (plan.rank == kMaxCopyDims)
        return false;
      plan.shape[plan.rank] = shape[i];
      plan.strides[plan.rank] = strides[i];
      ++plan.rank;
    }
  }
  return true;
}


// The strided views of the three ops, from operands their kernels have checked (as the CPU
// kernels check them): strides in input elements per result dim, and the first element.

/// transpose: result dim i is input dim perm[i] (perm already made non-negative).
inline std::vector<int64_t> transposeStrides(const std::vector<int64_t> &inShape, const std::vector<int64_t> &perm) {
  std::vector<int64_t> in = rowMajorStrides(inShape), strides(perm.size());
  for (size_t i = 0; i < perm.size(); ++i)
    strides[i] = in[perm[i]];
  return strides;
}

/// slice: starts already made non-negative, steps may be negative.
inline std::vector<int64_t> sliceStrides(const std::vector<int64_t> &inShape, const std::vector<int64_t> &steps) {
  std::vector<int64_t> strides = rowMajorStrides(inShape);
  for (size_t i = 0; i < strides.size(); ++i)
    strides[i] *= steps[i];
  return strides;
}
inline int64_t sliceBase(const std::vector<int64_t> &inShape, const std::vector<int64_t> &starts) {
  std::vector<int64_t> strides = rowMajorStrides(inShape);
  int64_t base = 0;
  for (size_t i = 0; i < strides.size(); ++i)
    base += starts[i] * strides[i];
  return base;
}

/// broadcast (numpy-style: leading dims added, size-1 dims repeated with stride 0).
inline std::vector<int64_t> broadcastStrides(const std::vector<int64_t> &inShape, const std::vector<int64_t> &outShape) {
  std::vector<int64_t> in = rowMajorStrides(inShape), strides(outShape.size(), 0);
  size_t lead = outShape.size() - inShape.size();
  for (size_t i = 0; i < inShape.size(); ++i)
    strides[lead + i] = inShape[i] == 1 ? 0 : in[i];
  return strides;
}

/// Widens the plan's words (up to 16 bytes) when its innermost dim is contiguous and every stride,
/// the base and both addresses allow: k elements become one word. dstAddress and srcAddress are
/// the buffers' addresses (the source's before `base`).
inline void widenWords(StridedCopy &plan, uint64_t dstAddress, uint64_t srcAddress) {
  if (plan.rank == 0 || plan.strides[plan.rank - 1] != 1)
    return;
  for (int word = 16; word > plan.wordBytes; word /= 2) {
    int64_t k = word / plan.wordBytes;
    bool ok = plan.shape[plan.rank - 1] % k == 0 && plan.base % k == 0 && dstAddress % word == 0 &&
              (srcAddress + uint64_t(plan.base) * plan.wordBytes) % word == 0;
    for (int d = 0; ok && d < plan.rank - 1; ++d)
      ok = plan.strides[d] % k == 0;
    if (!ok)
      continue;
    plan.shape[plan.rank - 1] /= k;
    for (int d = 0; d < plan.rank - 1; ++d)
      plan.strides[d] /= k;
    plan.base /= k;
    plan.total /= k;
    plan.wordBytes = word;
    return;
  }
}

/// The swap of the innermost pair (dst[o][i][j] = src[outer(o) + i + j * colStride]): read and
/// written through 32x32 tiles so that both sides are coalesced. A block of 32 x 8 threads moves
/// a tile in four steps; tile t covers rows [32 tr, +32) and columns [32 tc, +32) of slab o.
constexpr int kTile = 32, kTileRowsPerStep = 8;
struct TileTranspose {
  StridedCopy outer;                   // the slabs' offsets (the plan's dims but the last two)
  int64_t rows = 0, cols = 0, colStride = 0;
  int64_t tilesR = 0, tilesC = 0, tiles = 0;
};

/// Whether the plan is such a swap (as the CPU kernel decides), and its tiling.
inline bool planTileTranspose(const StridedCopy &plan, TileTranspose &t) {
  int r = plan.rank;
  if (r < 2 || plan.strides[r - 2] != 1 || plan.strides[r - 1] == 1 || plan.strides[r - 1] == 0)
    return false;
  t = TileTranspose{};
  t.outer = plan;
  t.outer.rank = r - 2;
  t.rows = plan.shape[r - 2];
  t.cols = plan.shape[r - 1];
  t.colStride = plan.strides[r - 1];
  t.tilesR = (t.rows + kTile - 1) / kTile;
  t.tilesC = (t.cols + kTile - 1) / kTile;
  t.tiles = plan.total / (t.rows * t.cols) * t.tilesR * t.tilesC;
  return true;
}

/// Where tile `tile` lies: its slab and its first row and column.
struct TileOrigin {
  int64_t slab, row0, col0;
};
CPC_HD TileOrigin tileOrigin(const TileTranspose &t, int64_t tile) {
  int64_t col = tile % t.tilesC, rest = tile / t.tilesC;
  return {rest / t.tilesR, (rest % t.tilesR) * kTile, col * kTile};
}

/// A copy of `rows` rows of `width` contiguous words to rows `dstPitch` apart starting at
/// `dstOffset` (concat: each input into its place along the axis).
struct RowCopy {
  int64_t rows = 0, width = 0, dstPitch = 0, dstOffset = 0;
  int wordBytes = 0;
};
CPC_HD int64_t rowCopyTarget(const RowCopy &c, int64_t i) { return c.dstOffset + i / c.width * c.dstPitch + i % c.width; }

/// Widens a RowCopy's words (up to 16 bytes) where width, pitch, offset and addresses allow.
inline void widenWords(RowCopy &c, uint64_t dstAddress, uint64_t srcAddress) {
  for (int word = 16; word > c.wordBytes; word /= 2) {
    int64_t k = word / c.wordBytes;
    if (c.width % k || c.dstPitch % k || c.dstOffset % k || dstAddress % word || srcAddress % word)
      continue;
    c.width /= k;
    c.dstPitch /= k;
    c.dstOffset /= k;
    c.wordBytes = word;
    return;
  }
}

/// Whether a kernel over `total` elements can index them in 32 bits (a grid-stride step of at
/// most 2^31 never wraps past 2^32).

//===----------------------------------------------------------------------===//
// pad
//===----------------------------------------------------------------------===//

/// pad as a map from the result: element i is input element padSource(i), or the pad value
/// where that is -1 (an edge or an interior gap).
struct PadPlan {
  int rank = 0;
  int64_t outShape[kMaxCopyDims] = {}, inShape[kMaxCopyDims] = {}, low[kMaxCopyDims] = {};
  int64_t step[kMaxCopyDims] = {}, inStrides[kMaxCopyDims] = {}; // step: interior + 1
  int64_t total = 0;
};

template <typename Index> CPC_HD int64_t padSource(const PadPlan &p, Index i) {
  int64_t offset = 0;
  for (int d = p.rank - 1; d >= 0; --d) {
    Index n = Index(p.outShape[d]);
    int64_t c = int64_t(i % n) - p.low[d];
    i /= n;
    if (c < 0 || c % p.step[d] != 0 || c / p.step[d] >= p.inShape[d])
      return -1;
    offset += c / p.step[d] * p.inStrides[d];
  }
  return offset;
}

/// The plan of a checked pad (amounts >= 0, result shape matching); false beyond kMaxCopyDims.
inline bool planPad(const std::vector<int64_t> &inShape, const std::vector<int64_t> &outShape,
                    const std::vector<int64_t> &low, const std::vector<int64_t> &interior, PadPlan &p) {
  p = PadPlan{};
  if (inShape.size() > (size_t)kMaxCopyDims)
    return false;
  p.rank = (int)inShape.size();
  p.total = 1;
  std::vector<int64_t> inStrides = rowMajorStrides(inShape);
  for (int d = 0; d < p.rank; ++d) {
    p.outShape[d] = outShape[d];
    p.inShape[d] = inShape[d];
    p.low[d] = low[d];
    p.step[d] = interior[d] + 1;
    p.inStrides[d] = inStrides[d];
    p.total *= outShape[d];
  }
  return true;
}

/// concat: the copy of an input that starts at `offset` along `axis` of the result.
inline RowCopy concatRows(const std::vector<int64_t> &outShape, int64_t axis, const std::vector<int64_t> &inShape,
                          int64_t offset, int elementBytes) {
  int64_t outer = 1, inner = 1;
  for (int64_t i = 0; i < axis; ++i)
    outer *= outShape[i];
  for (size_t i = axis + 1; i < outShape.size(); ++i)
    inner *= outShape[i];
  RowCopy c;
  c.rows = outer;
  c.width = inShape[axis] * inner;
  c.dstPitch = outShape[axis] * inner;
  c.dstOffset = offset * inner;
  c.wordBytes = elementBytes;
  return c;
}

} // namespace cpc::kernels::cuda

#endif
