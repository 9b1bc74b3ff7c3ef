//===- JobReport.cpp - what a job prints: measured against predicted, traces --===//
#include "runtime/JobReport.h"

#include "runtime/PipelineSchedule.h"
#include "runtime/TensorIO.h"

#include <algorithm>
#include <iomanip>
#include <iostream>
#include <optional>
#include <sstream>

namespace cpc {

std::string formatValues(const TensorRef &t, int64_t count) {
  std::ostringstream os;
  os << std::setprecision(7);
  int64_t n = std::min(count, t.numel());
  for (int64_t i = 0; i < n; ++i) {
    os << (i ? ", " : "");
    switch (t.dtype) {
    case DType::F32: os << t.as<float>()[i]; break;
    case DType::F64: os << t.as<double>()[i]; break;
    case DType::I64: os << t.as<int64_t>()[i]; break;
    case DType::I32: os << t.as<int32_t>()[i]; break;
    case DType::I1: case DType::U8: os << (int)t.as<uint8_t>()[i]; break;
    case DType::I8: os << (int)t.as<int8_t>()[i]; break;
    case DType::I16: os << t.as<int16_t>()[i]; break;
    default: os << "?"; break;
    }
  }
  if (t.numel() > n)
    os << ", ...";
  return os.str();
}

void finishTrace(const Plan &plan, const std::string &path, const TraceRecorder &trace, Communicator &comm, bool quiet) {
  std::vector<RankTimeShares> shares = writeTrace(path, trace, comm);
  if (quiet || shares.empty())
    return;
  auto percent = [](double v) {
    std::ostringstream os;
    os << std::fixed << std::setprecision(1) << 100 * v << "%";
    return os.str();
  };
  std::cout << "trace: " << path << " (one track per rank); time in communication:";
  for (size_t r = 0; r < shares.size(); ++r)
    std::cout << (r ? "," : "") << " rank " << r << " " << percent(shares[r].communication);
  std::optional<PipelineSchedule> schedule = planPipelineSchedule(plan);
  if (!schedule) {
    std::cout << " (no pipeline stages: no bubble)\n";
    return;
  }
  const PipelineSchedule &s = *schedule;
  // Waiting on the other stages is the bubble; not computing adds the runtime's own overhead
  // (dispatch, copies between programs), which one rank has too.
  std::cout << "\npipeline idle share (not computing, measured):";
  for (size_t r = 0; r < shares.size(); ++r)
    std::cout << (r ? "," : "") << " rank " << r << " " << percent(shares[r].idle);
  std::cout << "; of it waiting on other ranks:";
  for (size_t r = 0; r < shares.size(); ++r)
    std::cout << (r ? "," : "") << " rank " << r << " " << percent(shares[r].waiting);
  std::cout << "; " << scheduleName(s.kind) << " bubble with equal stages "
            << (s.virtualStages > 1 ? "(P-1)/(V*M+P-1)" : "(P-1)/(M+P-1)") << " = " << percent(s.bubbleFraction())
            << "\n";
}

void printProfile(const Executor &executor, bool byShape) {
  double total = 0;
  auto rows = executor.profile(byShape);
  for (const auto &[op, secs] : rows)
    total += secs;
  std::cout << "profile (all runs):\n";
  for (const auto &[op, secs] : rows)
    std::cout << "  " << std::setw(byShape ? 60 : 24) << std::left << op << std::right << std::fixed << std::setprecision(2)
              << std::setw(10) << secs * 1e3 << " ms " << std::setw(6) << 100 * secs / total << "%\n";
}

int64_t measuredPeakBytes(const Plan &plan, const Executor &executor, const MemoryProbe &probe) {
  if (plan.device != DeviceKind::Cpu)
    return executor.device().allocator(MemorySpace::Device).peakBytes();
  return probe.peakSinceStart() + executor.memoryStats().inPlanBytes;
}

double predictedStepSeconds(const Plan &plan) {
  const nlohmann::json &run = plan.runMetadata();
  return run.is_object() && run.contains("predicted_step") ? run["predicted_step"].value("total_s", 0.0) : 0.0;
}

std::string stepTimeLine(const Plan &plan, std::vector<double> seconds, const char *what) {
  std::sort(seconds.begin(), seconds.end());
  double measured = seconds.empty() ? 0 : seconds[seconds.size() / 2], predicted = predictedStepSeconds(plan);
  std::ostringstream os;
  os << what << " time: measured " << std::setprecision(4) << measured * 1e3 << " ms (median of " << seconds.size()
     << "), predicted " << predicted * 1e3 << " ms";
  if (predicted > 0 && measured > 0)
    os << " (" << std::showpos << std::setprecision(3) << 100.0 * (predicted - measured) / measured << std::noshowpos
       << "%, profile " << plan.runMetadata()["predicted_step"].value("profile", "built-in") << ")";
  return os.str();
}

int64_t largestMeasuredPeak(const Plan &plan, const Executor &executor, const MemoryProbe &probe,
                            Communicator *comm, int64_t outsidePlan) {
  int64_t measured = measuredPeakBytes(plan, executor, probe) - outsidePlan;
  if (!comm || comm->size() < 2)
    return measured;
  double largest = (double)measured; // exact below 2^53 bytes
  comm->allReduce(&largest, 1, DType::F64, ReduceOp::Max, comm->world());
  return (int64_t)largest;
}

std::string memoryLine(const Plan &plan, int64_t measured, const MemoryProbe &probe, int64_t outsidePlan) {
  std::ostringstream os;
  os << "memory per rank: predicted peak " << plan.predictedPeakBytes << " B, measured " << measured
     << " B (the largest rank's";
  if (outsidePlan > 0)
    os << ", without the data pipeline's " << outsidePlan << " B on rank 0";
  os << "; " << std::showpos << std::setprecision(3)
     << 100.0 * (measured - plan.predictedPeakBytes) / std::max<int64_t>(plan.predictedPeakBytes, 1) << std::noshowpos
     << "%)" << (probe.exact() ? "" : " [peak counter not resettable: measured may include earlier peaks]");
  return os.str();
}

void saveParameterFiles(const Plan &plan, Executor &executor, Communicator &comm,
                        const std::string &outputDir) {
  std::vector<std::vector<bool>> held;
  for (int r = 0; r < plan.worldSize; ++r)
    held.push_back(Executor::buffersOfRank(plan, r));
  for (size_t i = 0; i < plan.buffers.size(); ++i) {
    const BufferDesc &b = plan.buffers[i];
    if (b.kind != BufferKind::Parameter || b.aliasOf >= 0)
      continue;
    int holder = 0;
    while (holder < plan.worldSize && !held[holder][i])
      ++holder;
    if (holder == plan.worldSize)
      continue; // read by no program
    HostTensor whole;
    if (held[comm.rank()][i])
      whole = executor.wholeVariable(b.name);
    if (holder != 0 && comm.rank() == holder) {
      comm.send(whole.data.data(), whole.data.size(), 0, 0); // training's transfers are all done
    } else if (holder != 0 && comm.rank() == 0) {
      whole = {b.dtype, b.sharded() ? b.globalShape : b.shape, std::vector<uint8_t>(b.storedBytes())};
      comm.recv(whole.data.data(), whole.data.size(), holder, 0);
    }
    if (!outputDir.empty())
      writeNpy(outputDir + "/" + b.name + ".npy", whole.ref());
  }
}

} // namespace cpc
