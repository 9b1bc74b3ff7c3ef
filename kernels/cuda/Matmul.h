//===- Matmul.h - cuBLASLt GEMMs: cpc.matmul and fused bias / GELU epilogues ===//
//
// No CUDA headers: a fusion pass or the executor can call the fused GEMM with a KernelContext
// whose device is a CudaDevice.
//
#ifndef CPC_KERNELS_CUDA_MATMUL_H
#define CPC_KERNELS_CUDA_MATMUL_H

#include "kernels/Kernel.h"
#include "kernels/cuda/GemmPlan.h"

#include <cstdint>

namespace cpc::kernels::cuda {

/// What cuBLASLt applies to the product before storing it (one rounding for 16-bit results).
enum class GemmEpilogue : uint8_t {
  None,
  Bias,     // + bias[N] on every row (a Linear layer)
  GeluBias, // gelu(. + bias[N]), GELU in its tanh form (cuBLASLt's; cpc.gelu approximate="tanh")
};

/// out = epilogue(op(lhs) op(rhs)) with cpc.matmul's shapes, batching and transposes; `bias`
/// (null for None) has N elements (the result's last dim) and is added to every row of every
/// batch. Element types: all four tensors the same, f32/f64/f16/bf16. Queued on the device's
/// compute stream; fails the step through ctx.fail (e.g. an epilogue with K == 0).
void launchGemmWithEpilogue(const KernelContext &ctx, const TensorRef &lhs, const TensorRef &rhs,
                            const TensorRef *bias, const TensorRef &out, bool transposeLhs, bool transposeRhs,
                            GemmEpilogue epilogue);

/// out = op(lhs) op(rhs) as `plan` lays the matrices out (planSlicedGemm: strided slices that
/// no tensor shape describes); all three of element type `t`. The plan must not be a zero fill.
void launchPlannedGemm(const KernelContext &ctx, const GemmPlan &plan, DType t, const void *lhs, const void *rhs,
                       void *out);

/// Whether f32 GEMMs and convolutions may use TF32 tensor cores: CPC_ALLOW_TF32=1 in the
/// environment (read once). Off by default, so that f32 results match the CPU within 1e-5.
bool tf32Allowed();

/// cpc.matmul for f32, f64, f16 and bf16 (called by registerCudaLinalgKernels).
void registerCudaMatmulKernels(KernelRegistry &registry);

} // namespace cpc::kernels::cuda

#endif
