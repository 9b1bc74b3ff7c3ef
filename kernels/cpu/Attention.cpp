//===- Attention.cpp - cpc.attention and cpc.attention_grad ----------------===//
//
// Per (batch, head) slice: the scores q k^T go straight into the probabilities' storage
// (GEMM), become softmax(scale * S) in place, and the result is P v: the N x M matrix is written
// once, where the separate ops write it three times. The gradient reads P: dv = P^T g, then per
// block of query rows dP = g v^T in a small thread-local buffer, dS = scale * softmax_grad(P, dP)
// in place, dq = dS k and dk += dS^T q. Each step's arithmetic is that of the separate kernels
// (matmul, mul, softmax, softmax_grad) in the same rounding order. Slices are independent and
// each runs on one thread with serial GEMMs, so results do not depend on the thread count.
// 16-bit operands are widened (Storage16::Widened). Token-major operands ("bnhd": each token's
// heads side by side) are read and written in place through the GEMMs' leading dims: no
// transposes to [..., H, N, D] and back.
//
#include "kernels/Checks.h"
#include "kernels/cpu/GrowingScratch.h"
#include "kernels/cpu/Dispatch.h"
#include "kernels/cpu/Gemm.h"
#include "kernels/cpu/GemmPacking.h"
#include "kernels/cpu/Kernel.h"
#include "kernels/cpu/SoftmaxRows.h"

#include <algorithm>
#include <cstring>
#include <vector>

namespace cpc::kernels {

namespace {

/// Score gradients held at once per thread: a block of query rows of about this many (L2-sized).
constexpr int64_t kScoreBlock = 1 << 14;

int64_t rowsPerBlock(const AttentionDims &s) {
  return std::clamp<int64_t>(kScoreBlock / std::max<int64_t>(s.m, 1), 1, std::max<int64_t>(s.n, 1));
}

/// Scratch of T per thread, grown as needed (a slice runs on one thread).
template <typename T> T *threadScratch(int64_t elements) {
  thread_local GrowingScratch buffer;
  return static_cast<T *>(buffer.reserve((size_t)std::max<int64_t>(elements, 0) * sizeof(T)));
}

/// Runs fn(slice) for every slice: spread over the pool when there is enough work.
template <typename Fn> void forEachSlice(const KernelContext &ctx, const AttentionDims &s, Fn &&fn) {
  int threads = std::max(1, ctx.threads);
  bool parallel = threads > 1 && s.batch > 1 && s.batch * s.n * s.m * (s.d + s.dv) > kGemmMinWorkPerThread;
#pragma omp parallel for num_threads(threads) if (parallel) schedule(static)
  for (int64_t b = 0; b < s.batch; ++b)
    fn(b);
}

template <typename T>
void attention(const KernelContext &ctx, const AttentionDims &s, const T *q, const T *k, const T *v, T *out, T *p) {
  const T scale = T(ctx.attrs.scale);
  const int64_t ldq = s.rowStride(s.d), ldv = s.rowStride(s.dv);
  forEachSlice(ctx, s, [&](int64_t b) {
    const T *qs = q + s.sliceOffset(b, s.n, s.d), *ks = k + s.sliceOffset(b, s.m, s.d);
    const T *vs = v + s.sliceOffset(b, s.m, s.dv);
    T *ps = p + b * s.n * s.m;
    if (s.d > 0) // BLAS wants leading dims >= 1; empty heads score 0
      gemm(Gemm<T>{false, true, s.n, s.m, s.d, qs, ldq, ks, ldq, T(0), ps, s.m}, 1);
    else
      std::fill(ps, ps + s.n * s.m, T(0));
    for (int64_t r = 0; r < s.n; ++r)
      softmaxRow(ps + r * s.m, ps + r * s.m, s.m, scale);
    if (s.dv > 0)
      gemm(Gemm<T>{false, false, s.n, s.dv, s.m, ps, s.m, vs, ldv, T(0), out + s.sliceOffset(b, s.n, s.dv), ldv}, 1);
  });
}

template <typename T>
void attentionGrad(const KernelContext &ctx, const AttentionDims &s, const T *q, const T *k, const T *v, const T *p,
                   const T *g, T *dq, T *dk, T *dv) {
  const T scale = T(ctx.attrs.scale);
  const int64_t ldq = s.rowStride(s.d), ldv = s.rowStride(s.dv);
  int64_t block = rowsPerBlock(s);
  forEachSlice(ctx, s, [&](int64_t b) {
    const int64_t qOff = s.sliceOffset(b, s.n, s.d), kOff = s.sliceOffset(b, s.m, s.d);
    const int64_t vOff = s.sliceOffset(b, s.m, s.dv), gOff = s.sliceOffset(b, s.n, s.dv);
    const T *qs = q + qOff, *ks = k + kOff, *vs = v + vOff, *gs = g + gOff, *ps = p + b * s.n * s.m;
    T *dqs = dq + qOff, *dks = dk + kOff, *dvs = dv + vOff;
    gemm(Gemm<T>{true, false, s.m, s.dv, s.n, ps, s.m, gs, ldv, T(0), dvs, ldv}, 1);
    if (s.d == 0) // empty heads: dq and dk are empty
      return;
    T *ds = threadScratch<T>(block * s.m);
    for (int64_t r0 = 0; r0 < s.n; r0 += block) {
      int64_t rows = std::min(block, s.n - r0);
      gemm(Gemm<T>{false, true, rows, s.m, s.dv, gs + r0 * ldv, ldv, vs, ldv, T(0), ds, s.m}, 1);
      for (int64_t r = 0; r < rows; ++r) // softmax's VJP, then the scale's
        softmaxGradRow(ps + (r0 + r) * s.m, ds + r * s.m, ds + r * s.m, s.m, scale);
      gemm(Gemm<T>{false, false, rows, s.d, s.m, ds, s.m, ks, ldq, T(0), dqs + r0 * ldq, ldq}, 1);
      gemm(Gemm<T>{true, false, s.m, s.d, rows, ds, s.m, qs + r0 * ldq, ldq, r0 == 0 ? T(0) : T(1), dks, ldq}, 1);
    }
  });
}

/// Zeros `t` (an empty tensor may have no memory at all).
void zero(const TensorRef &t) {
  if (t.bytes())
    std::memset(t.data, 0, t.bytes());
}

void attentionKernel(KernelContext &ctx) {
  AttentionDims s = checkAttention(ctx);
  if (s.batch * s.n == 0)
    return;
  if (s.m == 0) { // no keys: the result is an empty sum
    zero(ctx.outputs[0]);
    return;
  }
  dispatchFloat(ctx, ctx.inputs[0].dtype, [&](auto zero) {
    using T = decltype(zero);
    attention<T>(ctx, s, ctx.inputs[0].as<T>(), ctx.inputs[1].as<T>(), ctx.inputs[2].as<T>(), ctx.outputs[0].as<T>(),
                 ctx.outputs[1].as<T>());
  });
}

void attentionGradKernel(KernelContext &ctx) {
  AttentionDims s = checkAttentionGrad(ctx);
  if (s.batch == 0)
    return;
  if (s.n == 0 || s.m == 0 || s.d == 0 || s.dv == 0) { // empty sums somewhere: zero gradients
    for (const TensorRef &out : ctx.outputs)
      zero(out);
    if (s.n == 0 || s.m == 0 || s.dv == 0)
      return; // (with dv == 0 the result, hence dP and dS, are empty or zero)
  }
  dispatchFloat(ctx, ctx.inputs[0].dtype, [&](auto zero) {
    using T = decltype(zero);
    attentionGrad<T>(ctx, s, ctx.inputs[0].as<T>(), ctx.inputs[1].as<T>(), ctx.inputs[2].as<T>(), ctx.inputs[3].as<T>(),
                     ctx.inputs[4].as<T>(), ctx.outputs[0].as<T>(), ctx.outputs[1].as<T>(), ctx.outputs[2].as<T>());
  });
}

/// The GEMMs of one slice (forward: scores and the weighted sum), packed on one thread.
KernelWorkspace attentionWorkspace(const KernelContext &ctx) {
  AttentionDims s = checkAttention(ctx);
  bool isDouble = ctx.inputs[0].dtype == DType::F64;
  return gemmPacking(s.n, s.m, s.d, isDouble).cover(gemmPacking(s.n, s.dv, s.m, isDouble));
}

/// The backward's GEMMs per slice and block of rows, and the block's score gradients (per thread).
KernelWorkspace attentionGradWorkspace(const KernelContext &ctx) {
  AttentionDims s = checkAttentionGrad(ctx);
  bool isDouble = ctx.inputs[0].dtype == DType::F64;
  int64_t rows = std::min(rowsPerBlock(s), s.n);
  KernelWorkspace w = gemmPacking(s.m, s.dv, s.n, isDouble);
  w.cover(gemmPacking(rows, s.m, s.dv, isDouble)).cover(gemmPacking(rows, s.d, s.m, isDouble));
  w.cover(gemmPacking(s.m, s.d, rows, isDouble));
  w.heapBytes = rowsPerBlock(s) * s.m * (isDouble ? 8 : 4);
  return w;
}

} // namespace

void registerAttentionKernels(KernelRegistry &r) {
  r.add(OpKind::Attention, attentionKernel);
  r.add(OpKind::AttentionGrad, attentionGradKernel);
  r.setWorkspace(OpKind::Attention, attentionWorkspace);
  r.setWorkspace(OpKind::AttentionGrad, attentionGradWorkspace);
}

} // namespace cpc::kernels
