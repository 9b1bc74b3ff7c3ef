//===- DataFeed.h - a training run's batches read from a dataset, step by step -===//
//
// `cpc-run PLAN --data PATH` trains on a dataset instead of one fixed batch: an ImageFolder tree
// (JPEG/PNG, decoded and augmented as MAE's pretraining does, on worker threads ahead of the
// step), a `.npy` array of samples (N x the input's per-sample shape), or a 1-D `.npy` token
// stream cut into windows of the sequence length (tokens, and the next tokens as targets).
// Every step's global batch and every random draw are functions of (seed, step, sample), never
// of the layout: each rank reads only its rows of each microbatch, and a run resumed at step s
// on any layout sees the data an uninterrupted run would. The plan's other float inputs (MAE's
// masking noise) get U[0, 1) draws keyed by (seed, step, row of the global batch).
//
#ifndef CPC_RUNTIME_DATAFEED_H
#define CPC_RUNTIME_DATAFEED_H

#include "runtime/Plan.h"
#include "runtime/Trainer.h"

#include <nlohmann/json.hpp>

#include <memory>
#include <set>
#include <string>

namespace cpc {

namespace data {
class GlobalSampler;
class ImageLoader;
} // namespace data

struct DataOptions {
  std::string path;      // an ImageFolder directory or a .npy file
  int threads = 2;       // decoding threads per rank
  int prefetchSteps = 2; // steps decoded ahead
  uint64_t seed = 0;
  bool reducedDecode = true; // JPEGs decoded at 1/2-1/8 where the crop allows (ImageLoader's)
};

class DataFeed {
public:
  /// Finds the input the dataset feeds (the image input [B, 3, S, S] for a folder; the one whose
  /// per-sample type and shape match a .npy's), and the float inputs it draws noise for (not in
  /// `bound`: those --input binds). Throws RuntimeError naming the path or the input.
  DataFeed(const Plan &plan, Trainer &trainer, int rank, const DataOptions &options,
           const std::set<std::string> &bound);
  ~DataFeed();

  /// Binds the data of step `step` (0-based; steps are read in order from the first bound).
  void bind(int64_t step);

  int64_t datasetSize() const { return size_; }
  int64_t stepsPerEpoch() const { return size_ / globalBatch_; }
  int64_t epochOf(int64_t step) const { return step / stepsPerEpoch(); }
  /// Seconds the last bind waited for its data (the rest was decoded ahead, off the step).
  double lastWaitSeconds() const { return lastWait_; }
  /// Images decoded and augmented per second of a decoding thread's busy time (0 for .npy).
  double imagesPerThreadSecond() const;
  /// Binds step `step` (as bind) and waits until the steps after it are decoded: from then on
  /// the data pipeline holds about what it will hold, so the resident growth across it (decode
  /// buffers, prefetched steps, the bound copies, decoding code paged in) is the pipeline's
  /// memory, measured apart from the plan's.
  void prime(int64_t step);
  /// Where the data stands before step `step`, for a checkpoint (it follows from the step; kept to
  /// check that a resumed run reads the same).
  nlohmann::json position(int64_t step) const;
  /// A note when a checkpoint's `position` came from another dataset or seed ("" if not).
  std::string differsFrom(const nlohmann::json &position) const;
  /// The inputs it binds (the dataset's, the next tokens', the noise).
  std::vector<std::string> boundInputs() const;
  /// One line: what is read, how many samples and classes, steps per epoch.
  std::string describe() const;

private:
  /// A 1-D integer .npy is a token stream: sample i is the window of the plan's sequence length T
  /// at i*T; the first [B, T] input of its type takes it and a second such input (a language
  /// model's targets) the window shifted by one token. False when the file is not one.
  bool openTokens(const std::string &names, const std::vector<std::string> &inputs, const std::set<std::string> &bound);
  void bindTokens(int64_t step);
  void bindNoise(int64_t step);

  const Plan &plan_;
  Trainer &trainer_;
  DataOptions options_;
  std::string input_;                // the input the dataset feeds
  std::string targets_;              // a token stream's next-token input
  int64_t sequence_ = 0;             // a token stream's window
  std::vector<std::string> noise_;   // the inputs of per-step uniform draws
  std::vector<std::pair<int64_t, int64_t>> rows_; // this rank's rows of each microbatch
  int64_t size_ = 0, globalBatch_ = 0, classes_ = 0, imageSize_ = 0, next_ = -1;
  bool reads_ = true; // this rank's programs read the dataset's input
  bool readsTargets_ = false;
  std::unique_ptr<data::ImageLoader> images_;
  std::unique_ptr<data::GlobalSampler> sampler_; // a .npy's order
  HostTensor samples_; // a .npy dataset, whole
  double lastWait_ = 0;
};

} // namespace cpc

#endif
