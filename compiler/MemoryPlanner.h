//===- MemoryPlanner.h - static arena layout from buffer lifetimes --------===//
#ifndef CPC_COMPILER_MEMORYPLANNER_H
#define CPC_COMPILER_MEMORYPLANNER_H

#include <cstdint>
#include <vector>

namespace cpc {

/// A buffer that lives from step `begin` through step `end` (inclusive).
struct LiveRange {
  int64_t bytes = 0;
  int begin = 0;
  int end = 0;
};

struct ArenaLayout {
  std::vector<int64_t> offsets; // one per range, aligned
  int64_t totalBytes = 0;
};

/// Places every range in one arena so that ranges alive at the same step never overlap.
/// Greedy by size (largest first), each at the lowest aligned offset that fits.
ArenaLayout planArena(const std::vector<LiveRange> &ranges, int64_t alignment = 64);

} // namespace cpc

#endif
