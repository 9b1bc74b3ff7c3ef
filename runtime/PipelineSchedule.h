//===- PipelineSchedule.h - each pipeline rank's ordered list of actions ----===//
//
// A pipelined training step runs, on each pipeline rank, an ordered list of actions: the
// forward or the backward program of one model chunk for one microbatch; then the rank's
// update. A pipelined inference run has forward actions alone (the `forward` schedule). The compiler computes the lists (GPipe, 1F1B, interleaved 1F1B) and stores them in
// the plan; the runtime executes its rank's list; the schedule check (ScheduleCheck.h) expands
// the lists into every rank's communication and proves that no rank can wait forever.
// Chunk c runs on pipeline rank c mod P; a rank's chunks are c = r, r + P, ... (interleaved).
//
#ifndef CPC_RUNTIME_PIPELINESCHEDULE_H
#define CPC_RUNTIME_PIPELINESCHEDULE_H

#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace cpc {

enum class PipelineScheduleKind { GPipe, OneFOneB, Interleaved, Forward };
/// "gpipe", "1f1b", "interleaved", "forward"; parse throws RuntimeError on anything else.
const char *scheduleName(PipelineScheduleKind kind);
PipelineScheduleKind parseScheduleName(const std::string &name);

struct PipelineAction {
  bool backward = false;
  int64_t chunk = 0;
  int64_t microbatch = 0;
  bool operator==(const PipelineAction &o) const {
    return backward == o.backward && chunk == o.chunk && microbatch == o.microbatch;
  }
};

struct PipelineSchedule {
  PipelineScheduleKind kind = PipelineScheduleKind::OneFOneB;
  int64_t stages = 1;        // P: pipeline ranks
  int64_t virtualStages = 1; // V: chunks per rank (interleaved)
  int64_t microbatches = 1;  // M
  std::vector<std::vector<PipelineAction>> actions; // per pipeline rank, in order

  int64_t chunks() const { return stages * virtualStages; }
  /// Whether the actions run forward programs alone (inference) and no update follows.
  bool forwardOnly() const { return kind == PipelineScheduleKind::Forward; }
  /// The idle share of a rank with equal chunk costs: (P-1)/(M+P-1), interleaved (P-1)/(V*M+P-1).
  double bubbleFraction() const;
  /// The most microbatches whose activations rank `r` holds at once (forward done, backward not).
  int64_t peakInFlight(int64_t rank) const;
  nlohmann::json toJson() const;
  /// Reads toJson's form; throws RuntimeError on a malformed or inconsistent schedule.
  static PipelineSchedule fromJson(const nlohmann::json &j);
  /// One line per rank: "rank 0: F0.0 F0.1 B0.0 ..." (F/B chunk.microbatch).
  std::string format() const;

private:
  static PipelineSchedule parse(const nlohmann::json &j);
};

struct Plan;
/// The pipeline schedule of `plan` (its training or inference metadata's), or nullopt without
/// pipeline stages. Throws RuntimeError on a malformed one.
std::optional<PipelineSchedule> planPipelineSchedule(const Plan &plan);

/// The schedule `kind` for P stages, V chunks per rank and M microbatches. GPipe: every
/// forward, then every backward. Forward (inference): every forward, in microbatch order. 1F1B: min(P - r - 1, M) warm-up forwards on rank r, then one
/// forward and one backward in turn, then the remaining backwards. Interleaved (Megatron): V
/// chunks per rank, microbatches in groups of P, warm-up (P - r - 1) * 2 + (V - 1) * P; needs
/// M % P == 0 and V >= 2. Throws RuntimeError (naming the flag) on an impossible combination.
PipelineSchedule buildPipelineSchedule(PipelineScheduleKind kind, int64_t stages, int64_t virtualStages,
                                       int64_t microbatches);

} // namespace cpc

#endif
