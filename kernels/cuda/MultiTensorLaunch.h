//===- MultiTensorLaunch.h - many tensors per launch, planned on the host ---===//
//
// Plain C++ (the unit tests check it): cpc.multi_tensor_adamw updates up to
// kTensorsPerLaunch tensors per kernel launch, their pointers passed by value in the kernel's
// parameters. Each tensor gets ceil(n / kElementsPerBlock) blocks; blockStart[t] is its first
// block, so a block finds its tensor by scanning blockStart and covers elements
// [(block - blockStart[t]) * kElementsPerBlock, + kElementsPerBlock) of it.
//
#ifndef CPC_KERNELS_CUDA_MULTITENSORLAUNCH_H
#define CPC_KERNELS_CUDA_MULTITENSORLAUNCH_H

#include "kernels/cuda/HostDevice.h"

#include <algorithm>
#include <cstdint>
#include <vector>

namespace cpc::kernels::cuda {

constexpr int kTensorsPerLaunch = 24;
constexpr int kMultiTensorThreads = 256;
constexpr int64_t kElementsPerBlock = 4 * kMultiTensorThreads;

/// One launch: tensors [first, first + count) of the op, and where each one's blocks start.
struct MultiTensorChunk {
  int first = 0, count = 0;
  int64_t blockStart[kTensorsPerLaunch + 1] = {}; // blockStart[count] = blocks of the launch
  int64_t blocks() const { return blockStart[count]; }
};

/// The launches for tensors of `sizes` elements (empty tensors get no blocks).
inline std::vector<MultiTensorChunk> multiTensorChunks(const std::vector<int64_t> &sizes) {
  std::vector<MultiTensorChunk> chunks;
  for (int first = 0; first < (int)sizes.size(); first += kTensorsPerLaunch) {
    MultiTensorChunk c;
    c.first = first;
    c.count = std::min<int>(kTensorsPerLaunch, (int)sizes.size() - first);
    for (int t = 0; t < c.count; ++t)
      c.blockStart[t + 1] = c.blockStart[t] + (sizes[first + t] + kElementsPerBlock - 1) / kElementsPerBlock;
    if (c.blocks() > 0)
      chunks.push_back(c);
  }
  return chunks;
}

/// The tensor (within the chunk) that block `block` works on.
CPC_HD int tensorOfBlock(const int64_t *blockStart, int count, int64_t block) {
  int t = 0;
  while (t + 1 < count && blockStart[t + 1] <= block)
    ++t;
  return t;
}

} // namespace cpc::kernels::cuda

#endif
