//===- InferenceRunner.cpp ------------------------------------------------===//
#include "runtime/InferenceRunner.h"
#include "runtime/ScheduleCheck.h"

#include <algorithm>
#include <cstring>
#include <set>

namespace cpc {

InferenceRunner::InferenceRunner(const Plan &plan, Executor &executor, int rank, Communicator *control)
    : plan_(plan), exec_(executor), rank_(rank), control_(control) {
  if (plan.mode != PlanMode::Infer)
    throw RuntimeError(std::string("not an inference plan (mode '") + planModeName(plan.mode) + "')");
  const nlohmann::json &meta = plan.inference;
  microbatches_ = meta.value("microbatches", 1);
  batchBlocks_ = plan.batchBlocks();
  std::vector<std::string> batchAxes = plan.batchAxes();
  batchIndex_ = batchAxes.empty() ? 0 : plan.shardIndex(rank, batchAxes);
  if (microbatches_ < 1 || microbatches_ > kMaxMicrobatches)
    throw RuntimeError("the inference plan's microbatches (" + std::to_string(microbatches_) + ") are out of range");
  schedule_ = planPipelineSchedule(plan);
  if (schedule_) {
    int64_t stage = plan.shardIndex(rank, {"pp"});
    if (!schedule_->forwardOnly() || schedule_->microbatches != microbatches_ || stage >= schedule_->stages)
      throw RuntimeError("the inference plan's pipeline schedule does not match its microbatches or mesh");
    pipeline_ = std::make_unique<PipelineActions>(plan, executor, rank, control);
  } else {
    for (const RankProgram &p : plan.programs)
      if (p.phase == ProgramPhase::Infer && !program_)
        program_ = &p;
    if (!program_ && plan.programs.size() == 1) // a plan of one program without a role
      program_ = &plan.programs.front();
    if (!program_)
      throw RuntimeError("the inference plan has no program");
  }
  std::set<std::string> produced; // the model's outputs: in its order when the plan records it
  for (const NamedBuffer &out : plan.outputs)
    if (!out.isTransfer())
      produced.insert(out.name);
  for (const std::string &name : meta.value("outputs", std::vector<std::string>{}))
    if (produced.erase(name))
      outputNames_.push_back(name);
  for (const NamedBuffer &out : plan.outputs)
    if (produced.erase(out.name))
      outputNames_.push_back(out.name);
  for (const NamedBuffer &in : plan.inputs)
    if (isBatchInput(in)) { // the model's batch: a block's rows times the blocks
      const std::vector<int64_t> &shape = plan.buffers[in.buffer].shape;
      microbatch_ = shape.empty() ? 1 : shape[0] * batchBlocks_;
      break;
    }
}

bool InferenceRunner::isBatchInput(const NamedBuffer &in) const { return !in.isRuntime() && !in.isTransfer(); }

void InferenceRunner::setBatchInput(const std::string &name, const HostTensor &global) {
  const NamedBuffer &input = findBatchInput(plan_, name, [&](const NamedBuffer &in) { return isBatchInput(in); });
  slices_[name] = sliceBatch(name, global, plan_.buffers[input.buffer], microbatches_, batchBlocks_, batchIndex_);
}

std::vector<std::string> InferenceRunner::useSyntheticData() {
  std::vector<std::string> names;
  for (const NamedBuffer &in : plan_.inputs) {
    if (!isBatchInput(in) || slices_.count(in.name))
      continue;
    const BufferDesc &local = plan_.buffers[in.buffer];
    HostTensor global{local.dtype, local.shape, {}};
    if (!global.shape.empty())
      global.shape[0] *= batchBlocks_ * microbatches_;
    global.data.assign(numElements(global.shape) * dtypeSize(local.dtype), 0);
    TensorRef t = global.ref();
    uint64_t stream = syntheticParameterStream(in.name); // by name: the same on every layout
    for (int64_t k = 0; k < t.numel(); ++k) {
      double u = syntheticUniform(stream, k);
      if (t.dtype == DType::F32)
        t.as<float>()[k] = (float)u;
      else if (t.dtype == DType::F64)
        t.as<double>()[k] = u;
    }
    setBatchInput(in.name, global);
    names.push_back(in.name);
  }
  return names;
}

void InferenceRunner::bindMicrobatch(int64_t m) {
  for (auto &[name, slices] : slices_)
    exec_.bindInput(name, slices[m]);
}

void InferenceRunner::collect(const RankProgram &p, int64_t m, const NamedBuffer &out) {
  std::vector<HostTensor> &values = results_[out.name];
  values.resize(microbatches_);
  values[m] = exec_.readOutput(out.name, p.name);
}

void InferenceRunner::run() {
  results_.clear();
  if (schedule_) {
    pipeline_->run(
        schedule_->actions[plan_.shardIndex(rank_, {"pp"})], [&](int64_t m) { bindMicrobatch(m); },
        [&](const RankProgram &p, int64_t m, const NamedBuffer &out) { collect(p, m, out); });
    if (control_)
      control_->completeSends();
    return;
  }
  for (int64_t m = 0; m < microbatches_; ++m) {
    bindMicrobatch(m);
    exec_.setMicrobatch(m);
    exec_.run(program_->name);
    for (const NamedBuffer &out : plan_.outputs)
      if (out.program == program_->name && !out.isTransfer())
        collect(*program_, m, out);
  }
  exec_.setMicrobatch(0);
}

int InferenceRunner::producerOf(const std::string &name) const {
  for (int r = 0; r < std::max(plan_.worldSize, 1); ++r)
    for (const NamedBuffer &out : plan_.outputs)
      if (out.name == name && !out.isTransfer())
        for (const RankProgram &p : plan_.programs)
          if (p.name == out.program && plan_.runsOn(p, r))
            return r;
  throw RuntimeError("the inference plan has no output '" + name + "'");
}

HostTensor InferenceRunner::output(const std::string &name) {
  int root = producerOf(name);
  const BufferDesc *desc = nullptr;
  for (const NamedBuffer &out : plan_.outputs)
    if (out.name == name && !out.isTransfer())
      desc = &plan_.buffers[out.buffer];
  // Every microbatch's value, one after another: dim 0 grows M-fold (a scalar becomes [M]).
  HostTensor whole{desc->dtype, desc->shape, {}};
  if (microbatches_ > 1)
    whole.shape.empty() ? whole.shape.push_back(microbatches_) : void(whole.shape[0] *= microbatches_);
  size_t bytes = desc->bytes();
  whole.data.resize(bytes * microbatches_);
  if (rank_ == root) {
    auto it = results_.find(name);
    if (it == results_.end() || (int64_t)it->second.size() != microbatches_)
      throw RuntimeError("output '" + name + "' was not computed (run the plan first)");
    for (int64_t m = 0; m < microbatches_ && bytes; ++m) // an empty output has no storage to copy
      std::memcpy(whole.data.data() + m * bytes, it->second[m].data.data(), bytes);
  }
  if (control_ && plan_.worldSize > 1 && bytes) // from the rank that computed it (a pipeline's last stage)
    control_->broadcast(whole.data.data(), (int64_t)whole.data.size(), root);
  return whole;
}

} // namespace cpc
