//===- CollectiveKernels.h - steps that involve several ranks -------------===//
#ifndef CPC_RUNTIME_COLLECTIVEKERNELS_H
#define CPC_RUNTIME_COLLECTIVEKERNELS_H

#include "kernels/cpu/Kernel.h"

namespace cpc {

/// The kernel of an op with the RankDependent trait (collectives, send/recv, shard_slice), or
/// null. They use the context's communicator, rank and mesh, so they live in the runtime, not in
/// the CPU kernels.
kernels::KernelFn findCollectiveKernel(OpKind op);

} // namespace cpc

#endif
