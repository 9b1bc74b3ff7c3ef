//===- Collectives.h - kernels the NCCL communicator queues ----------------===//
//
// Element work a collective needs around its NCCL call, queued on the stream the call runs on:
// the NaN-keeping max's keys (CollectiveMath.h).
//
#ifndef CPC_KERNELS_CUDA_COLLECTIVES_H
#define CPC_KERNELS_CUDA_COLLECTIVES_H

#include "kernels/Tensor.h"

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace cpc::kernels::cuda {

/// Bytes of one max key of a float `type` (f32, f16, bf16: 4; f64: 8).
size_t maxKeyBytes(DType type);
/// Writes the max keys of the `count` floats of `type` at `values` into `keys` (maxKeyBytes(type)
/// each; may be `values` when the widths agree); then back. Queued on `stream`.
void toMaxKeys(const void *values, void *keys, int64_t count, DType type, cudaStream_t stream);
void fromMaxKeys(const void *keys, void *values, int64_t count, DType type, cudaStream_t stream);

} // namespace cpc::kernels::cuda

#endif
