//===- Attention.cu - cpc.attention and cpc.attention_grad on the GPU ------===//
//
// Host code only: batched cuBLASLt GEMMs over (batch, head) slices (planSlicedGemm, GemmPlan.h;
// token-major operands are read in place, each row's heads side by side) and the softmax row
// kernels (Softmax.h).
// The scores go straight into the probabilities' buffer and become softmax(scale * S) in place
// (written once; the separate ops write them three times). The gradient's dP = g v^T lives in
// device scratch, for groups of slices of at most kScoreBytes (at least one slice).
//
#include "kernels/Checks.h"
#include "kernels/cuda/CudaCommon.cuh"
#include "kernels/cuda/CudaKernels.h"
#include "kernels/cuda/Matmul.h"
#include "kernels/cuda/Softmax.h"

#include <algorithm>

namespace cpc::kernels {
namespace cuda {
namespace {

constexpr size_t kScoreBytes = size_t(256) << 20;
// The scratch slot of the score gradients.
constexpr int kScoreGradSlot = 0;

/// Slices per group of the gradient: as many as fit kScoreBytes of N x M scores, whole batches
/// of heads when token-major (at least one batch, or one slice).
int64_t sliceGroup(const AttentionDims &dims, DType dtype) {
  size_t perSlice = std::max<size_t>(1, size_t(dims.n) * size_t(dims.m) * dtypeSize(dtype));
  int64_t group = std::clamp<int64_t>(int64_t(kScoreBytes / perSlice), 1, std::max<int64_t>(dims.batch, 1));
  return dims.tokenMajor ? std::max<int64_t>(1, group / dims.heads) * dims.heads : group;
}

/// The matrices (rows x width per slice) of q, k, v, the result or a gradient as (batch, head)
/// slices, heads the inner index (SliceGemm offsets them to its first slice).
SlicedMatrices operandSlices(const AttentionDims &dims, int64_t rows, int64_t width) {
  int64_t heads = dims.tokenMajor ? dims.heads : 1;
  return SlicedMatrices{rows, width, dims.rowStride(width), rows * heads * width,
                        dims.tokenMajor ? width : rows * width};
}
/// The probabilities or score gradients: contiguous [slices, n, m].
SlicedMatrices scoreSlices(const AttentionDims &dims) {
  int64_t heads = dims.tokenMajor ? dims.heads : 1;
  return SlicedMatrices{dims.n, dims.m, dims.m, heads * dims.n * dims.m, dims.n * dims.m};
}

/// One product over slices [first, first + count) (count a multiple of the heads when
/// token-major): `c` = op(a) op(b), with each operand's element offset of slice `first`.
struct SliceGemm {
  const KernelContext &ctx;
  const AttentionDims &dims;
  DType t;
  int64_t first, count;

  void operator()(const SlicedMatrices &a, const void *aBase, int64_t aOff, const SlicedMatrices &b, const void *bBase,
                  int64_t bOff, const SlicedMatrices &c, void *cBase, int64_t cOff, bool ta, bool tb) const {
    int64_t inner = dims.tokenMajor ? dims.heads : count, outer = dims.tokenMajor ? count / dims.heads : 1;
    size_t bytes = dtypeSize(t);
    launchPlannedGemm(ctx, planSlicedGemm(outer, inner, a, b, c, ta, tb), t,
                      static_cast<const char *>(aBase) + aOff * bytes, static_cast<const char *>(bBase) + bOff * bytes,
                      static_cast<char *>(cBase) + cOff * bytes);
  }
};

/// Device scratch for the score gradients of `count` slices.
TensorRef scoreGradients(const KernelContext &ctx, const AttentionDims &dims, int64_t count, DType dtype) {
  void *data = deviceOf(ctx).scratch(kScoreGradSlot, size_t(count * dims.n * dims.m) * dtypeSize(dtype));
  return TensorRef{data, dtype, {count, dims.n, dims.m}};
}

/// Zeros `t` on the compute stream.
void zero(const KernelContext &ctx, const TensorRef &t) { deviceOf(ctx).fillZero(t.data, t.bytes()); }

void attention(KernelContext &ctx) {
  AttentionDims dims = checkAttention(ctx);
  if (dims.batch * dims.n == 0)
    return;
  const TensorRef &q = ctx.inputs[0], &k = ctx.inputs[1], &v = ctx.inputs[2], &out = ctx.outputs[0], &p = ctx.outputs[1];
  if (dims.m == 0) // no keys: the result is an empty sum
    return zero(ctx, out);
  SliceGemm gemm{ctx, dims, q.dtype, 0, dims.batch};
  SlicedMatrices scores = scoreSlices(dims);
  if (dims.d > 0) // S = q k^T
    gemm(operandSlices(dims, dims.n, dims.d), q.data, 0, operandSlices(dims, dims.m, dims.d), k.data, 0, scores, p.data,
         0, false, true);
  else
    zero(ctx, p); // empty heads score 0
  launchSoftmax(ctx, p, p, p.rank() - 1, ctx.attrs.scale);
  if (dims.dv > 0) // P v
    gemm(scores, p.data, 0, operandSlices(dims, dims.m, dims.dv), v.data, 0, operandSlices(dims, dims.n, dims.dv),
         out.data, 0, false, false);
}

void attentionGrad(KernelContext &ctx) {
  AttentionDims dims = checkAttentionGrad(ctx);
  if (dims.batch == 0)
    return;
  const TensorRef &q = ctx.inputs[0], &k = ctx.inputs[1], &v = ctx.inputs[2], &p = ctx.inputs[3], &g = ctx.inputs[4];
  const TensorRef &dq = ctx.outputs[0], &dk = ctx.outputs[1], &dv = ctx.outputs[2];
  if (dims.n == 0 || dims.m == 0 || dims.d == 0 || dims.dv == 0) { // empty sums somewhere: zero gradients
    for (const TensorRef &t : ctx.outputs)
      zero(ctx, t);
    if (dims.n == 0 || dims.m == 0 || dims.dv == 0)
      return;
  }
  const SlicedMatrices qs = operandSlices(dims, dims.n, dims.d), ks = operandSlices(dims, dims.m, dims.d);
  const SlicedMatrices vs = operandSlices(dims, dims.m, dims.dv), gs = operandSlices(dims, dims.n, dims.dv);
  const SlicedMatrices scores = scoreSlices(dims);
  SliceGemm{ctx, dims, q.dtype, 0, dims.batch}(scores, p.data, 0, gs, g.data, 0, vs, dv.data, 0, true, false); // P^T g
  if (dims.d == 0)
    return;
  int64_t group = sliceGroup(dims, q.dtype);
  for (int64_t first = 0; first < dims.batch; first += group) {
    int64_t count = std::min(group, dims.batch - first);
    SliceGemm gemm{ctx, dims, q.dtype, first, count};
    TensorRef ds = scoreGradients(ctx, dims, count, q.dtype);
    int64_t qOff = dims.sliceOffset(first, dims.n, dims.d), kOff = dims.sliceOffset(first, dims.m, dims.d);
    int64_t vOff = dims.sliceOffset(first, dims.m, dims.dv), gOff = dims.sliceOffset(first, dims.n, dims.dv);
    gemm(gs, g.data, gOff, vs, v.data, vOff, scores, ds.data, 0, false, true); // dP = g v^T
    TensorRef pGroup{static_cast<char *>(p.data) + first * dims.n * dims.m * dtypeSize(p.dtype), p.dtype,
                     {count, dims.n, dims.m}};
    launchSoftmaxGrad(ctx, pGroup, ds, ds, 2, ctx.attrs.scale); // dS = scale P (dP - rowsum(P dP))
    gemm(scores, ds.data, 0, ks, k.data, kOff, qs, dq.data, qOff, false, false); // dq = dS k
    gemm(scores, ds.data, 0, qs, q.data, qOff, ks, dk.data, kOff, true, false);  // dk = dS^T q
  }
}

} // namespace
} // namespace cuda

void registerCudaAttentionKernels(KernelRegistry &registry) {
  for (DType t : cuda::kFloatTypes) {
    registry.add(OpKind::Attention, DeviceKind::Cuda, t, cuda::attention);
    registry.add(OpKind::AttentionGrad, DeviceKind::Cuda, t, cuda::attentionGrad);
  }
}

} // namespace cpc::kernels
