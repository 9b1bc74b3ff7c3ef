//===- Trainer.h - drives a training plan: microbatches, LR, metrics ------===//
#ifndef CPC_RUNTIME_TRAINER_H
#define CPC_RUNTIME_TRAINER_H

#include "runtime/Communicator.h"
#include "runtime/Executor.h"
#include "runtime/TrainRecipe.h"

#include <map>
#include <string>

namespace cpc {

struct StepMetrics {
  int64_t step = 0;        // 1-based optimizer step
  double loss = 0;         // mean over the step's microbatches (the global-batch loss)
  double lr = 0;
  double gradNorm = 0;     // before clipping
  double seconds = 0;
  double samplesPerSecond = 0;
  int64_t peakBytes = 0;   // process max RSS so far
  nlohmann::json comm = nlohmann::json::object(); // collectives of this step (calls, bytes per rank)
  std::string commSummary; // the same, for the progress line
  nlohmann::json toJson() const;
};

class Trainer {
public:
  /// `plan` must be a training plan ("train" mode); `executor` runs it as rank `rank`, whose
  /// collectives go through `comm` (null on one rank).
  Trainer(const Plan &plan, Executor &executor, int rank = 0, Communicator *comm = nullptr);

  /// Binds batch input `name` from a tensor holding the global batch; dim 0 must be
  /// microbatch x gradient_accumulation. Each data-parallel rank keeps its rows of every
  /// microbatch. Throws RuntimeError.
  void setBatchInput(const std::string &name, HostTensor global);
  /// Uses deterministic synthetic data for batch inputs without setBatchInput.
  void useSyntheticData();

  /// Runs optimizer step `index` (0-based): every microbatch, then the update.
  StepMetrics step(int64_t index);

  const TrainRecipe &recipe() const { return recipe_; }
  int64_t microbatch() const { return microbatch_; }

private:
  void bindMicrobatch(int64_t m);
  /// Binds `value` to every input the runtime computes as `kind`.
  void bindRuntimeInput(RuntimeInputKind kind, float value);

  const Plan &plan_;
  Executor &exec_;
  TrainRecipe recipe_;
  int64_t microbatch_ = 0;   // samples per microbatch, all ranks together
  int64_t dataParallel_ = 1; // ranks splitting each microbatch
  int rank_ = 0;
  int64_t batchIndex_ = 0;   // which of the dataParallel_ shares of a microbatch this rank reads
  Communicator *comm_ = nullptr;
  std::string gradProgram_;  // the program of phase train_step (one microbatch) or accumulate
  std::string applyProgram_; // the program of phase apply (with gradient accumulation)
  std::map<std::string, std::vector<HostTensor>> slices_; // input -> one tensor per microbatch
};

} // namespace cpc

#endif
