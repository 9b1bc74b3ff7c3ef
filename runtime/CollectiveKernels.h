//===- CollectiveKernels.h - steps that involve several ranks -------------===//
#ifndef CPC_RUNTIME_COLLECTIVEKERNELS_H
#define CPC_RUNTIME_COLLECTIVEKERNELS_H

#include "kernels/cpu/Kernel.h"

#include <memory>

namespace cpc {

class Work;

/// The kernel of a step that involves other ranks. It returns the Work of a collective it posted
/// and left running (an all-reduce, and an all-gather or reduce-scatter along dim 0), which the
/// executor completes before the first step that touches the step's buffers; null when the step
/// is done.
using CollectiveKernelFn = std::unique_ptr<Work> (*)(kernels::KernelContext &);

/// The kernel of an op with the RankDependent trait (collectives, send/recv, shard_slice), or
/// null. They use the context's communicator, rank and mesh, so they live in the runtime, not in
/// the CPU kernels.
CollectiveKernelFn findCollectiveKernel(OpKind op);

} // namespace cpc

#endif
