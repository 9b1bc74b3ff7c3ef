//===- ReductionLaunch.h - how a reduction is spread over blocks, on the host ===//
//
// Plain C++ (tests/unit/cuda/ReductionMathTest.cpp checks it). A block of 256 threads is
// threadsX consecutive outputs by threadsY threads per output; the threads of one output stride
// over its reduced range and their partials merge in shared memory. Consecutive lanes read
// consecutive addresses: they take consecutive reduced positions when the reduced range is
// innermost (inner == 1), else consecutive outputs along the kept inner dim. When the outputs give too few blocks to fill the GPU and the reduced range
// is long, it is cut into `splits` slices (grid y) whose partials a second pass merges in order.
//
#ifndef CPC_KERNELS_CUDA_REDUCTIONLAUNCH_H
#define CPC_KERNELS_CUDA_REDUCTIONLAUNCH_H

#include "kernels/cuda/HostDevice.h"
#include "kernels/cuda/Launch.h"

#include <algorithm>
#include <cstddef>
#include <cstdint>

namespace cpc::kernels::cuda {

constexpr int kReduceBlockThreads = 256;
constexpr int64_t kMaxGridY = 65535;
/// A slice gives each of its threads at least this many elements (fewer: not worth a pass).
constexpr int64_t kReduceMinPerThread = 64;

struct ReductionLaunch {
  int threadsX = 1, threadsY = 1; // block: outputs x threads per output
  bool reducedFastest = false;    // consecutive lanes take consecutive reduced positions (inner == 1)
  int64_t tiles = 0;              // groups of threadsX consecutive outputs
  int64_t blocks = 0;             // grid x: a grid-stride loop over the tiles
  int64_t splits = 1;             // grid y: slices of each reduced range
  int64_t chunk = 0;              // reduced positions per slice (the last may have fewer)

  /// The output column (0..threadsX) and thread row (0..threadsY) of a block's thread `lane`.
  CPC_HD int columnOf(int lane) const { return reducedFastest ? lane / threadsY : lane % threadsX; }
  CPC_HD int rowOf(int lane) const { return reducedFastest ? lane % threadsY : lane / threadsX; }
  /// Shared memory for one partial per thread.
  size_t sharedBytes(size_t accBytes) const { return (size_t)threadsX * threadsY * accBytes; }
  /// Scratch for the slices' partials (none without splitting).
  size_t scratchBytes(int64_t outputs, size_t accBytes) const {
    return splits > 1 ? (size_t)(splits * outputs) * accBytes : 0;
  }
};

inline int64_t ceilPow2(int64_t n) {
  int64_t p = 1;
  while (p < n)
    p *= 2;
  return p;
}

/// The launch of a reduction with `outputs` results, `inner` contiguous kept elements (1: the
/// reduced range is innermost) and `reduced` positions per result.
inline ReductionLaunch reductionLaunch(int64_t outputs, int64_t inner, int64_t reduced, int multiprocessors) {
  ReductionLaunch l;
  const int64_t block = kReduceBlockThreads;
  int64_t ty;
  if (inner == 1) {
    ty = std::clamp<int64_t>(ceilPow2(reduced), 1, block);
  } else {
    int64_t tx = std::min<int64_t>(ceilPow2(inner), kWarpSize);
    ty = std::clamp<int64_t>(ceilPow2(reduced), 1, block / tx);
  }
  l.threadsY = (int)ty;
  l.reducedFastest = inner == 1;
  l.threadsX = (int)(block / ty);
  l.tiles = std::max<int64_t>(1, (outputs + l.threadsX - 1) / l.threadsX);
  int64_t cap = std::max<int64_t>(1, (int64_t)multiprocessors * 32);
  l.blocks = std::min({l.tiles, cap, kMaxGridX});
  l.chunk = reduced;
  const int64_t target = std::max<int64_t>(1, (int64_t)multiprocessors * 4);
  const int64_t perSlice = ty * kReduceMinPerThread;
  if (l.tiles < target && reduced > perSlice) {
    int64_t splits = std::min({(target + l.tiles - 1) / l.tiles, (reduced + perSlice - 1) / perSlice, kMaxGridY});
    l.chunk = (reduced + splits - 1) / splits;
    l.splits = (reduced + l.chunk - 1) / l.chunk;
  }
  return l;
}

} // namespace cpc::kernels::cuda

#endif
