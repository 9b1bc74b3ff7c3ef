//===- LayoutEstimate.cpp -------------------------------------------------===//
#include "compiler/LayoutEstimate.h"

#include "passes/Passes.h"
#include "runtime/Traffic.h"

#include <algorithm>

namespace cpc {
namespace {

/// The bucket sizes the training pipeline's cpc-bucket-all-reduce and cpc-bucket-all-gather run
/// with (their defaults): one call each.
const double kReduceBucketBytes = (double)CpcBucketAllReduceOptions().bucketBytes;
const double kGatherBucketBytes = (double)CpcBucketAllGatherOptions().bucketBytes;

/// The data-parallel collectives of a step as cpc's ZeRO stages build them: 0 all-reduces the
/// gradients; 1 also all-gathers the updated parameter blocks; 2 reduce-scatters the gradients
/// instead; 3 gathers the parameters in every microbatch's forward and backward.
LayoutEstimate dataParallelCost(const MeshCost &mesh, int64_t zero, const CostProfile &profile) {
  LayoutEstimate e;
  int n = (int)mesh.dp;
  if (n < 2 || !mesh.training)
    return e;
  double gradients = (double)mesh.states.gradients, parameters = (double)mesh.states.parameters;
  auto collective = [&](OpKind kind, double counted, double bufferBytes, double bucketBytes, double times) {
    double calls = std::max(1.0, bufferBytes / bucketBytes) * times;
    e.communication += calls * profile.collectiveSeconds(opName(kind), n, counted / calls * times);
    e.bytes += counted * times;
  };
  auto blocks = [&](double bytes) { return (double)traffic::blockExchange((int64_t)(bytes / n), n); };
  if (zero <= 1)
    collective(OpKind::AllReduce, (double)traffic::allReduce((int64_t)gradients, n), gradients, kReduceBucketBytes, 1);
  else
    collective(OpKind::ReduceScatter, blocks(gradients), gradients, kReduceBucketBytes, 1);
  if (zero == 1 || zero == 2)
    collective(OpKind::AllGather, blocks(parameters), parameters, kGatherBucketBytes, 1);
  if (zero == 3)
    collective(OpKind::AllGather, blocks(parameters), parameters, kGatherBucketBytes, 2.0 * (double)mesh.microbatches);
  return e;
}

/// Model-state bytes per rank at ZeRO stage `zero`, from the mesh's at stage 0.
double stateBytes(const ModelStateBytes &m, int64_t dp, int64_t zero) {
  auto divided = [&](int64_t bytes, int64_t fromStage) { return (double)bytes / (zero >= fromStage ? (double)dp : 1.0); };
  return divided(m.parameters, 3) + divided(m.gradients, 2) + divided(m.optimizerStates, 1) +
         divided(m.accumulators, 2) + (double)m.frozenParameters;
}

} // namespace

LayoutEstimate estimateLayout(const MeshCost &mesh, int64_t zero, PipelineScheduleKind schedule,
                              const CostProfile &profile) {
  LayoutEstimate e = mesh.step;
  LayoutEstimate have = dataParallelCost(mesh, 0, profile), want = dataParallelCost(mesh, zero, profile);
  e.communication = std::max(0.0, e.communication + want.communication - have.communication);
  e.bytes = std::max(0.0, e.bytes + want.bytes - have.bytes);
  double states0 = stateBytes(mesh.states, mesh.dp, 0), states = stateBytes(mesh.states, mesh.dp, zero);
  double rest = std::max(0.0, (double)mesh.step.peakBytes - states0); // activations, inputs, scratch
  if (mesh.pp > 1 && schedule == PipelineScheduleKind::GPipe) // every microbatch in flight, not pp
    rest *= (double)mesh.microbatches / (double)mesh.pp;
  e.peakBytes = (int64_t)(states + rest);
  return e;
}

} // namespace cpc
