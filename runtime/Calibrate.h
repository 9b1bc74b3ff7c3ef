//===- Calibrate.h - measuring this machine's cost profile ----------------===//
//
// `cpc calibrate` (through `cpc-run --calibrate`): every rank of the world times the collectives
// the plans use (all_reduce, all_gather, reduce_scatter, all_to_all, broadcast_from, send) at a
// few sizes and fits each a latency and a bandwidth over the bytes the counting communicator
// counts; then every rank at once (sharing memory bandwidth and caches as a plan's ranks do)
// times the CPU kernels the cost classes stand for: GEMMs by size, attention, AdamW and an
// elementwise add (memory), on its threads, and, given sample plans, every op of their steps by
// its size; the rates are averaged over the ranks. The result is a CostProfile
// (runtime/CostProfile.h).
//
#ifndef CPC_RUNTIME_CALIBRATE_H
#define CPC_RUNTIME_CALIBRATE_H

#include "runtime/Communicator.h"
#include "runtime/CostProfile.h"
#include "runtime/Plan.h"

#include <ostream>
#include <string>
#include <vector>

namespace cpc {

struct CalibrationOptions {
  int threads = 1;       // kernel threads per rank, as cpc-run --threads
  bool quick = false;    // fewer sizes and shorter timings (tests)
  std::ostream *log = nullptr; // one line per measurement (rank 0)
  // One-rank plans whose steps are run (by every rank) to measure each op's own rate by its size: the
  // memory-bound ops differ far more than one rate for their class says (GELU's gradient does
  // math per byte; a reduction or a gather reads strided).
  std::vector<const Plan *> plans;
};

/// Every rank of `comm` calls it together; returns the profile (the same on every rank).
CostProfile calibrate(Communicator &comm, const CalibrationOptions &options);

/// `cpc calibrate`'s work on each rank: every rank reads the sample plans at `planPaths` (into
/// options.plans) and measures, and rank 0 writes the profile as JSON to `path` and logs
/// how long it took. Throws RuntimeError when a plan cannot be read or the file written.
void calibrateIntoFile(Communicator &comm, CalibrationOptions options, const std::vector<std::string> &planPaths,
                       const std::string &path);

} // namespace cpc

#endif
