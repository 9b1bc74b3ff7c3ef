//===- Fused.cu - the ops late passes fuse: cpc.matmul_bias ----------------===//
//
// cpc.matmul_bias: the GEMM adds the bias in cuBLASLt's epilogue (in f32, one rounding), then
// the GELU, when there is one, runs as cpc.gelu's kernel over the result (cuBLASLt's GELU
// epilogue has only the tanh form, and the backward needs the pre-activation anyway).
//
#include "kernels/cuda/CudaCommon.cuh"
#include "kernels/cuda/CudaKernels.h"
#include "kernels/cuda/Matmul.h"

namespace cpc::kernels {
namespace {

// cpc.gelu's CUDA kernels by element type, taken from the registry when this family registers
// (after the elementwise one).
KernelFn geluKernels[16];

void matmulBiasKernel(KernelContext &ctx) {
  if (ctx.inputs.size() != 3 || ctx.outputs.empty() || ctx.outputs.size() > 2)
    ctx.fail("expects lhs, rhs, bias and 1 or 2 results");
  const TensorRef &result = ctx.outputs[0], &bias = ctx.inputs[2];
  const TensorRef &sum = ctx.outputs.size() > 1 ? ctx.outputs[1] : result;
  bool activate = ctx.attrs.activation == FusedActivation::Gelu;
  if (ctx.outputs.size() > 1 && !activate)
    ctx.fail("a preactivation result needs activation \"gelu\"");
  cuda::launchGemmWithEpilogue(ctx, ctx.inputs[0], ctx.inputs[1], &bias, sum, ctx.attrs.transposeLhs,
                               ctx.attrs.transposeRhs, cuda::GemmEpilogue::Bias);
  if (!activate)
    return;
  const KernelFn &gelu = geluKernels[(int)result.dtype];
  if (!gelu)
    ctx.fail(std::string("no CUDA gelu kernel for ") + dtypeName(result.dtype));
  KernelContext activated = ctx;
  activated.op = OpKind::Gelu;
  activated.inputs = {sum};
  activated.outputs = {result};
  gelu(activated);
}

} // namespace

void registerCudaFusedKernels(KernelRegistry &registry) {
  for (DType t : cuda::kFloatTypes) {
    geluKernels[(int)t] = registry.find(OpKind::Gelu, DeviceKind::Cuda, t);
    registry.add(OpKind::MatMulBias, DeviceKind::Cuda, t, matmulBiasKernel);
  }
}

} // namespace cpc::kernels
