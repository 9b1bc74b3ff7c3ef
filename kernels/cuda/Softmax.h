//===- Softmax.h - the softmax row kernels, for other CUDA kernels to launch ===//
//
// No CUDA headers: cpc.attention's kernels (Attention.cpp) run their score rows through these.
//
#ifndef CPC_KERNELS_CUDA_SOFTMAX_H
#define CPC_KERNELS_CUDA_SOFTMAX_H

#include "kernels/Kernel.h"

#include <cstdint>

namespace cpc::kernels::cuda {

/// out = softmax(scale * in) along `axis` (out may be in), on the device's compute stream.
void launchSoftmax(const KernelContext &ctx, const TensorRef &in, const TensorRef &out, int64_t axis, double scale);

/// out = scale * y * (g - sum(g * y)) along `axis` (softmax's VJP from its output y; out may be g).
void launchSoftmaxGrad(const KernelContext &ctx, const TensorRef &y, const TensorRef &g, const TensorRef &out,
                       int64_t axis, double scale);

} // namespace cpc::kernels::cuda

#endif
