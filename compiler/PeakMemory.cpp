//===- PeakMemory.cpp - what a plan's ranks hold beyond its buffers ----------===//
#include "compiler/PeakMemory.h"

#include "kernels/Float16.h"
#include "kernels/Kernel.h"
#include "kernels/OpAttrs.h"
#include "kernels/OpKind.h"
#include "kernels/cpu/Kernel.h"
#include "runtime/HostMemory.h"

#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <vector>

namespace cpc {

namespace {

/// Adds to `pages` (per member) the pages of an arena of `arenaBytes` that each member of an
/// in-place shared all-reduce of `s`'s buffers maps in every other member's copy: its block of
/// the bucket (the buffers in order, split as SharedAllReduce::blockOf), read first, so whole
/// fault-around windows of it (kFaultAroundBytes).
void addBlockPages(const Plan &plan, const StepDesc &s, int64_t arenaBytes, std::vector<std::set<int64_t>> &pages) {
  const int64_t pagesPerWindow = kFaultAroundBytes / kHostPageBytes;
  const int64_t arenaPages = (std::max<int64_t>(arenaBytes, kHostPageBytes) + kHostPageBytes - 1) / kHostPageBytes;
  const int64_t members = (int64_t)pages.size();
  auto elements = [&](int b) { return numElements(plan.buffers[b].shape); };
  int64_t elementSize = dtypeSize(plan.buffers[s.inputs[0]].dtype), length = 0;
  for (int b : s.inputs)
    length += elements(b);
  for (int64_t m = 0; m < members; ++m) {
    int64_t begin = m * length / members, end = (m + 1) * length / members, at = 0;
    for (int b : s.inputs) {
      int64_t n = elements(b), from = std::max(begin, at), to = std::min(end, at + n);
      if (from < to) {
        int64_t start = plan.buffers[plan.rootOf(b)].offset + (from - at) * elementSize;
        int64_t stop = start + (to - from) * elementSize;
        for (int64_t window = start / kFaultAroundBytes; window * kFaultAroundBytes < stop; ++window)
          for (int64_t page = window * pagesPerWindow; page < std::min((window + 1) * pagesPerWindow, arenaPages); ++page)
            pages[m].insert(page);
      }
      at += n;
    }
  }
}

} // namespace

int64_t collectiveScratchBytes(const Plan &plan) {
  bool summing = false;
  int64_t interleave = 0; // an all-gather along an inner dim stacks the blocks in a temporary first
  std::set<std::vector<std::string>> allReduceGroups;
  std::map<std::vector<std::string>, std::vector<std::set<int64_t>>> blockPages; // per group, per member
  int64_t sharedSegments = 0, peerArenas = 0;
  for (const RankProgram &p : plan.programs)
    for (const StepDesc &s : p.steps) {
      // The ring's two chunks (MpiCommunicator's scratch): an all-reduce among the ranks of
      // one node combines through shared memory instead (below), never there.
      // A reduce-scatter among them stages through that memory too.
      const bool cpuShared = plan.device == DeviceKind::Cpu && (s.op == OpKind::AllReduce || s.op == OpKind::ReduceScatter);
      summing |= hasTrait(s.op, PlanTrait::CombiningCollective) && !cpuShared;
      if (s.op == OpKind::ReduceScatter && plan.device == DeviceKind::Cpu) {
        std::vector<std::string> axes = kernels::decodeOpAttrs(s.op, s.attrs).meshAxes;
        int64_t members = meshShardIndex(0, plan.meshShape, plan.meshAxes, axes).second;
        if (members > 1 && allReduceGroups.insert(axes).second)
          sharedSegments += members * kCollectiveChunkBytes;
      }
      if (s.op == OpKind::AllReduce && plan.device == DeviceKind::Cpu) {
        std::vector<std::string> axes = kernels::decodeOpAttrs(s.op, s.attrs).meshAxes;
        int64_t members = meshShardIndex(0, plan.meshShape, plan.meshAxes, axes).second;
        bool inArena = members > 1;
        for (int b : s.inputs)
          inArena &= plan.buffers[plan.rootOf(b)].kind == BufferKind::Arena;
        // Buckets in the shared arena are combined in place; others go through the group's
        // staging segment (a chunk per member), touched only then.
        if (members > 1 && !inArena && allReduceGroups.insert(axes).second)
          sharedSegments += members * kCollectiveChunkBytes;
        if (inArena) {
          auto &pages = blockPages[axes];
          pages.resize(members);
          addBlockPages(plan, s, p.arenaBytes, pages);
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
  int64_t peerPages = 0;
  for (const auto &[axes, pages] : blockPages) {
    size_t most = 0;
    for (const std::set<int64_t> &own : pages)
      most = std::max(most, own.size());
    peerPages += (int64_t)(pages.size() - 1) * (int64_t)most * kHostPageBytes;
  }
  return (summing ? 2 * kCollectiveChunkBytes : 0) + interleave + sharedSegments + std::min(peerPages, peerArenas);
}

int64_t kernelHostBytes(const Plan &plan, int rank) {
  if (plan.device != DeviceKind::Cpu)
    return 0;
  const kernels::KernelRegistry &registry = kernels::KernelRegistry::cpu();
  int64_t widen = 0;
  kernels::KernelWorkspace kept;
  for (const RankProgram &p : plan.programs) {
    if (!plan.runsOn(p, rank))
      continue;
    for (const StepDesc &s : p.steps) {
      kernels::KernelContext ctx;
      ctx.op = s.op;
      bool any16 = false;
      for (auto [list, ids] : {std::pair{&ctx.inputs, &s.inputs}, std::pair{&ctx.outputs, &s.outputs}})
        for (int b : *ids) {
          const BufferDesc &d = plan.buffers[b];
          list->push_back(TensorRef{nullptr, d.dtype, d.shape});
          any16 |= is16BitFloat(d.dtype);
        }
      ctx.setAttrs(s.attrs);
      if (any16)
        widen = std::max(widen, registry.scratchBytes(s.op, ctx));
      kept.cover(registry.workspace(s.op, ctx));
    }
  }
  auto pages = [](int64_t bytes) { return (bytes + kHostPageBytes - 1) / kHostPageBytes * kHostPageBytes; };
  return widen + kept.heapBytes + pages(kept.packedA) + pages(kept.packedB);
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
