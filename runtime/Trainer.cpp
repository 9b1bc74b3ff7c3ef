//===- Trainer.cpp --------------------------------------------------------===//
#include "runtime/Trainer.h"

#include <chrono>
#include <cstring>
#include <sys/resource.h>

namespace cpc {

nlohmann::json StepMetrics::toJson() const {
  nlohmann::json j = {{"step", step}, {"loss", loss}, {"lr", lr}, {"grad_norm", gradNorm}, {"loss_scale", 1.0},
                      {"step_s", seconds}, {"samples_per_s", samplesPerSecond}, {"peak_bytes", peakBytes}};
  j.update(comm);
  return j;
}

Trainer::Trainer(const Plan &plan, Executor &executor, int rank, Communicator *comm)
    : plan_(plan), exec_(executor), rank_(rank), comm_(comm) {
  if (plan.mode != "train")
    throw RuntimeError("not a training plan (mode '" + plan.mode + "')");
  recipe_ = TrainRecipe::fromJson(plan.training.at("recipe"));
  microbatch_ = plan.training.at("microbatch");
  dataParallel_ = plan.training.value("data_parallel", 1);
  // The mesh axes that split the batch: ranks that differ only along other axes (tensor
  // parallelism) read the same rows.
  std::vector<std::string> batchAxes = plan.batchAxes();
  batchIndex_ = batchAxes.empty() ? 0 : plan.shardIndex(rank, batchAxes);
  gradProgram_ = plan.programOfPhase(recipe_.accumulation == 1 ? ProgramPhase::TrainStep : ProgramPhase::Accumulate);
  applyProgram_ = plan.programOfPhase(ProgramPhase::Apply);
  if (gradProgram_.empty() || (recipe_.accumulation > 1 && applyProgram_.empty()))
    throw RuntimeError("the training plan lacks the programs of its phases");
}

void Trainer::setBatchInput(const std::string &name, HostTensor global) {
  const NamedBuffer *input = nullptr;
  for (const auto &in : plan_.inputs)
    if (in.name == name && in.program == gradProgram_ && !in.isRuntime())
      input = &in;
  if (!input) {
    std::string names;
    for (const auto &in : plan_.inputs)
      if (in.program == gradProgram_ && !in.isRuntime())
        names += (names.empty() ? "" : ", ") + in.name;
    throw RuntimeError("the plan has no input '" + name + "' (inputs: " + names + ")");
  }
  const BufferDesc &b = plan_.buffers[input->buffer]; // this rank's part of one microbatch
  int64_t k = recipe_.accumulation;
  std::vector<int64_t> expected = b.shape, micro = b.shape;
  if (!expected.empty()) {
    micro[0] *= dataParallel_;
    expected[0] = micro[0] * k;
  }
  if (global.dtype != b.dtype || global.shape != expected)
    throw RuntimeError("input '" + name + "' expects the global batch " + dtypeName(b.dtype) + shapeString(expected) +
                       " (" + std::to_string(k) + " microbatch" + (k > 1 ? "es" : "") + " of " + shapeString(micro) +
                       "), got " + dtypeName(global.dtype) + shapeString(global.shape));
  // Microbatch m is rows [m*M, (m+1)*M); data-parallel rank r keeps its contiguous share.
  size_t localBytes = b.bytes();
  std::vector<HostTensor> slices;
  for (int64_t m = 0; m < k; ++m) {
    HostTensor s{b.dtype, b.shape, {}};
    size_t begin = (m * dataParallel_ + batchIndex_) * localBytes;
    s.data.assign(global.data.begin() + begin, global.data.begin() + begin + localBytes);
    slices.push_back(std::move(s));
  }
  slices_[name] = std::move(slices);
}

void Trainer::useSyntheticData() { exec_.bindSyntheticInputs(); }

void Trainer::bindMicrobatch(int64_t m) {
  for (auto &[name, slices] : slices_)
    exec_.bindInput(name, slices[m]);
}

void Trainer::bindRuntimeInput(RuntimeInputKind kind, float value) {
  HostTensor t{DType::F32, {}, std::vector<uint8_t>(4)};
  std::memcpy(t.data.data(), &value, 4);
  for (const auto &in : plan_.inputs)
    if (in.runtime == kind)
      exec_.bindInput(in.name, t);
}

StepMetrics Trainer::step(int64_t index) {
  auto start = std::chrono::steady_clock::now();
  StepMetrics m;
  m.step = index + 1;
  m.lr = recipe_.lrAt(index);
  bindRuntimeInput(RuntimeInputKind::LearningRate, (float)m.lr);
  bindRuntimeInput(RuntimeInputKind::Step, (float)(index + 1));
  double lossSum = 0;
  for (int64_t micro = 0; micro < recipe_.accumulation; ++micro) {
    bindMicrobatch(micro);
    exec_.run(gradProgram_);
    lossSum += *exec_.output("loss", gradProgram_).as<float>();
  }
  std::string normProgram = gradProgram_;
  if (recipe_.accumulation > 1) {
    exec_.run(applyProgram_);
    normProgram = applyProgram_;
  }
  m.loss = lossSum / recipe_.accumulation;
  m.gradNorm = *exec_.output("grad_norm", normProgram).as<float>();
  m.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  m.samplesPerSecond = microbatch_ * recipe_.accumulation / m.seconds;
  if (comm_) {
    m.comm = commCountsJson(*comm_);
    m.commSummary = formatCommCounts(*comm_);
    comm_->resetCounts();
  }
  struct rusage usage;
  getrusage(RUSAGE_SELF, &usage);
  m.peakBytes = usage.ru_maxrss * 1024;
  return m;
}

} // namespace cpc
