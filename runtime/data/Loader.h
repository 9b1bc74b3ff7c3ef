//===- Loader.h - decoded, augmented image batches on worker threads -----------===//
//
// An ImageLoader yields one batch per global step: rows [rowBegin, rowEnd) of the step's global
// batch (GlobalSampler), each image decoded and augmented (augmentMae) with its randomness keyed
// by (seed, epoch, dataset index). Worker threads fill up to `prefetchSteps` steps ahead of the
// consumer; the batches do not depend on the thread count or on how rows are split among ranks.
//
//===----------------------------------------------------------------------------===//
#ifndef CPC_RUNTIME_DATA_LOADER_H
#define CPC_RUNTIME_DATA_LOADER_H

#include "runtime/data/Augment.h"
#include "runtime/data/ImageFolder.h"
#include "runtime/data/Sampler.h"

#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace cpc::data {

struct LoaderOptions {
  int64_t globalBatch = 0;
  uint64_t seed = 0;
  int threads = 4;
  int prefetchSteps = 2;   // steps decoded ahead of the consumer, at least 1
  AugmentOptions augment;  // augment.size is the image size S
  // Decode a JPEG at 1/2, 1/4 or 1/8 when its crop stays at least S x S (augmentMaeReduced):
  // several times faster on large photos, close to but not torchvision's pixels.
  bool reducedDecode = false;
};

/// One step's rows, ready for the model.
struct Batch {
  std::vector<float> images;    // [rows, 3, S, S], contiguous, normalised
  std::vector<int64_t> shape;   // {rows, 3, S, S}
  std::vector<int64_t> labels;  // class index of each row
  std::vector<int64_t> indices; // dataset index of each row
  int64_t step = 0, epoch = 0;
  double waitSeconds = 0; // how long next() blocked for it
};

struct LoaderStats {
  int64_t imagesDecoded = 0; // decoded and augmented, over all threads
  double busySeconds = 0;    // summed over the threads: imagesDecoded / busySeconds is per thread
};

/// One consumer thread calls startAt() and next(); the workers are internal.
class ImageLoader {
public:
  /// Throws cpc::RuntimeError on bad options or a dataset smaller than one global batch.
  ImageLoader(std::vector<ImageSample> samples, const LoaderOptions &options);
  ImageLoader(const ImageFolder &folder, const LoaderOptions &options)
      : ImageLoader(folder.samples(), options) {}
  ImageLoader(std::vector<ImageSample> samples, int imageSize, int64_t globalBatch, uint64_t seed,
              int threads, int prefetchSteps);
  /// Stops the workers (each finishes the image in hand), also mid-epoch.
  ~ImageLoader();
  ImageLoader(const ImageLoader &) = delete;
  ImageLoader &operator=(const ImageLoader &) = delete;

  /// Restarts the stream at `globalStep`, reading rows [rowBegin, rowEnd) of every global batch.
  /// Without it, next() starts at step 0 with the whole batch.
  void startAt(int64_t globalStep, int64_t rowBegin, int64_t rowEnd);
  /// The same for several row ranges [first, second) of every global batch, concatenated in
  /// order (a data-parallel rank's share of each microbatch).
  void startAt(int64_t globalStep, std::vector<std::pair<int64_t, int64_t>> ranges);

  /// The next step's batch. A sample that failed to decode throws its cpc::RuntimeError (naming
  /// the file) here; the stream then goes on with the following step.
  Batch next();

  LoaderStats stats() const;
  /// Blocks until the steps ahead of the consumer are all decoded (or one failed): after it the
  /// loader holds what it holds from then on, which is how its memory is measured.
  void waitForPrefetch();
  const GlobalSampler &sampler() const { return sampler_; }
  int64_t stepsPerEpoch() const { return sampler_.stepsPerEpoch(); }

private:
  struct Slot;
  void stopWorkers();
  void workerLoop();
  Slot *claimSlot();
  void produce(Slot &slot, int64_t row);

  std::vector<ImageSample> samples_;
  LoaderOptions options_;
  GlobalSampler sampler_; // used under mutex_

  mutable std::mutex mutex_;
  std::condition_variable workReady_, slotReady_;
  std::deque<std::unique_ptr<Slot>> slots_; // front: the step next() returns
  int64_t consumeStep_ = 0, claimStep_ = 0, claimRow_ = 0;
  std::vector<std::pair<int64_t, int64_t>> ranges_;
  int64_t rows_ = 0; // rows per step, over all ranges
  bool started_ = false, stop_ = false;
  LoaderStats stats_;
  std::vector<std::thread> workers_;
};

} // namespace cpc::data

#endif
