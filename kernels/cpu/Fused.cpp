//===- Fused.cpp - kernels of the ops late passes fuse: cpc.matmul_bias ----===//
//
// A fused op runs the kernels of the ops it replaces, in their order and on the same values,
// so that its results are theirs bit for bit (a plan compiled with and without the fusion
// trains identically on the CPU); what it gains is locality: the bias add and the activation
// pass over one panel of rows while it is still in cache.
//
#include "kernels/cpu/Kernel.h"

#include <algorithm>

namespace cpc::kernels {

namespace {

/// A context running `op`'s kernel on the given tensors, with `ctx`'s threads.
KernelContext subContext(const KernelContext &ctx, OpKind op, std::vector<TensorRef> inputs,
                         std::vector<TensorRef> outputs) {
  KernelContext sub;
  sub.op = op;
  sub.inputs = std::move(inputs);
  sub.outputs = std::move(outputs);
  sub.attrs = ctx.attrs;
  sub.threads = ctx.threads;
  sub.step = ctx.step;
  sub.microbatch = ctx.microbatch; // random ops: where the microbatch's draws start
  return sub;
}

/// Rows [begin, end) of `t` viewed as [rows, columns].
TensorRef rowPanel(const TensorRef &t, int64_t begin, int64_t end) {
  int64_t columns = t.shape.back();
  return TensorRef{static_cast<uint8_t *>(t.data) + begin * columns * dtypeSize(t.dtype), t.dtype, {end - begin, columns}};
}

/// Rows of the panels the bias and activation run on: about 16K elements each.
int64_t panelRows(const TensorRef &result) {
  int64_t columns = std::max<int64_t>(result.shape.empty() ? 1 : result.shape.back(), 1);
  return std::max<int64_t>(1, (16 << 10) / columns);
}

/// The 16-bit scratch (floats) of the kernels matmul_bias runs: the largest any of them needs.
int64_t matmulBiasScratch(const KernelContext &ctx) {
  if (ctx.inputs.size() != 3 || ctx.outputs.empty() || ctx.outputs[0].shape.empty())
    return 0;
  const KernelRegistry &registry = KernelRegistry::cpu();
  const TensorRef &result = ctx.outputs[0], &sum = ctx.outputs.back();
  int64_t rows = std::min(panelRows(result), result.numel() / std::max<int64_t>(result.shape.back(), 1));
  TensorRef panel{nullptr, result.dtype, {rows, result.shape.back()}};
  int64_t bytes = std::max({registry.scratchBytes(OpKind::MatMul, subContext(ctx, OpKind::MatMul, {ctx.inputs[0], ctx.inputs[1]}, {sum})),
                            registry.scratchBytes(OpKind::Add, subContext(ctx, OpKind::Add, {panel, ctx.inputs[2]}, {panel})),
                            registry.scratchBytes(OpKind::Gelu, subContext(ctx, OpKind::Gelu, {panel}, {panel}))});
  return bytes / 4;
}

/// result = act(lhs @ rhs + bias); with a second output it holds lhs @ rhs + bias.
void matmulBiasKernel(KernelContext &ctx) {
  if (ctx.inputs.size() != 3 || ctx.outputs.empty() || ctx.outputs.size() > 2)
    ctx.fail("expects lhs, rhs, bias and 1 or 2 results");
  const KernelRegistry &registry = KernelRegistry::cpu();
  static const KernelFn matmul = registry.find(OpKind::MatMul), add = registry.find(OpKind::Add),
                        gelu = registry.find(OpKind::Gelu);
  const TensorRef &result = ctx.outputs[0], &bias = ctx.inputs[2];
  const TensorRef &sum = ctx.outputs.size() > 1 ? ctx.outputs[1] : result;
  bool activate = ctx.attrs.activation == FusedActivation::Gelu;
  if (ctx.outputs.size() > 1 && !activate)
    ctx.fail("a preactivation result needs activation \"gelu\"");
  if (result.shape.empty() || bias.rank() != 1 || bias.shape[0] != result.shape.back() || sum.shape != result.shape)
    ctx.fail("bias must have one element per column of the result");
  KernelContext product = subContext(ctx, OpKind::MatMul, {ctx.inputs[0], ctx.inputs[1]}, {sum});
  matmul(product);
  // Bias and activation, one panel of rows at a time.
  int64_t columns = std::max<int64_t>(result.shape.back(), 1), rows = result.numel() / columns;
  int64_t panel = panelRows(result);
  for (int64_t begin = 0; begin < rows; begin += panel) {
    int64_t end = std::min(rows, begin + panel);
    TensorRef sumRows = rowPanel(sum, begin, end);
    KernelContext biased = subContext(ctx, OpKind::Add, {sumRows, bias}, {sumRows});
    add(biased);
    if (activate) {
      KernelContext activated = subContext(ctx, OpKind::Gelu, {sumRows}, {rowPanel(result, begin, end)});
      gelu(activated);
    }
  }
}

/// matmul_bias keeps what its matmul keeps.
KernelWorkspace matmulBiasWorkspace(const KernelContext &ctx) {
  if (ctx.inputs.size() != 3 || ctx.outputs.empty())
    return {};
  return KernelRegistry::cpu().workspace(
      OpKind::MatMul, subContext(ctx, OpKind::MatMul, {ctx.inputs[0], ctx.inputs[1]}, {ctx.outputs.back()}));
}

} // namespace

void registerFusedKernels(KernelRegistry &r) {
  r.add(OpKind::MatMulBias, matmulBiasKernel, Storage16::Native, matmulBiasScratch);
  r.setWorkspace(OpKind::MatMulBias, matmulBiasWorkspace);
}

} // namespace cpc::kernels
