//===- CudaKernels.h - the CUDA kernels' registration ----------------------===//
//
// One file per op family under kernels/cuda/, each registering its kernels for DeviceKind::Cuda
// per element type (KernelRegistry::add(op, DeviceKind::Cuda, dtype, fn)). Kernels read their
// operands' device pointers from the KernelContext, queue their work on the device's compute
// stream (static_cast<CudaDevice *>(ctx.device)->stream()) and never synchronize.
//
#ifndef CPC_KERNELS_CUDA_CUDAKERNELS_H
#define CPC_KERNELS_CUDA_CUDAKERNELS_H

#include "kernels/Kernel.h"

namespace cpc::kernels {

/// Every CUDA kernel.
void registerCudaKernels(KernelRegistry &registry);

void registerCudaElementwiseKernels(KernelRegistry &registry);   // unary, binary, compare, where, cast, gelu(_grad)
void registerCudaReductionKernels(KernelRegistry &registry);     // reduce_sum/mean/max/min/prod
void registerCudaNormalizationKernels(KernelRegistry &registry); // layer_norm, softmax and their gradients
void registerCudaMovementKernels(KernelRegistry &registry);      // transpose, slice, concat, broadcast, pad
void registerCudaIndexingKernels(KernelRegistry &registry);      // gather*, scatter_nd, topk, argsort
void registerCudaLinalgKernels(KernelRegistry &registry);        // matmul (cuBLASLt), conv2d and gradients (cuDNN)
void registerCudaOptimizerKernels(KernelRegistry &registry);     // adamw
void registerCudaRandomKernels(KernelRegistry &registry);        // random_uniform
void registerCudaVariableKernels(KernelRegistry &registry);      // assign, copy, reshape, stop_gradient
void registerCudaFusedKernels(KernelRegistry &registry);         // matmul_bias (after the gelu kernels)
void registerCudaAttentionKernels(KernelRegistry &registry);     // attention, attention_grad (cuBLASLt + softmax rows)

} // namespace cpc::kernels

#endif
