//===- CudaDevice.h - one GPU as a Device, with the handles kernels need ---===//
//
// Compiled only with the CUDA toolkit. Kernels under kernels/cuda/ take their stream, cuBLASLt
// and cuDNN handles and workspace from here (KernelContext::device is a CudaDevice on a GPU plan).
//
#ifndef CPC_RUNTIME_CUDA_CUDADEVICE_H
#define CPC_RUNTIME_CUDA_CUDADEVICE_H

#include "runtime/Device.h"

#include <cublasLt.h>
#include <cuda_runtime.h>
#include <cudnn.h>

#include <string>

namespace cpc {

/// Throws RuntimeError "what: <CUDA's message>" when `status` is an error.
void checkCuda(cudaError_t status, const char *what);
void checkCublas(cublasStatus_t status, const char *what);
void checkCudnn(cudnnStatus_t status, const char *what);

class CudaDevice : public Device {
public:
  virtual cudaStream_t stream() const = 0;      // the compute stream
  virtual cudaStream_t commCudaStream() const = 0;
  virtual cublasLtHandle_t blasLt() = 0;
  /// cuDNN's handle, bound to the compute stream (made on first use).
  virtual cudnnHandle_t dnn() = 0;
  /// The GEMM workspace (cuBLASLt's recommended 32 MiB on Hopper).
  virtual void *gemmWorkspace(size_t *bytes) = 0;
  /// Streaming multiprocessors and compute capability (launch configurations use them).
  virtual int multiprocessors() const = 0;
  virtual int computeCapability() const = 0; // major * 10 + minor
  /// What a kernel that can fault takes (kernels/KernelFault.h): the device's fault record, in
  /// pinned host memory the GPU writes through, and the site setFaultSite set.
  virtual kernels::FaultSink faultSink() const = 0;
};

} // namespace cpc

#endif
