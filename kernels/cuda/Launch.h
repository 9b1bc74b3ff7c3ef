//===- Launch.h - launch configurations, computed on the host --------------===//
//
// Plain C++ (no CUDA headers), so that the unit tests check the grids the kernels use: every
// element covered exactly once, blocks within the hardware's limits.
//
#ifndef CPC_KERNELS_CUDA_LAUNCH_H
#define CPC_KERNELS_CUDA_LAUNCH_H

#include <algorithm>
#include <cstdint>

namespace cpc::kernels::cuda {

constexpr int kMaxThreadsPerBlock = 1024;
constexpr int64_t kMaxGridX = 2147483647; // 2^31 - 1 blocks along x
constexpr int kWarpSize = 32;

struct LaunchConfig {
  int64_t blocks = 0;     // along x
  int threads = 0;        // per block
  size_t sharedBytes = 0; // dynamic shared memory
};

/// A grid-stride loop over `n` elements: 256 threads a block, at most 32 blocks per SM
/// (more only queue), at least one block; a kernel loops i += blocks * threads.
inline LaunchConfig elementwiseLaunch(int64_t n, int multiprocessors) {
  constexpr int threads = 256;
  int64_t wanted = (n + threads - 1) / threads;
  int64_t cap = std::max<int64_t>(1, (int64_t)multiprocessors * 32);
  return {std::clamp<int64_t>(wanted, 1, std::min(cap, kMaxGridX)), threads, 0};
}

/// One block per row of `cols` elements (a row-wise reduction: softmax, LayerNorm): a power of
/// two of threads between one warp and 1024, about one thread per 4 elements, and shared memory
/// for one partial per warp (`partials` values of `bytesPerPartial`).
inline LaunchConfig rowLaunch(int64_t rows, int64_t cols, int partials = 1, int bytesPerPartial = 4) {
  int threads = kWarpSize;
  while (threads < kMaxThreadsPerBlock && (int64_t)threads * 4 < cols)
    threads *= 2;
  return {std::max<int64_t>(rows, 1), threads, (size_t)(threads / kWarpSize) * partials * bytesPerPartial};
}

/// Whether `n` elements can be indexed with 32-bit arithmetic (cheaper divisions and offsets).
inline bool fitsIndex32(int64_t n) { return n < (int64_t(1) << 31); }

/// Blocks of a grid-stride loop for `n` items of `perBlock` each (at least one).
inline int64_t blocksFor(int64_t n, int64_t perBlock) {
  return std::clamp<int64_t>((n + perBlock - 1) / perBlock, 1, kMaxGridX);
}

} // namespace cpc::kernels::cuda

#endif
