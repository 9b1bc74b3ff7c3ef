//===- MemoryPlanner.cpp --------------------------------------------------===//
#include "compiler/MemoryPlanner.h"

#include <algorithm>
#include <numeric>

namespace cpc {

ArenaLayout planArena(const std::vector<LiveRange> &ranges, int64_t alignment) {
  auto align = [&](int64_t v) { return (v + alignment - 1) / alignment * alignment; };
  std::vector<size_t> order(ranges.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return ranges[a].bytes != ranges[b].bytes ? ranges[a].bytes > ranges[b].bytes : ranges[a].begin < ranges[b].begin;
  });
  ArenaLayout layout;
  layout.offsets.assign(ranges.size(), 0);
  std::vector<size_t> placed;
  for (size_t i : order) {
    const LiveRange &r = ranges[i];
    int64_t size = align(std::max<int64_t>(r.bytes, 1));
    // Blocks already placed whose lifetimes intersect this one, by offset.
    std::vector<std::pair<int64_t, int64_t>> busy;
    for (size_t p : placed)
      if (ranges[p].begin <= r.end && r.begin <= ranges[p].end)
        busy.push_back({layout.offsets[p], layout.offsets[p] + align(std::max<int64_t>(ranges[p].bytes, 1))});
    std::sort(busy.begin(), busy.end());
    int64_t offset = 0;
    for (auto [lo, hi] : busy) {
      if (offset + size <= lo)
        break;
      offset = std::max(offset, hi);
    }
    layout.offsets[i] = offset;
    layout.totalBytes = std::max(layout.totalBytes, offset + size);
    placed.push_back(i);
  }
  return layout;
}

} // namespace cpc
