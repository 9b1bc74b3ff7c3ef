//===- IndexingLaunch.h - launch shapes and scratch of the indexing kernels ===//
//
// Plain C++ (the unit tests check them). topk and argsort sort each row in shared memory with a
// bitonic network over the row padded to a power of two; gather_grad and scatter_nd sort their
// indices by target (a stable radix sort of 32-bit keys carrying 32-bit positions) in scratch.
//
#ifndef CPC_KERNELS_CUDA_INDEXINGLAUNCH_H
#define CPC_KERNELS_CUDA_INDEXINGLAUNCH_H

#include "kernels/cuda/Launch.h"

#include <algorithm>
#include <cstddef>
#include <cstdint>

namespace cpc::kernels::cuda {

/// The longest row topk and argsort sort on the GPU (8-byte keys and 4-byte positions fill the
/// 48 KiB of shared memory a block gets without opting in).
constexpr int64_t kMaxSortLength = 4096;
constexpr size_t kDefaultSharedBytes = 48 * 1024;

struct SortLaunch {
  bool fits = false;     // false: the row is too long for one block's shared memory
  int padded = 0;        // the row length rounded up to a power of two
  int threads = 0;       // per block (one block per row)
  size_t sharedBytes = 0;
};

inline SortLaunch sortLaunch(int64_t len, size_t keyBytes) {
  SortLaunch l;
  if (len > kMaxSortLength)
    return l;
  l.padded = 1;
  while (l.padded < len)
    l.padded *= 2;
  l.threads = (int)std::clamp<int64_t>(l.padded / 2, kWarpSize, kMaxThreadsPerBlock);
  l.sharedBytes = (size_t)l.padded * (keyBytes + sizeof(int32_t));
  l.fits = l.sharedBytes <= kDefaultSharedBytes;
  return l;
}

/// The radix sort's bits: enough for keys up to `maxKey` (the sentinel), at least 1.
inline int radixBits(uint64_t maxKey) {
  int bits = 1;
  while (bits < 32 && (maxKey >> bits) != 0)
    ++bits;
  return bits;
}

/// Byte offsets (256-aligned) of the sort's buffers in one scratch block: keys in and out,
/// positions in and out, then the radix sort's temporary storage.
struct SortScratch {
  size_t keysIn = 0, keysOut = 0, positionsIn = 0, positionsOut = 0, temp = 0, total = 0;
};
inline SortScratch sortScratch(int64_t n, size_t tempBytes) {
  auto align = [](size_t b) { return (b + 255) / 256 * 256; };
  size_t words = align((size_t)n * 4);
  SortScratch s;
  s.keysOut = words;
  s.positionsIn = 2 * words;
  s.positionsOut = 3 * words;
  s.temp = 4 * words;
  s.total = s.temp + align(tempBytes);
  return s;
}

} // namespace cpc::kernels::cuda

#endif
