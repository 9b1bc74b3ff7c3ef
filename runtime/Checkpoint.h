//===- Checkpoint.h - sharded training checkpoints that reshard on load ---===//
//
// A checkpoint is a directory `step-NNNNNNNN` under the checkpoint root: one `rank-RRRRR.bin`
// per rank that wrote something and one `metadata.json`. Every parameter and optimizer state is
// stored once, whole and in the model's element order (the layout-independent form), written by
// one of the ranks that hold it (the holders take turns, so the bytes spread over the ranks).
// Loading hands every rank the block its own plan asks for: the same checkpoint resumes on
// any layout (dp, tp, pp, ZeRO stage, rank count) whose variables have the same names, types
// and shapes.
//
// Saves are atomic: the ranks write into `.incomplete-step-NNNNNNNN`, fsync their files, and
// rank 0 writes the metadata last and renames the directory; a crash before the rename leaves
// the previous checkpoint the newest complete one. Loading checks every byte against the
// metadata's checksums before it sets anything: a corrupt checkpoint is refused, never half
// loaded.
//
#ifndef CPC_RUNTIME_CHECKPOINT_H
#define CPC_RUNTIME_CHECKPOINT_H

#include "runtime/Communicator.h"
#include "runtime/Executor.h"
#include "runtime/Plan.h"
#include "runtime/TensorIO.h"

#include <nlohmann/json.hpp>

#include <string>
#include <vector>

namespace cpc {

/// Where a training run stands: what a resumed run continues from.
struct TrainingPosition {
  int64_t step = 0;           // optimizer steps run (the next step's 0-based index)
  int64_t optimizerSteps = 0; // updates applied (AdamW's step count; fp16 skips keep it)
  int64_t skippedSteps = 0;
  nlohmann::json data = nlohmann::json::object(); // the data reader's position (epoch, sample)
};

/// Writes a checkpoint of step `position.step` under `root` (created if missing); every rank of
/// `comm` calls it together. Keeps the newest `keep` complete checkpoints and removes the older
/// ones. Returns the checkpoint's directory. Throws RuntimeError naming the path.
std::string saveCheckpoint(const Plan &plan, Executor &executor, Communicator &comm, const std::string &root,
                           const TrainingPosition &position, int keep = 2);

/// The checkpoint `path` names: `path` itself when it holds a metadata.json, else the newest
/// complete `step-*` directory under it. Throws RuntimeError when there is none.
std::string findCheckpoint(const std::string &path);

/// One variable of a checkpoint, read back whole.
struct CheckpointVariable {
  std::string name;
  bool parameter = false; // a model parameter (else optimizer or loss-scaler state)
  bool trainable = false;
  std::string role;       // a state's role (exp_avg, ...), "" for a parameter
  HostTensor value;       // whole, in the model's element order
};

/// A checkpoint's metadata, checked (format, version, files and entries). Throws RuntimeError
/// naming the file.
nlohmann::json readCheckpointMetadata(const std::string &dir);

/// Loads checkpoint `path` (see findCheckpoint) into this rank's variables, resharding to the
/// plan's layout, and returns its position. Every variable the rank holds must be in the
/// checkpoint with the same type and shape (gradient accumulators may be missing: they start
/// at zero each step). Nothing is set unless everything reads back intact. `notes` gets one line
/// naming the checkpoint's variables this plan does not use, if any.
TrainingPosition loadCheckpoint(const Plan &plan, Executor &executor, int rank, const std::string &path,
                                std::string *notes = nullptr);

/// Writes the parameters of checkpoint `path` (see findCheckpoint) to a safetensors file under
/// the model's own names (the ONNX initializers', which are PyTorch's state-dict keys), whole
/// and in the model's element order; with `trainableOnly`, frozen ones are left out. Returns how
/// many tensors it wrote. Throws RuntimeError naming the file.
int exportCheckpointWeights(const std::string &path, const std::string &output, bool trainableOnly = false);

} // namespace cpc

#endif
