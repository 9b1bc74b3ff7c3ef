//===- GemmPlan.h - cpc.matmul as cuBLASLt GEMM calls, decided on the host --===//
//
// Plain C++ (no CUDA headers): the unit tests (tests/unit/cuda/GemmPlanTest.cpp) run the plan
// through a host loop that indexes exactly as cuBLASLt does and compare it with the CPU matmul,
// which proves the GPU kernel's layout logic without a GPU. Header-only (the shape checks are
// kernels/Checks.cpp's, in the CPU kernels' library) so that those tests link without CUDA.
//
// cpc.matmul is row-major, C[.., M, N] = op(lhs)[.., M, K] op(rhs)[.., K, N] with numpy batch
// broadcasting (kernels/cpu/Linalg.cpp). cuBLASLt is column-major, so the plan computes the
// transpose, C^T = op(rhs)^T op(lhs)^T: a row-major [R, S] block is a column-major S x R matrix
// with leading dimension S, so no data moves. cuBLASLt's A is the rhs, its B the lhs, D is C.
//
#ifndef CPC_KERNELS_CUDA_GEMMPLAN_H
#define CPC_KERNELS_CUDA_GEMMPLAN_H

#include "kernels/Checks.h"
#include "kernels/Tensor.h"

#include <algorithm>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace cpc::kernels::cuda {

/// One matrix of a cuBLASLt call: column-major `rows` x `cols` with leading dimension `ld`, used
/// transposed when `transpose`; consecutive matrices of a batch `batchStride` elements apart
/// (0: every batch reads the same matrix, a broadcast operand).
struct GemmMatrix {
  int64_t rows = 0, cols = 0, ld = 1;
  bool transpose = false;
  int64_t batchStride = 0;
};

/// Batch dims that one stride per operand cannot express (numpy broadcasting of several dims):
/// the host loops over them, offsetting every operand by its stride (in elements).
struct GemmLoop {
  int64_t size = 1;
  int64_t strideA = 0, strideB = 0, strideD = 0;
};

struct GemmPlan {
  std::string error; // non-empty: the shapes are ones the CPU kernel rejects (the message why)
  // The row-major problem (after rank-1 promotion and transposes; M includes folded batches).
  int64_t M = 0, N = 0, K = 0;
  // The cuBLASLt problem: D[m x n] = op(A)[m x k] op(B)[k x n], m = N, n = M.
  int64_t m = 0, n = 0, k = 0;
  GemmMatrix a, b, d; // a: the rhs, b: the lhs, d: the result (never transposed)
  int64_t batchCount = 1; // matrices per cuBLASLt call (strided batched)
  std::vector<GemmLoop> loops; // outermost first; empty: one call
  bool empty = false;     // the result has no elements: nothing to do
  bool zeroFill = false;  // K == 0: the result is all zeros, no GEMM

  bool ok() const { return error.empty(); }
  /// cuBLASLt calls the plan makes.
  int64_t calls() const {
    int64_t c = 1;
    for (const GemmLoop &l : loops)
      c *= l.size;
    return c;
  }
  /// Element offsets of A (rhs), B (lhs) and D for call `index` (0 <= index < calls()).
  void callOffsets(int64_t index, int64_t *offA, int64_t *offB, int64_t *offD) const {
    *offA = *offB = *offD = 0;
    for (int64_t i = (int64_t)loops.size() - 1; i >= 0; --i) {
      int64_t c = index % loops[i].size;
      index /= loops[i].size;
      *offA += c * loops[i].strideA;
      *offB += c * loops[i].strideB;
      *offD += c * loops[i].strideD;
    }
  }
};

namespace gemmdetail {

/// A batch dim of the result with each operand's element stride along it (0 where broadcast).
struct BatchDim {
  int64_t size, sa, sb, sd;
};

/// Merges adjacent batch dims that every operand walks with one stride (numpy broadcasting of
/// [B, H] by [B, H] or [1, 1] collapses to one dim of B*H), dropping size-1 dims.
inline std::vector<BatchDim> mergeBatchDims(const std::vector<BatchDim> &dims) {
  std::vector<BatchDim> merged;
  for (const BatchDim &d : dims) {
    if (d.size == 1)
      continue;
    if (!merged.empty()) {
      BatchDim &o = merged.back();
      if (o.sa == d.sa * d.size && o.sb == d.sb * d.size && o.sd == d.sd * d.size) {
        o = {o.size * d.size, d.sa, d.sb, d.sd};
        continue;
      }
    }
    merged.push_back(d);
  }
  return merged;
}

} // namespace gemmdetail

/// Sets `p`'s problem to the row-major C[M, N] = op(lhs) op(rhs), each operand stored with the
/// row stride given (lhs [M, K], or [K, M] transposed; rhs [K, N], or [N, K]; C [M, N]): the
/// transpose C^T = op(rhs)^T op(lhs)^T in cuBLASLt's column-major terms (batch strides 0).
inline void setRowMajorProblem(GemmPlan &p, int64_t M, int64_t N, int64_t K, int64_t lhsLd, int64_t rhsLd,
                               int64_t outLd, bool transposeLhs, bool transposeRhs) {
  p.M = M, p.N = N, p.K = K;
  p.m = N, p.n = M, p.k = K;
  // rhs stored [K, N] is column-major N x K; stored [N, K] it is K x N, transposed.
  p.a = transposeRhs ? GemmMatrix{K, N, std::max<int64_t>(rhsLd, 1), true, 0}
                     : GemmMatrix{N, K, std::max<int64_t>(rhsLd, 1), false, 0};
  // lhs stored [M, K] is column-major K x M; stored [K, M] it is M x K, transposed.
  p.b = transposeLhs ? GemmMatrix{M, K, std::max<int64_t>(lhsLd, 1), true, 0}
                     : GemmMatrix{K, M, std::max<int64_t>(lhsLd, 1), false, 0};
  p.d = GemmMatrix{N, M, std::max<int64_t>(outLd, 1), false, 0};
}

/// The cuBLASLt calls of cpc.matmul(lhs, rhs) -> out, after the CPU kernel's checks
/// (matmulShape, kernels/Checks.h: its messages become `error`).
inline GemmPlan planGemm(const std::vector<int64_t> &lhs, const std::vector<int64_t> &rhs,
                         const std::vector<int64_t> &out, bool transposeLhs, bool transposeRhs) {
  using namespace gemmdetail;
  GemmPlan p;
  MatmulShape shape;
  if (!matmulShape(lhs, rhs, out, transposeLhs, transposeRhs, shape, &p.error))
    return p;
  const int64_t M = shape.M, N = shape.N, K = shape.K;
  const std::vector<int64_t> &aBatch = shape.lhsBatch, &bBatch = shape.rhsBatch, &batch = shape.batch;
  const size_t rank = batch.size();
  const int64_t nBatch = numElements(batch);
  p.empty = nBatch * M * N == 0;
  p.zeroFill = !p.empty && K == 0;

  // x[.., M, K] @ W[K, N] with an unbatched rhs: the lhs batches are contiguous rows of one
  // [batch * M, K] matrix, so one GEMM with M folded (a Linear layer's shape).
  bool fold = numElements(bBatch) == 1 && numElements(aBatch) == nBatch && !transposeLhs;
  int64_t rows = fold ? M * nBatch : M;
  setRowMajorProblem(p, rows, N, K, transposeLhs ? rows : K, transposeRhs ? K : N, N, transposeLhs, transposeRhs);
  if (fold)
    return p;

  // Element strides of each operand along the result's batch dims (0 where it broadcasts).
  std::vector<BatchDim> dims(rank);
  for (int64_t i = (int64_t)rank - 1, sa = K * N, sb = M * K, sd = M * N; i >= 0; --i) {
    dims[i] = {batch[i], bBatch[i] == 1 ? 0 : sa, aBatch[i] == 1 ? 0 : sb, sd};
    sa *= bBatch[i];
    sb *= aBatch[i];
    sd *= batch[i];
  }
  std::vector<BatchDim> merged = mergeBatchDims(dims);
  if (merged.empty())
    return p;
  // The largest remaining dim is cuBLASLt's batch, the others host loops.
  size_t inner = std::max_element(merged.begin(), merged.end(),
                                  [](const BatchDim &x, const BatchDim &y) { return x.size < y.size; }) -
                 merged.begin();
  p.batchCount = merged[inner].size;
  p.a.batchStride = merged[inner].sa;
  p.b.batchStride = merged[inner].sb;
  p.d.batchStride = merged[inner].sd;
  for (size_t i = 0; i < merged.size(); ++i)
    if (i != inner)
      p.loops.push_back({merged[i].size, merged[i].sa, merged[i].sb, merged[i].sd});
  return p;
}

/// Row-major matrices indexed by (outer o, inner i): element (r, c) of matrix (o, i) at
/// o * outerStride + i * innerStride + r * ld + c.
struct SlicedMatrices {
  int64_t rows = 0, cols = 0, ld = 0, outerStride = 0, innerStride = 0;
};

/// The cuBLASLt calls of out = op(lhs) op(rhs) for each of outer x inner matrix triples: the
/// inner ones one strided batch, the outer ones a host loop. Attention multiplies (batch, head)
/// slices this way; token-major operands keep a batch's heads `width` elements apart in each row,
/// which one batch stride per operand cannot express.
inline GemmPlan planSlicedGemm(int64_t outer, int64_t inner, const SlicedMatrices &lhs, const SlicedMatrices &rhs,
                               const SlicedMatrices &out, bool transposeLhs, bool transposeRhs) {
  GemmPlan p;
  const int64_t M = transposeLhs ? lhs.cols : lhs.rows, K = transposeLhs ? lhs.rows : lhs.cols;
  const int64_t N = transposeRhs ? rhs.rows : rhs.cols;
  if ((transposeRhs ? rhs.cols : rhs.rows) != K || out.rows != M || out.cols != N) {
    p.error = "sliced operands do not multiply";
    return p;
  }
  setRowMajorProblem(p, M, N, K, lhs.ld, rhs.ld, out.ld, transposeLhs, transposeRhs);
  p.empty = outer * inner * M * N == 0;
  p.zeroFill = !p.empty && K == 0;
  const bool innerBatch = inner > 1 || outer == 1; // one of the two becomes cuBLASLt's batch
  auto batchStride = [&](const SlicedMatrices &x) { return innerBatch ? x.innerStride : x.outerStride; };
  p.a.batchStride = batchStride(rhs);
  p.b.batchStride = batchStride(lhs);
  p.d.batchStride = batchStride(out);
  p.batchCount = innerBatch ? inner : outer;
  if (innerBatch && outer > 1)
    p.loops.push_back({outer, rhs.outerStride, lhs.outerStride, out.outerStride});
  return p;
}

/// The largest power of two, at most 256, dividing `address` and every byte offset in `offsets`:
/// the alignment cuBLASLt may assume for a matrix whose batches and calls start at those offsets.
inline uint32_t gemmAlignment(uint64_t address, const std::vector<int64_t> &offsets) {
  uint64_t bits = address | 256;
  for (int64_t o : offsets)
    bits |= (uint64_t)(o < 0 ? -o : o);
  return (uint32_t)(bits & (~bits + 1)); // lowest set bit
}

/// Byte offsets at which the matrices of `which` start relative to its base, beyond 0: its
/// batch stride and the loops' strides (each a multiple of the alignment it can keep).
inline std::vector<int64_t> gemmOffsets(const GemmPlan &p, char which, int64_t elementBytes) {
  std::vector<int64_t> offsets;
  const GemmMatrix &mat = which == 'a' ? p.a : which == 'b' ? p.b : p.d;
  if (p.batchCount > 1)
    offsets.push_back(mat.batchStride * elementBytes);
  for (const GemmLoop &l : p.loops)
    offsets.push_back((which == 'a' ? l.strideA : which == 'b' ? l.strideB : l.strideD) * elementBytes);
  return offsets;
}

} // namespace cpc::kernels::cuda

#endif
