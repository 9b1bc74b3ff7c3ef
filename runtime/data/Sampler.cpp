//===- Sampler.cpp - per-epoch permutations and global-step batches ------------===//
#include "runtime/data/Sampler.h"

#include "kernels/Tensor.h"
#include "runtime/data/Random.h"

#include <numeric>
#include <string>
#include <utility>

namespace cpc::data {

std::vector<int64_t> epochOrder(int64_t size, uint64_t seed, int64_t epoch) {
  std::vector<int64_t> order(static_cast<size_t>(size));
  std::iota(order.begin(), order.end(), int64_t(0));
  // The index slot of the key is unused by orders: the stream keeps them apart from samples.
  CounterRng rng(seed, uint64_t(epoch), 0, RngStream::Order);
  for (int64_t i = size - 1; i > 0; --i)
    std::swap(order[size_t(i)], order[size_t(rng.randint(0, i + 1))]);
  return order;
}

GlobalSampler::GlobalSampler(int64_t datasetSize, int64_t globalBatch, uint64_t seed)
    : size_(datasetSize), batch_(globalBatch), seed_(seed) {
  if (globalBatch < 1)
    throw RuntimeError("sampler: the global batch must be at least 1, got " + std::to_string(globalBatch));
  if (datasetSize < globalBatch)
    throw RuntimeError("sampler: " + std::to_string(datasetSize) + " samples are fewer than one global batch of " +
                       std::to_string(globalBatch));
}

std::vector<int64_t> GlobalSampler::rows(int64_t globalStep, int64_t rowBegin, int64_t rowEnd) {
  if (globalStep < 0 || rowBegin < 0 || rowEnd > batch_ || rowBegin > rowEnd)
    throw RuntimeError("sampler: rows [" + std::to_string(rowBegin) + ", " + std::to_string(rowEnd) + ") of step " +
                       std::to_string(globalStep) + " are outside a global batch of " + std::to_string(batch_));
  int64_t epoch = epochOf(globalStep);
  if (epoch != cachedEpoch_) {
    order_ = epochOrder(size_, seed_, epoch);
    cachedEpoch_ = epoch;
  }
  int64_t first = stepInEpoch(globalStep) * batch_;
  return std::vector<int64_t>(order_.begin() + first + rowBegin, order_.begin() + first + rowEnd);
}

} // namespace cpc::data
