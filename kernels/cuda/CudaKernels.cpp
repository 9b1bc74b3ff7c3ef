//===- CudaKernels.cpp ----------------------------------------------------===//
#include "kernels/cuda/CudaKernels.h"

namespace cpc::kernels {

void registerCudaKernels(KernelRegistry &registry) {
  registerCudaElementwiseKernels(registry);
  registerCudaReductionKernels(registry);
  registerCudaNormalizationKernels(registry);
  registerCudaMovementKernels(registry);
  registerCudaIndexingKernels(registry);
  registerCudaLinalgKernels(registry);
  registerCudaOptimizerKernels(registry);
  registerCudaRandomKernels(registry);
  registerCudaVariableKernels(registry);
  registerCudaFusedKernels(registry);
  registerCudaAttentionKernels(registry);
}

} // namespace cpc::kernels
