//===- Microbatches.h - what the trainer and the inference runner share ---===//
//
// Both drive a plan's programs over microbatches: a global batch cut into microbatches and, within
// each, into the blocks of the ranks that split the batch (dp); and, with pipeline stages, one
// rank's schedule of forward (and backward) actions, whose values handed between the rank's own
// programs are kept per microbatch until the program that reads them runs.
//
#ifndef CPC_RUNTIME_MICROBATCHES_H
#define CPC_RUNTIME_MICROBATCHES_H

#include "runtime/Communicator.h"
#include "runtime/Executor.h"
#include "runtime/PipelineSchedule.h"

#include <functional>
#include <map>
#include <string>
#include <vector>

namespace cpc {

/// The input of `plan` named `name` that `isBatchInput` accepts (the first), or a RuntimeError
/// listing the names of those it accepts.
const NamedBuffer &findBatchInput(const Plan &plan, const std::string &name,
                                  const std::function<bool(const NamedBuffer &)> &isBatchInput);

/// `global` (dim 0: `microbatches` microbatches of `blocks` blocks of `local`'s rows) cut into
/// this rank's block of every microbatch: microbatch m is rows [m*M, (m+1)*M), and the rank
/// with batch index `index` keeps its contiguous share. Throws RuntimeError naming input `name`
/// when dtype or shape disagree.
std::vector<HostTensor> sliceBatch(const std::string &name, const HostTensor &global, const BufferDesc &local,
                                   int64_t microbatches, int64_t blocks, int64_t index);

/// Runs one rank's pipeline actions on its executor, handing values between its own programs.
class PipelineActions {
public:
  PipelineActions(const Plan &plan, Executor &executor, int rank, Communicator *comm)
      : plan_(plan), exec_(executor), rank_(rank), comm_(comm) {}
  /// Runs `actions` in order: for each, `bindMicrobatch(m)` binds its data, the hand-overs it
  /// reads are bound, its program runs, what it hands over is kept, and `onOutput(program,
  /// microbatch, output)` sees every other output of the program.
  void run(const std::vector<PipelineAction> &actions, const std::function<void(int64_t)> &bindMicrobatch,
           const std::function<void(const RankProgram &, int64_t, const NamedBuffer &)> &onOutput);

private:
  std::vector<uint8_t> spareBytes(size_t bytes);
  const Plan &plan_;
  Executor &exec_;
  int rank_;
  Communicator *comm_;
  std::map<std::pair<int64_t, int64_t>, HostTensor> handOver_; // (channel, microbatch) -> value
  std::vector<std::vector<uint8_t>> spare_; // memory of hand-overs already bound
};

} // namespace cpc

#endif
