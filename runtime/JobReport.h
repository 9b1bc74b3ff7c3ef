//===- JobReport.h - what a job prints: measured against predicted, traces --===//
//
// The lines cpc-run prints after a run, comparing what the rank measured with what the compiler
// predicted (peak memory, step time), the trace's communication and bubble shares, the per-op
// profile, and the final parameters written whole.
//
#ifndef CPC_RUNTIME_JOBREPORT_H
#define CPC_RUNTIME_JOBREPORT_H

#include "runtime/Communicator.h"
#include "runtime/Executor.h"
#include "runtime/MemoryProbe.h"
#include "runtime/Plan.h"
#include "runtime/Trace.h"

#include <string>
#include <vector>

namespace cpc {

/// Tensor memory this rank measured: on the CPU, resident growth since the probe started plus
/// what the executor reads in place from the plan's blob; on a GPU, the most device memory its
/// allocator held.
int64_t measuredPeakBytes(const Plan &plan, const Executor &executor, const MemoryProbe &probe);
/// The largest rank's measured peak less `outsidePlan` (this rank's memory that is not the
/// plan's: the data pipeline's), by a max all-reduce over `comm`'s world (every rank calls it):
/// the plan's predicted peak is its largest rank's too.
int64_t largestMeasuredPeak(const Plan &plan, const Executor &executor, const MemoryProbe &probe, Communicator *comm,
                            int64_t outsidePlan = 0);
/// "memory per rank: predicted peak P B, measured M B (...; +x%)", `measured` without the
/// `outsidePlan` bytes the line names (rank 0's data pipeline).
std::string memoryLine(const Plan &plan, int64_t measured, const MemoryProbe &probe, int64_t outsidePlan = 0);
/// The plan's predicted step time (its compile's cost profile), 0 when the plan has none.
double predictedStepSeconds(const Plan &plan);
/// "step time: measured X ms (median of N), predicted Y ms (+Z%, profile ...)".
std::string stepTimeLine(const Plan &plan, std::vector<double> seconds, const char *what);
/// Writes the ranks' trace to `path` (rank 0 merges it) and prints each rank's share of time in
/// communication and, for a pipeline, its idle share against the bubble formula.
void finishTrace(const Plan &plan, const std::string &path, const TraceRecorder &trace, Communicator &comm, bool quiet);
/// The time per op kind (or per op and shapes) of every run so far.
void printProfile(const Executor &executor, bool byShape);
/// The first `count` values of `t`, comma-separated ("..." when there are more).
std::string formatValues(const TensorRef &t, int64_t count);
/// Writes each parameter's final value, whole, as `outputDir`/NAME.npy (rank 0 writes; every
/// rank takes part in gathering the sharded ones; "" elsewhere).
void saveParameterFiles(const Plan &plan, Executor &executor, Communicator &comm, const std::string &outputDir);

} // namespace cpc

#endif
