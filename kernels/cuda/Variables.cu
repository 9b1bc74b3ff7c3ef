//===- Variables.cu - assign, copy, reshape, stop_gradient: byte copies -----===//
//
// Each moves its input's bytes into its output, queued on the compute stream (a device-to-
// device cudaMemcpyAsync), and does nothing when the plan gave both the same buffer.
//
#include "kernels/Checks.h"
#include "kernels/cuda/CudaCommon.cuh"
#include "kernels/cuda/CudaKernels.h"

#include <string>

namespace cpc::kernels {
namespace cuda {
namespace {

void copyBytes(const KernelContext &ctx, const TensorRef &src, const TensorRef &dst) {
  if (src.data == dst.data || src.bytes() == 0)
    return;
  checkCuda(cudaMemcpyAsync(dst.data, src.data, src.bytes(), cudaMemcpyDeviceToDevice, streamOf(ctx)), opName(ctx.op));
}

/// cpc.assign: the value (input 0) into the variable's buffer (output 0).
void assignHost(KernelContext &ctx) {
  if (ctx.inputs.empty() || ctx.outputs.empty())
    ctx.fail("expects a value and a variable");
  const TensorRef &src = ctx.inputs[0], &dst = ctx.outputs[0];
  if (src.bytes() != dst.bytes() || src.dtype != dst.dtype)
    ctx.fail("value and variable differ in type or size");
  copyBytes(ctx, src, dst);
}

/// cpc.reshape, cpc.stop_gradient and the plan's cpc.copy: the same elements, maybe reshaped.
void copyHost(KernelContext &ctx) {
  checkReshape(ctx);
  copyBytes(ctx, ctx.inputs[0], ctx.outputs[0]);
}

constexpr DType kAllTypes[] = {DType::F32, DType::F64, DType::F16, DType::BF16, DType::I64,
                               DType::I32, DType::I16, DType::I8,  DType::U8,   DType::I1};

} // namespace
} // namespace cuda

void registerCudaVariableKernels(KernelRegistry &r) {
  for (DType t : cuda::kAllTypes) {
    r.add(OpKind::Assign, DeviceKind::Cuda, t, cuda::assignHost);
    r.add(OpKind::Copy, DeviceKind::Cuda, t, cuda::copyHost);
    r.add(OpKind::Reshape, DeviceKind::Cuda, t, cuda::copyHost);
    r.add(OpKind::StopGradient, DeviceKind::Cuda, t, cuda::copyHost);
  }
}

} // namespace cpc::kernels
