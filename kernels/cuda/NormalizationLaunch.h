//===- NormalizationLaunch.h - launch shapes of the row-wise kernels ------===//
//
// Plain C++ (the unit tests check them). Softmax, LayerNorm and their gradients reduce along
// rows: a row of up to kWarpRowMax elements gets one warp (eight rows to a 256-thread block),
// a longer one a whole block. layer_norm_grad's scale and bias gradients sum over rows: fixed
// chunks of rows (a function of the row count only, so results do not depend on the GPU) give
// one partial per chunk and column, which a second kernel adds in chunk order.
//
#ifndef CPC_KERNELS_CUDA_NORMALIZATIONLAUNCH_H
#define CPC_KERNELS_CUDA_NORMALIZATIONLAUNCH_H

#include "kernels/cuda/Launch.h"

#include <algorithm>
#include <cstdint>

namespace cpc::kernels::cuda {

constexpr int64_t kWarpRowMax = 1024;

struct RowGroupLaunch {
  int64_t blocks = 0;    // along x; a grid-stride loop covers the rest
  int threads = 0;       // per block
  int threadsPerRow = 0; // kWarpSize (a warp per row) or `threads` (a block per row)
  int rowsPerBlock = 0;
};

inline RowGroupLaunch rowGroupLaunch(int64_t rows, int64_t len) {
  RowGroupLaunch l;
  if (len <= kWarpRowMax) {
    l.threadsPerRow = kWarpSize;
    l.rowsPerBlock = 8;
    l.threads = l.threadsPerRow * l.rowsPerBlock;
  } else {
    l.threads = l.threadsPerRow = rowLaunch(rows, len).threads; // about 4 elements a thread, <= 1024
    l.rowsPerBlock = 1;
  }
  l.blocks = blocksFor(rows, l.rowsPerBlock);
  return l;
}

/// layer_norm_grad's column sums: blocks of `columnsPerBlock` threads, one column each, over
/// `chunks` chunks of `chunkRows` rows (grid.y = chunks, at most kMaxChunks).
struct ColumnChunkLaunch {
  int64_t chunkRows = 0, chunks = 0;
  int columnsPerBlock = 0;
  int64_t columnBlocks = 0;
};
constexpr int64_t kMaxChunks = 512;

inline ColumnChunkLaunch columnChunkLaunch(int64_t rows, int64_t cols) {
  ColumnChunkLaunch l;
  l.chunkRows = std::max<int64_t>(16, (rows + kMaxChunks - 1) / kMaxChunks);
  l.chunks = std::max<int64_t>(1, (rows + l.chunkRows - 1) / l.chunkRows);
  int64_t warps = std::clamp<int64_t>((cols + kWarpSize - 1) / kWarpSize, 1, 8);
  l.columnsPerBlock = (int)(warps * kWarpSize);
  l.columnBlocks = blocksFor(cols, l.columnsPerBlock);
  return l;
}

} // namespace cpc::kernels::cuda

#endif
