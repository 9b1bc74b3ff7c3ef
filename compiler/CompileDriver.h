//===- CompileDriver.h - a model file to a plan file: what `cpc compile` does -===//
//
// The tool parses its flags into a CompileRequest; everything after that lives here: the
// training recipe from the config file and the flags, the registered pipeline and its options
// (checked by the pipeline's own check, spelled as the flags and keys the user gave), the
// pipeline schedule, the plan, its reports.
//
#ifndef CPC_COMPILER_COMPILEDRIVER_H
#define CPC_COMPILER_COMPILEDRIVER_H

#include "compiler/ImportCache.h"
#include "compiler/PlanBuilder.h"
#include "dialects/cpc/CpcDialect.h"
#include "frontends/onnx/OnnxImporter.h"
#include "runtime/PipelineSchedule.h"

#include <cstdint>
#include <memory>
#include <optional>
#include <ostream>
#include <stdexcept>
#include <string>
#include <vector>

namespace cpc {

/// A request that cannot be compiled as asked (flags that contradict each other or the config,
/// a layout the model does not fit): one line, exit code 1.
struct CompileRequestError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

/// What `cpc compile` was asked for, as given: an option left unset (nullopt, empty) is taken
/// from the config file, else its default.
struct CompileRequest {
  std::string model, output;
  std::optional<PlanMode> mode;            // unset: train when the graph returns a scalar loss
  std::string configPath;                  // --config
  std::vector<std::string> overrides;      // --set KEY=VALUE, in order
  int64_t dataParallel = 1;                // --dp
  int64_t zeroStage = 0;                   // --zero
  std::optional<int64_t> tensorParallel;   // --tp (parallel.tensor.size)
  std::optional<TensorParallelMode> tensorMode; // --tp-mode (parallel.tensor.mode)
  std::optional<int64_t> tensorDepth;      // --tp-depth (parallel.tensor.depth)
  bool sequenceParallel = false;           // --sp
  bool tensorParallelSearch = false;       // --tp-search
  std::optional<int64_t> deviceMemory;     // --device-memory BYTES
  std::vector<std::string> shardRules;     // --shard REGEX=SPEC
  std::optional<int64_t> pipelineStages;   // --pp (parallel.pipeline)
  std::optional<int64_t> microbatches;     // --microbatches (NUM_MICRO_BATCHES)
  std::optional<int64_t> seed;             // --seed (the config's `seed`)
  bool syncBatchNorm = false;              // --sync-bn: BatchNorm statistics over all dp ranks
  std::optional<int64_t> virtualStages;    // --virtual-stages
  std::optional<PipelineScheduleKind> schedule; // --schedule (training default: 1f1b)
  std::string pipelineSplit, debugSchedule; // --pp-split, --debug-schedule
  std::optional<Precision> precision;      // --precision (fp16.mode / precision)
  std::optional<RecomputeMode> recompute;  // --recompute (training)
  int64_t recomputeBytes = 0; // --recompute auto: activation bytes per microbatch to free (the driver's search sets it)
  std::string profilePath;                 // --profile: the cost profile for stage cuts, the search, the plan
  ImportOptions import;
  std::shared_ptr<ImportCache> importCache; // set: imports come from (and go to) it (cpc plan)
  PlanOptions plan; // device, inPlace, checkSchedule, syntheticParameters; the rest is derived
  // Reports.
  bool dumpSharding = false, printPipeline = false, timing = false;
  bool explainSharding = false;            // cpc plan --explain: the search's choices and the variables' layouts
  bool quiet = false; // no notes or warnings on stderr (cpc plan compiles many layouts)
  bool parallelPasses = true; // function-level passes on several threads (not when plans compile at once)
  // The IR verified after every pass; otherwise once, after the pipeline (cpc plan's layout
  // compiles: a ninth of their time on MAE ViT-L; the compile of the layout it picks verifies each).
  bool verifyEachPass = true;
  std::string dumpIrPath;
};

/// Compiles `request.model` into the plan file `request.output`, printing the reports asked
/// for and a summary to `out` (the per-pass notes and --timing go to stderr). Throws
/// CompileRequestError for a request that cannot be compiled, other exceptions for bad files.
void compileModel(const CompileRequest &request, std::ostream &out);

/// What `cpc plan` needs to know of a model before compiling any layout of it.
struct ModelSummary {
  PlanMode mode;          // the request's own, else training when the model returns a scalar loss
  double runSeconds = 0;  // one run of the model on one rank (and its backward when training),
                          // as cpc-pipeline-stages estimates it under the request's profile
};
ModelSummary summarizeModel(const CompileRequest &request);

/// The plan compileModel would write for `request` (reports to `out`), not written: its
/// blob stays pieces made on demand, so building it reads no weights.
Plan compilePlan(const CompileRequest &request, std::ostream &out);

/// Parses --debug-schedule's "R=F0.0,B0.0;R2=..." into `schedule` (rank R's action list
/// replaced), then re-validates it.
void replaceScheduleActions(PipelineSchedule &schedule, const std::string &spec);

} // namespace cpc

#endif
