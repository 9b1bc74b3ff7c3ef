//===- PeakMemory.cpp - what a plan's ranks hold beyond its buffers ----------===//
#include "compiler/PeakMemory.h"

#include "kernels/OpAttrs.h"
#include "kernels/OpKind.h"
#include "kernels/cpu/Kernel.h"

#include <algorithm>
#include <set>
#include <string>
#include <vector>

namespace cpc {

int64_t collectiveScratchBytes(const Plan &plan) {
  bool summing = false;
  int64_t interleave = 0; // an all-gather along an inner dim stacks the blocks in a temporary first
  std::set<std::vector<std::string>> allReduceGroups;
  int64_t sharedSegments = 0, peerPages = 0, peerArenas = 0;
  for (const RankProgram &p : plan.programs)
    for (const StepDesc &s : p.steps) {
      // The ring's two chunks (MpiCommunicator's scratch): an all-reduce among the ranks of
      // one node combines through shared memory instead (below), never there.
      summing |= hasTrait(s.op, PlanTrait::CombiningCollective) &&
                 !(s.op == OpKind::AllReduce && plan.device == DeviceKind::Cpu);
      if (s.op == OpKind::AllReduce && plan.device == DeviceKind::Cpu) {
        std::vector<std::string> axes = kernels::decodeOpAttrs(s.op, s.attrs).meshAxes;
        int64_t members = meshShardIndex(0, plan.meshShape, plan.meshAxes, axes).second, bytes = 0;
        bool inArena = members > 1;
        for (int b : s.inputs) {
          inArena &= plan.buffers[plan.rootOf(b)].kind == BufferKind::Arena;
          bytes += plan.buffers[b].bytes();
        }
        // Buckets in the shared arena are combined in place; others go through the group's
        // staging segment (a chunk per member), touched only then.
        if (members > 1 && !inArena && allReduceGroups.insert(axes).second)
          sharedSegments += members * kCollectiveChunkBytes;
        if (inArena) {
          peerPages += bytes / members * (members - 1);
          peerArenas = std::max(peerArenas, (members - 1) * p.arenaBytes);
        }
      }
      const int64_t dim = communicates(s.op) ? kernels::decodeOpAttrs(s.op, s.attrs).dim : 0;
      if (s.op == OpKind::ReduceScatter && dim > 0) // packed blocks of the input
        interleave = std::max<int64_t>(interleave, plan.buffers[s.inputs[0]].bytes());
      if (s.op == OpKind::AllToAll) // packed blocks out and in
        interleave = std::max<int64_t>(interleave, 2 * plan.buffers[s.inputs[0]].bytes());
      if (s.op == OpKind::AllGather && dim > 0) {
        const BufferDesc &out = plan.buffers[s.outputs[0]];
        int64_t outer = 1;
        for (int64_t d = 0; d < dim; ++d)
          outer *= out.shape[d];
        if (outer > 1)
          interleave = std::max<int64_t>(interleave, out.bytes());
      }
    }
  return (summing ? 2 * kCollectiveChunkBytes : 0) + interleave + sharedSegments + std::min(peerPages, peerArenas);
}

int64_t executorTableBytes(const Plan &plan, int rank) {
  auto heap = [](int64_t bytes) { return std::max<int64_t>(32, (bytes + 8 + 15) / 16 * 16); }; // glibc's chunks
  auto view = [&](int b) {
    size_t dims = plan.buffers[b].shape.size();
    return (int64_t)sizeof(TensorRef) + (dims ? heap(8 * (int64_t)dims) : 0);
  };
  int64_t bytes = 0;
  for (size_t b = 0; b < plan.buffers.size(); ++b)
    bytes += view((int)b);
  const int64_t perStep = sizeof(kernels::KernelContext) + sizeof(kernels::KernelFn) + sizeof(void *) +
                          sizeof(int64_t) + sizeof(double);
  for (const RankProgram &p : plan.programs) {
    if (!plan.runsOn(p, rank))
      continue;
    for (const StepDesc &s : p.steps) {
      bytes += perStep;
      for (const std::vector<int> *operands : {&s.inputs, &s.outputs}) {
        bytes += operands->empty() ? 0 : heap((int64_t)(operands->size() * sizeof(TensorRef)));
        for (int b : *operands)
          bytes += view(b) - (int64_t)sizeof(TensorRef);
      }
    }
  }
  return bytes;
}

} // namespace cpc
