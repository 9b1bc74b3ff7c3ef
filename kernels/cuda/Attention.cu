//===- Attention.cu - cpc.attention and cpc.attention_grad on the GPU ------===//
//
// Host code only: batched cuBLASLt GEMMs (Matmul.h) and the softmax row kernels (Softmax.h).
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

/// Slices per group: as many as fit kScoreBytes of N x M scores.
int64_t sliceGroup(const AttentionDims &dims, DType dtype) {
  size_t perSlice = std::max<size_t>(1, size_t(dims.n) * size_t(dims.m) * dtypeSize(dtype));
  return std::clamp<int64_t>(int64_t(kScoreBytes / perSlice), 1, std::max<int64_t>(dims.batch, 1));
}

/// Slices [first, first + count) of `t` (its batch dims flattened) as [count, rows, cols].
TensorRef slices(const TensorRef &t, int64_t first, int64_t count) {
  int64_t rows = t.shape[t.rank() - 2], cols = t.shape.back();
  return TensorRef{static_cast<char *>(t.data) + first * rows * cols * dtypeSize(t.dtype), t.dtype, {count, rows, cols}};
}

/// Device scratch for the score gradients of `count` slices.
TensorRef scoreGradients(const KernelContext &ctx, const AttentionDims &dims, int64_t count, DType dtype) {
  void *data = deviceOf(ctx).scratch(kScoreGradSlot, size_t(count * dims.n * dims.m) * dtypeSize(dtype));
  return TensorRef{data, dtype, {count, dims.n, dims.m}};
}

void gemm(const KernelContext &ctx, const TensorRef &a, const TensorRef &b, const TensorRef &c, bool ta, bool tb) {
  launchGemmWithEpilogue(ctx, a, b, nullptr, c, ta, tb, GemmEpilogue::None);
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
  if (dims.d > 0)
    gemm(ctx, slices(q, 0, dims.batch), slices(k, 0, dims.batch), slices(p, 0, dims.batch), false, true);
  else
    zero(ctx, p); // empty heads score 0
  launchSoftmax(ctx, p, p, p.rank() - 1, ctx.attrs.scale);
  if (dims.dv > 0)
    gemm(ctx, slices(p, 0, dims.batch), slices(v, 0, dims.batch), slices(out, 0, dims.batch), false, false);
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
  gemm(ctx, slices(p, 0, dims.batch), slices(g, 0, dims.batch), slices(dv, 0, dims.batch), true, false); // P^T g
  if (dims.d == 0)
    return;
  int64_t group = sliceGroup(dims, q.dtype);
  for (int64_t first = 0; first < dims.batch; first += group) {
    int64_t count = std::min(group, dims.batch - first);
    TensorRef ds = scoreGradients(ctx, dims, count, q.dtype);
    gemm(ctx, slices(g, first, count), slices(v, first, count), ds, false, true); // dP = g v^T
    launchSoftmaxGrad(ctx, slices(p, first, count), ds, ds, 2, ctx.attrs.scale);  // dS = scale P (dP - rowsum(P dP))
    gemm(ctx, ds, slices(k, first, count), slices(dq, first, count), false, false);
    gemm(ctx, ds, slices(q, first, count), slices(dk, first, count), true, false);
  }
}

} // namespace
} // namespace cuda

void registerCudaAttentionKernels(KernelRegistry &registry) {
  for (DType t : cuda::kFloatTypes) {
    registry.add("cpc.attention", DeviceKind::Cuda, t, cuda::attention);
    registry.add("cpc.attention_grad", DeviceKind::Cuda, t, cuda::attentionGrad);
  }
}

} // namespace cpc::kernels
