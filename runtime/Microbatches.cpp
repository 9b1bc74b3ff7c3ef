//===- Microbatches.cpp ---------------------------------------------------===//
#include "runtime/Microbatches.h"
#include "runtime/ScheduleCheck.h"

#include <set>

namespace cpc {

const NamedBuffer &findBatchInput(const Plan &plan, const std::string &name,
                                  const std::function<bool(const NamedBuffer &)> &isBatchInput) {
  for (const NamedBuffer &in : plan.inputs)
    if (in.name == name && isBatchInput(in))
      return in;
  std::set<std::string> names;
  for (const NamedBuffer &in : plan.inputs)
    if (isBatchInput(in))
      names.insert(in.name);
  std::string list;
  for (const std::string &n : names)
    list += (list.empty() ? "" : ", ") + n;
  throw RuntimeError("the plan has no input '" + name + "' (inputs: " + list + ")");
}

std::vector<HostTensor> sliceBatch(const std::string &name, const HostTensor &global, const BufferDesc &local,
                                   int64_t microbatches, int64_t blocks, int64_t index) {
  std::vector<int64_t> expected = local.shape, micro = local.shape;
  if (!expected.empty()) {
    micro[0] *= blocks;
    expected[0] = micro[0] * microbatches;
  }
  if (global.dtype != local.dtype || global.shape != expected)
    throw RuntimeError("input '" + name + "' expects the global batch " + dtypeName(local.dtype) +
                       shapeString(expected) + " (" + std::to_string(microbatches) + " microbatch" +
                       (microbatches > 1 ? "es" : "") + " of " + shapeString(micro) + "), got " +
                       dtypeName(global.dtype) + shapeString(global.shape));
  size_t localBytes = local.bytes();
  std::vector<HostTensor> slices;
  for (int64_t m = 0; m < microbatches; ++m) {
    HostTensor s{local.dtype, local.shape, {}};
    size_t begin = (m * blocks + index) * localBytes;
    s.data.assign(global.data.begin() + begin, global.data.begin() + begin + localBytes);
    slices.push_back(std::move(s));
  }
  return slices;
}

std::vector<uint8_t> PipelineActions::spareBytes(size_t bytes) {
  // Hand-overs come in a few sizes, again every microbatch: reuse memory rather than allocate
  // (and fault in) fresh pages each time.
  for (size_t i = 0; i < spare_.size(); ++i)
    if (spare_[i].size() == bytes) {
      std::vector<uint8_t> found = std::move(spare_[i]);
      spare_.erase(spare_.begin() + i);
      return found;
    }
  return std::vector<uint8_t>(bytes);
}

void PipelineActions::run(const std::vector<PipelineAction> &actions,
                          const std::function<void(int64_t)> &bindMicrobatch,
                          const std::function<void(const RankProgram &, int64_t, const NamedBuffer &)> &onOutput) {
  for (const PipelineAction &a : actions) {
    const RankProgram &p =
        pipelineProgram(plan_, rank_, a.backward ? ProgramPhase::Backward : ProgramPhase::Forward, a.chunk);
    exec_.setMicrobatch(a.microbatch);
    bindMicrobatch(a.microbatch);
    for (const NamedBuffer &in : plan_.inputs)
      if (in.isTransfer() && in.program == p.name) {
        auto it = handOver_.find({in.transfer, a.microbatch});
        if (it == handOver_.end())
          throw RuntimeError("pipeline: " + p.name + " of microbatch " + std::to_string(a.microbatch) +
                             " runs before the program that hands it " + in.name);
        exec_.bindInput(in.name, it->second);
        spare_.push_back(std::move(it->second.data)); // its memory serves a later hand-over
        handOver_.erase(it);
      }
    exec_.run(p.name);
    for (const NamedBuffer &out : plan_.outputs) {
      if (out.program != p.name)
        continue;
      if (out.isTransfer()) {
        TensorRef t = exec_.output(out.name, p.name);
        HostTensor copy{t.dtype, t.shape, spareBytes(t.bytes())};
        exec_.copyToHost(t, copy.data.data());
        handOver_[{out.transfer, a.microbatch}] = std::move(copy);
      } else {
        onOutput(p, a.microbatch, out);
      }
    }
    if (comm_)
      comm_->reapSends(); // the copies of what the receivers have taken
  }
  exec_.setMicrobatch(0);
}

} // namespace cpc
