//===- Blocks.h - a rank's block of a split tensor ------------------------===//
//
// A value split over mesh axes dim by dim (a sharding's dim_axes, a sharded variable's
// shard_dims) gives each rank one block: along dim d, block number shardIndex(rank, axes of d)
// of size shape[d] / parts. These helpers find a rank's block and copy it out of a whole
// row-major tensor or back into one (shard_slice, loading a sharded parameter, gathering it for
// --output-dir).
//
#ifndef CPC_RUNTIME_BLOCKS_H
#define CPC_RUNTIME_BLOCKS_H

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace cpc {

struct Plan;

/// Where `rank`'s block of shape `block` starts in each dim, for a split over `dimAxes`.
std::vector<int64_t> blockStarts(const Plan &plan, int rank, const std::vector<std::vector<std::string>> &dimAxes,
                                 const std::vector<int64_t> &block);
/// The same from mesh shape and axis names directly (kernels read them from their context).
std::vector<int64_t> blockStarts(const std::vector<int64_t> &meshShape, const std::vector<std::string> &meshAxes,
                                 int rank, const std::vector<std::vector<std::string>> &dimAxes,
                                 const std::vector<int64_t> &block);

/// Copies the block at `starts` of shape `block` out of `whole` (row-major, shape `wholeShape`)
/// into `out` (toBlock), or from `out` back into `whole` (!toBlock).
void copyBlock(void *whole, const std::vector<int64_t> &wholeShape, void *out, const std::vector<int64_t> &block,
               const std::vector<int64_t> &starts, size_t elementSize, bool toBlock);

/// Writes `src` (row-major, shape `view`) transposed by `perm` into `dst`: dst dim d is src dim
/// perm[d]. With `inverse`, undoes that: `src` is the transposed tensor and `dst` gets `view`.
void permuteElements(const void *src, void *dst, const std::vector<int64_t> &view, const std::vector<int64_t> &perm,
                     size_t elementSize, bool inverse);

} // namespace cpc

#endif
