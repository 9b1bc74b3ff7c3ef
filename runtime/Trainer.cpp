//===- Trainer.cpp --------------------------------------------------------===//
#include "runtime/Trainer.h"
#include "runtime/ScheduleCheck.h"

#include <chrono>
#include <cstring>
#include <memory>
#include <sys/resource.h>

namespace cpc {

nlohmann::json StepMetrics::toJson() const {
  nlohmann::json j = {{"step", step},
                      {"loss", loss},
                      {"lr", lr},
                      {"grad_norm", gradNorm},
                      {"loss_scale", lossScale},
                      {"skipped", skipped},
                      {"skipped_steps", skippedSteps},
                      {"step_s", seconds},
                      {"samples_per_s", samplesPerSecond},
                      {"peak_bytes", peakBytes}};
  j.update(comm);
  return j;
}

Trainer::Trainer(const Plan &plan, Executor &executor, int rank, Communicator *comm, Communicator *control)
    : plan_(plan), exec_(executor), control_(control ? control : comm), rank_(rank), comm_(comm) {
  if (plan.mode != PlanMode::Train)
    throw RuntimeError(std::string("not a training plan (mode '") + planModeName(plan.mode) + "')");
  recipe_ = TrainRecipe::fromJson(plan.training.at("recipe"));
  microbatch_ = plan.training.at("microbatch");
  batchBlocks_ = plan.batchBlocks();
  for (const NamedBuffer &out : plan.outputs)
    lossScaling_ |= out.name == "overflow";
  // The mesh axes that split the batch: ranks that differ only along other axes (tensor
  // parallelism) read the same rows.
  std::vector<std::string> batchAxes = plan.batchAxes();
  batchIndex_ = batchAxes.empty() ? 0 : plan.shardIndex(rank, batchAxes);
  if (plan.training.contains("pipeline")) {
    schedule_ = PipelineSchedule::fromJson(plan.training["pipeline"]);
    stage_ = plan.shardIndex(rank, {"pp"});
    pipeline_ = std::make_unique<PipelineActions>(plan, executor, rank, comm);
    if (schedule_->microbatches != recipe_.accumulation || stage_ >= schedule_->stages)
      throw RuntimeError("the plan's pipeline schedule does not match its recipe or mesh");
    applyProgram_ = pipelineProgram(plan, rank, ProgramPhase::Apply, -1).name;
    lossRank_ = producerOf("loss");
    normRank_ = producerOf("grad_norm");
    if (lossScaling_)
      scaleRank_ = producerOf("overflow");
    int64_t largestTag = schedule_->microbatches * std::max<int64_t>(plan.pointToPointChannels(), 1) - 1;
    if (comm_ && largestTag > comm_->maxTag())
      throw RuntimeError("the pipeline's " + std::to_string(schedule_->microbatches) + " microbatches of " +
                         std::to_string(plan.pointToPointChannels()) + " channels need message tags up to " +
                         std::to_string(largestTag) + ", beyond this MPI's bound " +
                         std::to_string(comm_->maxTag()) + " (use fewer microbatches)");
    return;
  }
  gradProgram_ = plan.programOfPhase(recipe_.accumulation == 1 ? ProgramPhase::TrainStep : ProgramPhase::Accumulate);
  applyProgram_ = plan.programOfPhase(ProgramPhase::Apply);
  if (gradProgram_.empty() || (recipe_.accumulation > 1 && applyProgram_.empty()))
    throw RuntimeError("the training plan lacks the programs of its phases");
}

int Trainer::producerOf(const std::string &name) const {
  for (int r = 0; r < plan_.worldSize; ++r)
    for (const NamedBuffer &out : plan_.outputs)
      if (out.name == name)
        for (const RankProgram &p : plan_.programs)
          if (p.name == out.program && plan_.runsOn(p, r))
            return r;
  throw RuntimeError("the training plan has no output '" + name + "'");
}

double Trainer::fromRank(double value, int root) {
  if (control_ && plan_.worldSize > 1)
    control_->broadcast(&value, sizeof value, root);
  return value;
}

double Trainer::updateOutput(const std::string &name, const std::string &program, int root) {
  if (!schedule_)
    return exec_.readScalar(name, program);
  // A pipeline's update is split over its ranks: the one that computes the output tells the others.
  double value = rank_ == root ? exec_.readScalar(name, program) : 0.0;
  return fromRank(value, root);
}

double Trainer::runPipeline() {
  double lossSum = 0;
  pipeline_->run(
      schedule_->actions[stage_], [&](int64_t m) { bindMicrobatch(m); },
      [&](const RankProgram &p, int64_t, const NamedBuffer &out) {
        if (out.name == "loss")
          lossSum += exec_.readScalar("loss", p.name);
      });
  exec_.run(applyProgram_);
  if (comm_)
    comm_->completeSends();
  return lossSum;
}

void Trainer::setBatchInput(const std::string &name, HostTensor global) {
  slices_[name] = sliceBatch(name, global, batchInputBuffer(name), recipe_.accumulation, batchBlocks_, batchIndex_);
}

const BufferDesc &Trainer::batchInputBuffer(const std::string &name) const {
  // A batch input of the microbatch programs (with a pipeline, of any stage's: their blocks agree).
  const NamedBuffer &input = findBatchInput(plan_, name, [&](const NamedBuffer &in) {
    return !in.isRuntime() && !in.isTransfer() && (schedule_ || in.program == gradProgram_);
  });
  return plan_.buffers[input.buffer];
}

std::vector<std::pair<int64_t, int64_t>> Trainer::batchRows(const std::string &name) const {
  const BufferDesc &local = batchInputBuffer(name);
  int64_t rows = local.shape.empty() ? 1 : local.shape[0];
  std::vector<std::pair<int64_t, int64_t>> ranges;
  for (int64_t m = 0; m < recipe_.accumulation; ++m) { // as sliceBatch cuts a global tensor
    int64_t begin = (m * batchBlocks_ + batchIndex_) * rows;
    ranges.emplace_back(begin, begin + rows);
  }
  return ranges;
}

void Trainer::setMicrobatchSlices(const std::string &name, std::vector<HostTensor> slices) {
  const BufferDesc &local = batchInputBuffer(name);
  if ((int64_t)slices.size() != recipe_.accumulation)
    throw RuntimeError("input '" + name + "': " + std::to_string(slices.size()) + " microbatch slices, the plan has " +
                       std::to_string(recipe_.accumulation));
  for (const HostTensor &t : slices)
    if (t.dtype != local.dtype || t.shape != local.shape)
      throw RuntimeError("input '" + name + "' expects " + dtypeName(local.dtype) + shapeString(local.shape) +
                         " per microbatch, got " + dtypeName(t.dtype) + shapeString(t.shape));
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
  bindRuntimeInput(RuntimeInputKind::Step, (float)(optimizerSteps_ + 1));
  exec_.setTrainingStep(index);
  double lossSum = 0;
  std::string updateProgram = applyProgram_;
  if (schedule_) {
    lossSum = runPipeline();
  } else {
    for (int64_t micro = 0; micro < recipe_.accumulation; ++micro) {
      bindMicrobatch(micro);
      exec_.setMicrobatch(micro); // random ops draw the microbatch's part of the step's stream
      exec_.run(gradProgram_);
      lossSum += exec_.readScalar("loss", gradProgram_);
    }
    exec_.setMicrobatch(0);
    if (recipe_.accumulation > 1)
      exec_.run(applyProgram_);
    else
      updateProgram = gradProgram_;
  }
  exec_.synchronize(); // a GPU's queued work (the update) is part of the step, and its faults
  m.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  m.samplesPerSecond = microbatch_ * recipe_.accumulation / m.seconds;
  if (comm_) {
    m.comm = commCountsJson(*comm_);
    m.commSummary = formatCommCounts(*comm_);
  }
  // With a pipeline, the last stage has the loss and the update's outputs come from the ranks
  // that compute them: every rank reports the same metrics (broadcasts left out of the counts).
  m.loss = (schedule_ ? fromRank(lossSum, lossRank_) : lossSum) / recipe_.accumulation;
  m.gradNorm = updateOutput("grad_norm", updateProgram, normRank_);
  if (lossScaling_) {
    m.lossScale = updateOutput("loss_scale", updateProgram, scaleRank_);
    m.skipped = updateOutput("overflow", updateProgram, scaleRank_) != 0;
  }
  optimizerSteps_ += !m.skipped;
  skippedSteps_ += m.skipped;
  m.skippedSteps = skippedSteps_;
  if (comm_)
    comm_->resetCounts();
  struct rusage usage;
  getrusage(RUSAGE_SELF, &usage);
  m.peakBytes = usage.ru_maxrss * 1024;
  return m;
}

} // namespace cpc
