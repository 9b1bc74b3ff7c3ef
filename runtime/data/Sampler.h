//===- Sampler.h - global batches determined by the global step alone ----------===//
//
// Epoch e's order is a permutation of [0, N) drawn from (seed, e); step g of the run is step
// g % S of epoch g / S (S = floor(N / B), the partial last batch dropped), and its global batch
// is order[s * B, (s + 1) * B). A data-parallel rank reads a row range of that batch, so what
// any rank sees at step g depends on g and its rows only: resuming at g on another layout (other
// rank count, other micro-batching) reads the same samples.
//
//===----------------------------------------------------------------------------===//
#ifndef CPC_RUNTIME_DATA_SAMPLER_H
#define CPC_RUNTIME_DATA_SAMPLER_H

#include <cstdint>
#include <vector>

namespace cpc::data {

/// The permutation of [0, size) for `epoch`: Fisher-Yates over CounterRng(seed, epoch).
std::vector<int64_t> epochOrder(int64_t size, uint64_t seed, int64_t epoch);

class GlobalSampler {
public:
  /// Throws cpc::RuntimeError when globalBatch < 1 or the dataset is smaller than a batch.
  GlobalSampler(int64_t datasetSize, int64_t globalBatch, uint64_t seed);

  int64_t datasetSize() const { return size_; }
  int64_t globalBatch() const { return batch_; }
  int64_t stepsPerEpoch() const { return size_ / batch_; }
  int64_t epochOf(int64_t globalStep) const { return globalStep / stepsPerEpoch(); }
  int64_t stepInEpoch(int64_t globalStep) const { return globalStep % stepsPerEpoch(); }

  /// Dataset indices of rows [rowBegin, rowEnd) of step `globalStep`'s global batch. Keeps the
  /// last epoch's order, so it is not safe to call from several threads at once.
  std::vector<int64_t> rows(int64_t globalStep, int64_t rowBegin, int64_t rowEnd);

private:
  int64_t size_, batch_;
  uint64_t seed_;
  int64_t cachedEpoch_ = -1;
  std::vector<int64_t> order_;
};

} // namespace cpc::data

#endif
