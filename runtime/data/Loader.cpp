//===- Loader.cpp - worker threads, bounded prefetch, ordered delivery ---------===//
#include "runtime/data/Loader.h"

#include "kernels/Tensor.h"

#include <algorithm>
#include <chrono>
#include <exception>
#include <string>

namespace cpc::data {
namespace {

double secondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

} // namespace

/// A step in flight. Workers write disjoint rows of `images` without the lock; `done` (under
/// the lock) says when all rows are in.
struct ImageLoader::Slot {
  int64_t step = 0, epoch = 0;
  std::vector<int64_t> indices, labels;
  std::once_flag allocated; // the first worker allocates, outside the lock
  std::vector<float> images;
  int64_t done = 0;
  std::exception_ptr error;
};

ImageLoader::ImageLoader(std::vector<ImageSample> samples, const LoaderOptions &options)
    : samples_(std::move(samples)), options_(options),
      sampler_(int64_t(samples_.size()), options.globalBatch, options.seed) {
  if (options.threads < 1 || options.prefetchSteps < 1 || options.augment.size < 1)
    throw RuntimeError("image loader: threads (" + std::to_string(options.threads) + "), prefetch steps (" +
                       std::to_string(options.prefetchSteps) + ") and image size (" +
                       std::to_string(options.augment.size) + ") must be at least 1");
}

ImageLoader::ImageLoader(std::vector<ImageSample> samples, int imageSize, int64_t globalBatch, uint64_t seed,
                         int threads, int prefetchSteps)
    : ImageLoader(std::move(samples), [&] {
        LoaderOptions o;
        o.globalBatch = globalBatch;
        o.seed = seed;
        o.threads = threads;
        o.prefetchSteps = prefetchSteps;
        o.augment.size = imageSize;
        return o;
      }()) {}

ImageLoader::~ImageLoader() { stopWorkers(); }

void ImageLoader::stopWorkers() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  workReady_.notify_all();
  for (std::thread &worker : workers_)
    worker.join();
  workers_.clear();
}

void ImageLoader::startAt(int64_t globalStep, int64_t rowBegin, int64_t rowEnd) {
  startAt(globalStep, {{rowBegin, rowEnd}});
}

void ImageLoader::startAt(int64_t globalStep, std::vector<std::pair<int64_t, int64_t>> ranges) {
  int64_t rows = 0;
  for (const auto &[rowBegin, rowEnd] : ranges) {
    if (globalStep < 0 || rowBegin < 0 || rowBegin >= rowEnd || rowEnd > sampler_.globalBatch())
      throw RuntimeError("image loader: cannot start at step " + std::to_string(globalStep) + " rows [" +
                         std::to_string(rowBegin) + ", " + std::to_string(rowEnd) + ") of a global batch of " +
                         std::to_string(sampler_.globalBatch()));
    rows += rowEnd - rowBegin;
  }
  if (rows == 0)
    throw RuntimeError("image loader: no rows to read");
  stopWorkers();
  slots_.clear();
  consumeStep_ = claimStep_ = globalStep;
  claimRow_ = 0;
  ranges_ = std::move(ranges);
  rows_ = rows;
  stop_ = false;
  started_ = true;
  for (int t = 0; t < options_.threads; ++t)
    workers_.emplace_back([this] { workerLoop(); });
}

// Under mutex_: the slot of the task about to be claimed (claimStep_), made when it is the first.
ImageLoader::Slot *ImageLoader::claimSlot() {
  if (slots_.empty() || slots_.back()->step != claimStep_) {
    auto slot = std::make_unique<Slot>();
    slot->step = claimStep_;
    slot->epoch = sampler_.epochOf(claimStep_);
    for (const auto &[rowBegin, rowEnd] : ranges_) {
      std::vector<int64_t> part = sampler_.rows(claimStep_, rowBegin, rowEnd);
      slot->indices.insert(slot->indices.end(), part.begin(), part.end());
    }
    for (int64_t index : slot->indices)
      slot->labels.push_back(samples_[size_t(index)].label);
    slots_.push_back(std::move(slot));
  }
  return slots_.back().get();
}

void ImageLoader::workerLoop() {
  const int64_t rows = rows_;
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    workReady_.wait(lock, [&] { return stop_ || claimStep_ < consumeStep_ + options_.prefetchSteps; });
    if (stop_)
      return;
    Slot *slot = claimSlot();
    int64_t row = claimRow_;
    if (++claimRow_ == rows) {
      claimRow_ = 0;
      ++claimStep_;
    }
    lock.unlock();
    auto start = std::chrono::steady_clock::now();
    std::exception_ptr error;
    try {
      produce(*slot, row);
    } catch (...) {
      error = std::current_exception();
    }
    double busy = secondsSince(start);
    lock.lock();
    stats_.busySeconds += busy;
    stats_.imagesDecoded += error ? 0 : 1;
    if (error && !slot->error)
      slot->error = error;
    if (++slot->done == rows)
      slotReady_.notify_all();
  }
}

void ImageLoader::produce(Slot &slot, int64_t row) {
  const int size = options_.augment.size;
  const size_t perImage = size_t(3) * size * size;
  std::call_once(slot.allocated, [&] { slot.images.resize(perImage * slot.indices.size()); });
  int64_t index = slot.indices[size_t(row)];
  const std::string &path = samples_[size_t(index)].path;
  try {
    std::vector<uint8_t> bytes = readFileBytes(path);
    float *out = slot.images.data() + perImage * row;
    if (!options_.reducedDecode) {
      augmentMae(decodeImage(bytes.data(), bytes.size(), path), options_.augment, options_.seed, slot.epoch, index, out);
      return;
    }
    // The draw needs only the full size: it picks how far a JPEG may be shrunk while decoded.
    ImageSize full = readImageSize(bytes.data(), bytes.size(), path);
    AugmentDraw draw = drawAugment(full.width, full.height, options_.augment, options_.seed, slot.epoch, index);
    int reduction = full.format == ImageFormat::Jpeg ? decodeReduction(draw.crop, size) : 1;
    augmentDrawn(decodeImage(bytes.data(), bytes.size(), path, reduction), draw, reduction, options_.augment, out);
  } catch (const RuntimeError &) {
    throw; // names the file already
  } catch (const std::exception &e) {
    throw RuntimeError(path + ": " + e.what());
  }
}

Batch ImageLoader::next() {
  if (!started_)
    startAt(0, 0, sampler_.globalBatch());
  auto start = std::chrono::steady_clock::now();
  std::unique_ptr<Slot> slot;
  {
    std::unique_lock<std::mutex> lock(mutex_);
    int64_t rows = rows_;
    slotReady_.wait(lock, [&] { return !slots_.empty() && slots_.front()->done == rows; });
    slot = std::move(slots_.front());
    slots_.pop_front();
    ++consumeStep_;
  }
  workReady_.notify_all();
  if (slot->error)
    std::rethrow_exception(slot->error);
  Batch batch;
  const int64_t size = options_.augment.size;
  batch.shape = {int64_t(slot->indices.size()), 3, size, size};
  batch.images = std::move(slot->images);
  batch.labels = std::move(slot->labels);
  batch.indices = std::move(slot->indices);
  batch.step = slot->step;
  batch.epoch = slot->epoch;
  batch.waitSeconds = secondsSince(start);
  return batch;
}

void ImageLoader::waitForPrefetch() {
  std::unique_lock<std::mutex> lock(mutex_);
  if (!started_)
    return;
  const int64_t rows = rows_;
  slotReady_.wait(lock, [&] {
    if (claimStep_ < consumeStep_ + options_.prefetchSteps)
      return false;
    return std::all_of(slots_.begin(), slots_.end(), [&](const auto &slot) { return slot->done == rows; });
  });
}

LoaderStats ImageLoader::stats() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return stats_;
}

} // namespace cpc::data
