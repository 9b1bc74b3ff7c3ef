//===- LayoutEstimate.h - a layout's step time and peak from its mesh's compile -===//
//
// `cpc plan` on many devices has hundreds of layouts and a compile of a large model takes
// seconds. Layouts on one mesh (dp x tp x pp, tp mode, precision) differ only in the ZeRO stage
// and the pipeline schedule, which change a few collectives and what memory holds, not the
// program's work: one compile per mesh (ZeRO 0, 1F1B) prices its other layouts. The difference
// of their data-parallel collectives (Traffic.h's bytes at the profile's rates, as cpc's ZeRO
// stages build them) is added to the mesh's step, their model states replace the mesh's, and
// GPipe keeps every microbatch's activations in flight where 1F1B keeps pp of them. The search
// compiles the best estimated layouts exactly; the rest keep their estimates.
//
#ifndef CPC_COMPILER_LAYOUTESTIMATE_H
#define CPC_COMPILER_LAYOUTESTIMATE_H

#include "runtime/CostProfile.h"
#include "runtime/ModelState.h"
#include "runtime/PipelineSchedule.h"

#include <cstdint>

namespace cpc {

struct LayoutEstimate {
  double compute = 0, communication = 0, idle = 0, bytes = 0;
  int64_t peakBytes = 0;
  double total() const { return compute + communication + idle; }
};

/// What the compile of a mesh (ZeRO 0; 1F1B with stages) predicts for its slowest rank.
struct MeshCost {
  LayoutEstimate step;
  ModelStateBytes states;            // per rank, ZeRO 0
  int64_t dp = 1, pp = 1, microbatches = 1;
  bool training = true;
};

/// The layout on that mesh with ZeRO stage `zero` and `schedule`.
LayoutEstimate estimateLayout(const MeshCost &mesh, int64_t zero, PipelineScheduleKind schedule,
                              const CostProfile &profile);

} // namespace cpc

#endif // CPC_COMPILER_LAYOUTESTIMATE_H
