//===- Trainer.h - drives a training plan: microbatches, LR, metrics ------===//
#ifndef CPC_RUNTIME_TRAINER_H
#define CPC_RUNTIME_TRAINER_H

#include "runtime/Communicator.h"
#include "runtime/Executor.h"
#include "runtime/Microbatches.h"
#include "runtime/PipelineSchedule.h"
#include "runtime/TrainRecipe.h"

#include <map>
#include <memory>
#include <optional>
#include <string>

namespace cpc {

struct StepMetrics {
  int64_t step = 0;        // 1-based optimizer step
  double loss = 0;         // mean over the step's microbatches (the global-batch loss)
  double lr = 0;
  double gradNorm = 0;     // before clipping
  double lossScale = 1;    // the loss scale this step used (fp16; 1 otherwise)
  bool skipped = false;    // an overflow skipped the update (fp16)
  int64_t skippedSteps = 0; // skipped so far, this one included
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
  /// collectives go through `comm` (null on one rank). Values the host exchanges (a pipeline's
  /// loss) go through `control` (default: `comm`; a GPU plan's comm moves device memory only).
  Trainer(const Plan &plan, Executor &executor, int rank = 0, Communicator *comm = nullptr,
          Communicator *control = nullptr);

  /// Binds batch input `name` from a tensor holding the global batch; dim 0 must be
  /// microbatch x gradient_accumulation. Each data-parallel rank keeps its rows of every
  /// microbatch. Throws RuntimeError.
  void setBatchInput(const std::string &name, HostTensor global);
  /// This rank's rows of batch input `name`'s global batch, one [begin, end) per microbatch: what
  /// setBatchInput keeps of a global tensor.
  std::vector<std::pair<int64_t, int64_t>> batchRows(const std::string &name) const;
  /// Binds batch input `name` from this rank's rows (one tensor per microbatch, each the rows
  /// batchRows gives), for the steps from now on (a data reader's next step).
  void setMicrobatchSlices(const std::string &name, std::vector<HostTensor> slices);
  /// The local (one rank's, one microbatch's) buffer of batch input `name`.
  const BufferDesc &batchInputBuffer(const std::string &name) const;
  /// Uses deterministic synthetic data for batch inputs without setBatchInput.
  void useSyntheticData();

  /// Runs optimizer step `index` (0-based): every microbatch, then the update.
  StepMetrics step(int64_t index);

  const TrainRecipe &recipe() const { return recipe_; }
  /// Updates applied so far (AdamW's step count) and fp16 steps skipped: what a checkpoint keeps.
  int64_t optimizerSteps() const { return optimizerSteps_; }
  int64_t skippedSteps() const { return skippedSteps_; }
  /// The LR schedule's epoch length when a dataset sets it (its size over the global batch).
  void setStepsPerEpoch(int64_t steps) { recipe_.stepsPerEpoch = steps; }
  /// Continues from a checkpoint's counters.
  void restoreCounters(int64_t optimizerSteps, int64_t skippedSteps) {
    optimizerSteps_ = optimizerSteps;
    skippedSteps_ = skippedSteps;
  }
  int64_t microbatch() const { return microbatch_; }

private:
  void bindMicrobatch(int64_t m);
  /// This rank's pipeline actions for one step (then its update); returns the summed loss of
  /// the microbatches (0 on ranks without the loss).
  double runPipeline();
  /// `value` from world rank `root` on every rank (the loss and norm of a pipeline's last stage).
  double fromRank(double value, int root);
  /// The lowest world rank whose programs produce output `name`.
  int producerOf(const std::string &name) const;
  /// Binds `value` to every input the runtime computes as `kind`.
  void bindRuntimeInput(RuntimeInputKind kind, float value);

  const Plan &plan_;
  Executor &exec_;
  Communicator *control_ = nullptr;
  TrainRecipe recipe_;
  int64_t microbatch_ = 0;   // samples per microbatch, all ranks together
  int64_t batchBlocks_ = 1; // shares of each microbatch (dp x tp_dep x tp_row)
  int rank_ = 0;
  int64_t batchIndex_ = 0;   // which of the batchBlocks_ shares of a microbatch this rank reads
  Communicator *comm_ = nullptr;
  std::string gradProgram_;  // the program of phase train_step (one microbatch) or accumulate
  std::string applyProgram_; // the program of phase apply (with gradient accumulation)
  std::map<std::string, std::vector<HostTensor>> slices_; // input -> one tensor per microbatch
  // Pipeline parallelism: the schedule, this rank's stage, its actions' runner (which keeps the
  // values its programs hand over).
  std::optional<PipelineSchedule> schedule_;
  int64_t stage_ = 0;
  std::unique_ptr<PipelineActions> pipeline_;
  int lossRank_ = 0, normRank_ = 0, scaleRank_ = 0;
  bool lossScaling_ = false;   // the update returns loss_scale and overflow (fp16)
  int64_t optimizerSteps_ = 0; // updates applied: AdamW's step count, which a skipped step keeps
  int64_t skippedSteps_ = 0;
  /// The update's rank-0 output `name`: from `program`, or from world rank `root` with a pipeline.
  double updateOutput(const std::string &name, const std::string &program, int root);
};

} // namespace cpc

#endif
