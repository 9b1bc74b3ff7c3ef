//===- PeakMemory.h - what a plan's ranks hold beyond its buffers ------------===//
//
// Parts of the predicted peak per rank (PlanBuilder's predictPeaks) that are not the plan's
// tensors: the collectives' fixed scratch and the executor's own tables. Both follow from the
// plan alone, as the runtime allocates them.
//
#ifndef CPC_COMPILER_PEAKMEMORY_H
#define CPC_COMPILER_PEAKMEMORY_H

#include "runtime/Plan.h"

#include <cstdint>

namespace cpc {

/// The fixed scratch of the runtime's collectives (see kCollectiveChunkBytes), and on CPUs
/// what the shared-memory all-reduce holds (runtime/MpiShared.h): the groups' segments (a chunk
/// per member), and the pages of the peers' arenas it maps in. An all-reduce whose buffers are
/// in the shared arena combines this rank's block straight from every other member's copy and
/// writes it there; those pages are the peers' memory, but this rank's resident size counts
/// them: (members - 1) / members of the bucket per all-reduce, at most the peers' arenas.
int64_t collectiveScratchBytes(const Plan &plan);

/// What rank `rank`'s CPU kernels keep in host memory beyond the plan's buffers, each part the
/// largest any of its steps needs, since every kernel reuses it: the f32 scratch for 16-bit
/// operands (kernels::scratch16), heap temporaries, and the pages of OpenBLAS's packing buffer
/// (kernels::KernelWorkspace; its threads' buffers counted as one). 0 for a GPU plan: a GPU's
/// peak is the device's.
int64_t kernelHostBytes(const Plan &plan, int rank);

/// The executor's own tables on rank `rank`, in host memory (runtime/Executor.h): a view of
/// every buffer, and per step it runs a kernel context holding copies of its operands' views
/// (each shape on the heap), its kernel, its collective kernel, its wait and its time. GPT-small's
/// 575 steps take 0.8 MB.
int64_t executorTableBytes(const Plan &plan, int rank);

} // namespace cpc

#endif
