//===- InferenceRunner.h - drives an inference plan over its ranks --------===//
//
// An inference plan runs the model's forward on a global batch of `microbatches` microbatches:
// each data-parallel rank reads its block of every microbatch, the tensor-parallel ranks of a
// block read the same rows, and with pipeline stages each rank runs its stage's forward
// programs in the schedule's order. The programs return their outputs whole (the compiler
// gathers them); the runner collects them per microbatch on the ranks that compute them and
// broadcasts them so that every rank holds the global outputs.
//
#ifndef CPC_RUNTIME_INFERENCERUNNER_H
#define CPC_RUNTIME_INFERENCERUNNER_H

#include "runtime/Communicator.h"
#include "runtime/Executor.h"
#include "runtime/Microbatches.h"

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace cpc {

class InferenceRunner {
public:
  /// `plan` must be an inference plan; `executor` runs it as rank `rank`; outputs move between
  /// ranks through `control` (null on one rank).
  InferenceRunner(const Plan &plan, Executor &executor, int rank = 0, Communicator *control = nullptr);

  /// Binds input `name` from the global batch (dim 0: microbatch x microbatches samples).
  /// Throws RuntimeError naming the input and the expected shape.
  void setBatchInput(const std::string &name, const HostTensor &global);
  /// Binds the inputs without setBatchInput to deterministic synthetic global batches (floats
  /// uniform in [0, 1) from the input's name, integers zero: the same values on every layout);
  /// returns their names.
  std::vector<std::string> useSyntheticData();
  /// Runs the forward of every microbatch once.
  void run();
  /// The model's outputs, in the plan's order.
  const std::vector<std::string> &outputNames() const { return outputNames_; }
  /// Output `name` of the last run, on every rank: the microbatches' values concatenated along
  /// dim 0 (a scalar output is one value per microbatch, [M], when there are several).
  HostTensor output(const std::string &name);

  int64_t globalBatch() const { return microbatch_ * microbatches_; }

private:
  bool isBatchInput(const NamedBuffer &in) const;
  void bindMicrobatch(int64_t m);
  /// Keeps output `out` of program `p` for microbatch `m` (on the ranks that compute it).
  void collect(const RankProgram &p, int64_t m, const NamedBuffer &out);
  /// The lowest world rank whose programs produce output `name`.
  int producerOf(const std::string &name) const;

  const Plan &plan_;
  Executor &exec_;
  int rank_;
  Communicator *control_;
  int64_t microbatch_ = 0, microbatches_ = 1, batchBlocks_ = 1, batchIndex_ = 0;
  const RankProgram *program_ = nullptr; // the program of phase infer (no pipeline)
  std::optional<PipelineSchedule> schedule_;
  std::unique_ptr<PipelineActions> pipeline_;
  std::vector<std::string> outputNames_;
  std::map<std::string, std::vector<HostTensor>> slices_;   // input -> one tensor per microbatch
  std::map<std::string, std::vector<HostTensor>> results_;  // output -> one tensor per microbatch
};

} // namespace cpc

#endif
