//===- Blocks.cpp - a rank's block of a split tensor ----------------------===//
#include "runtime/Blocks.h"
#include "runtime/Plan.h"

#include <cstring>

namespace cpc {

std::vector<int64_t> blockStarts(const std::vector<int64_t> &meshShape, const std::vector<std::string> &meshAxes,
                                 int rank, const std::vector<std::vector<std::string>> &dimAxes,
                                 const std::vector<int64_t> &block) {
  std::vector<int64_t> mine = meshCoordinates(rank, meshShape), starts(block.size(), 0);
  for (size_t d = 0; d < block.size() && d < dimAxes.size(); ++d) {
    int64_t index = 0; // row-major over the dim's axes, major first
    for (const std::string &axis : dimAxes[d])
      for (size_t i = 0; i < meshAxes.size(); ++i)
        if (meshAxes[i] == axis)
          index = index * meshShape[i] + mine[i];
    starts[d] = index * block[d];
  }
  return starts;
}

std::vector<int64_t> blockStarts(const Plan &plan, int rank, const std::vector<std::vector<std::string>> &dimAxes,
                                 const std::vector<int64_t> &block) {
  return blockStarts(plan.meshShape, plan.meshAxes, rank, dimAxes, block);
}

void copyBlock(void *whole, const std::vector<int64_t> &wholeShape, void *out, const std::vector<int64_t> &block,
               const std::vector<int64_t> &starts, size_t elementSize, bool toBlock) {
  const int64_t rank = block.size();
  if (rank == 0) {
    toBlock ? std::memcpy(out, whole, elementSize) : std::memcpy(whole, out, elementSize);
    return;
  }
  std::vector<int64_t> strides(rank, 1);
  for (int64_t d = rank - 2; d >= 0; --d)
    strides[d] = strides[d + 1] * wholeShape[d + 1];
  // Row by row along the innermost dim.
  const int64_t inner = block.back();
  int64_t rows = 1;
  for (int64_t d = 0; d + 1 < rank; ++d)
    rows *= block[d];
  auto *w = static_cast<char *>(whole);
  auto *b = static_cast<char *>(out);
  for (int64_t row = 0; row < rows && inner > 0; ++row) {
    int64_t offset = starts.back(), rest = row;
    for (int64_t d = rank - 2; d >= 0; --d) {
      offset += (starts[d] + rest % block[d]) * strides[d];
      rest /= block[d];
    }
    char *blockRow = b + row * inner * elementSize, *wholeRow = w + offset * elementSize;
    toBlock ? std::memcpy(blockRow, wholeRow, inner * elementSize) : std::memcpy(wholeRow, blockRow, inner * elementSize);
  }
}

void permuteElements(const void *src, void *dst, const std::vector<int64_t> &view, const std::vector<int64_t> &perm,
                     size_t elementSize, bool inverse) {
  const size_t rank = view.size();
  std::vector<int64_t> outShape(rank), viewStrides(rank, 1);
  for (size_t d = 0; d < rank; ++d)
    outShape[d] = view[perm[d]];
  for (int64_t d = (int64_t)rank - 2; d >= 0; --d)
    viewStrides[d] = viewStrides[d + 1] * view[d + 1];
  int64_t total = 1;
  for (int64_t n : view)
    total *= n;
  // Walk the transposed tensor in order; `offset` follows the same element in the view.
  std::vector<int64_t> index(rank, 0);
  const auto *in = static_cast<const char *>(src);
  auto *out = static_cast<char *>(dst);
  for (int64_t i = 0; i < total; ++i) {
    int64_t offset = 0;
    for (size_t d = 0; d < rank; ++d)
      offset += index[d] * viewStrides[perm[d]];
    if (inverse)
      std::memcpy(out + offset * elementSize, in + i * elementSize, elementSize);
    else
      std::memcpy(out + i * elementSize, in + offset * elementSize, elementSize);
    for (int64_t d = (int64_t)rank - 1; d >= 0; --d) {
      if (++index[d] < outShape[d])
        break;
      index[d] = 0;
    }
  }
}

} // namespace cpc
