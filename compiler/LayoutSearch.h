//===- LayoutSearch.h - the whole layout by search: what `cpc plan` does --===//
//
// For N devices every layout cpc can build is enumerated: the meshes dp x tp x pp whose product
// is N (tensor parallelism 1d, and 2d / 3d where tp is a square / cube), ZeRO stages 0-3 over
// dp, the pipeline schedules (1F1B, GPipe), and the precisions and activation recompute modes
// asked for. Each is compiled as
// `cpc compile` would (same global batch: the model's batch times the microbatches, as
// gradient accumulation without stages) and priced by the plan's own prediction under the cost
// profile: step time (compute, communication, pipeline idle on the slowest rank), peak memory
// per rank, bytes sent per step. Layouts are ranked by step time; those over the memory budget
// or that do not compile (a dim that does not divide) are listed with why. Deterministic.
//
#ifndef CPC_COMPILER_LAYOUTSEARCH_H
#define CPC_COMPILER_LAYOUTSEARCH_H

#include "compiler/CompileDriver.h"

#include <optional>
#include <ostream>
#include <string>
#include <vector>

namespace cpc {

/// A layout fits a memory budget when its predicted peak does with this share to spare: what a
/// rank holds that the prediction does not count (the heap's own growth, the libraries'
/// allocations), measured at most 1.3% of the peak over bench/layout_search.py's layouts.
constexpr double kPeakMargin = 0.02;

struct LayoutSearchRequest {
  CompileRequest base;        // the model, config, profile and flags every layout shares
  int64_t devices = 1;
  int64_t deviceMemory = 0;   // bytes per rank the predicted peak, plus kPeakMargin, may reach (0: no budget)
  std::vector<Precision> precisions = {Precision::FP32};
  std::vector<RecomputeMode> recomputes = {RecomputeMode::None}; // training only (inference keeps nothing)
  // Up to `exhaustiveUpTo` candidates (or with `exhaustive`) each is compiled; beyond, each mesh
  // is compiled once (ZeRO 0, 1F1B), its other layouts estimated from it (LayoutEstimate.h),
  // and the `exactLayouts` best compiled.
  bool exhaustive = false;
  size_t exhaustiveUpTo = 24;
  size_t exactLayouts = 4;
};

struct RankedLayout {
  std::string name;                // "dp2 zero1", "tp2", "pp2 1f1b x4", "dp2 tp2 2d"
  std::vector<std::string> flags;  // the cpc compile flags that build it
  CompileRequest request;
  bool valid = false;
  std::string rejected;            // why not, when not valid
  double seconds = 0, compute = 0, communication = 0, idle = 0;
  int64_t peakBytes = 0;
  double bytesPerStep = 0;         // sent by the slowest rank
  bool estimated = false;          // priced from its mesh's compile, not compiled itself
};

/// Every candidate layout for `request.devices`, compiled (or estimated) and priced; valid ones
/// first, compiled before estimated, fastest first (ties: fewer bytes sent, then a lower peak,
/// then the order of enumeration), then the rejected ones.
std::vector<RankedLayout> searchLayouts(const LayoutSearchRequest &request);

/// The ranked table (and the rejections with their reasons), one layout per line.
void printLayoutTable(const std::vector<RankedLayout> &layouts, std::ostream &out);

} // namespace cpc

#endif
