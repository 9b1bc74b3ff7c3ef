//===- cpc-run.cpp - run a cpc plan ---------------------------------------===//
#include "runtime/Calibrate.h"
#include "runtime/Checkpoint.h"
#include "runtime/DataFeed.h"
#include "runtime/Progress.h"
#include "runtime/Device.h"
#include "runtime/Executor.h"
#include "runtime/Launcher.h"
#include "runtime/MemoryProbe.h"
#include "runtime/ModelState.h"
#include "runtime/TensorIO.h"
#include "runtime/Trace.h"
#include "runtime/PipelineSchedule.h"
#include "runtime/ScheduleCheck.h"
#include "runtime/InferenceRunner.h"
#include "runtime/Trainer.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <fcntl.h>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <numeric>
#include <set>
#include <sstream>
#include <sys/resource.h>
#include <sys/stat.h>
#include <thread>
#include <unistd.h>

namespace {

using namespace cpc::progress;

const char *kUsage = R"(Usage: cpc-run PLAN.bin [options]

Options:
  --input NAME=FILE   Bind graph input NAME to FILE (.npy, or an ONNX TensorProto .pb); the file
                      holds the global batch (used every step). Inputs without --input get
                      deterministic synthetic data.
  --output-dir DIR    Inference: one NAME.npy per graph output (with M microbatches, theirs
                      concatenated along dim 0); training: the final value of every parameter,
                      as PARAM.npy (ZeRO-3 blocks gathered whole)
  --metrics FILE      Training: append one JSON object per step (step, loss, lr, grad_norm,
                      loss_scale, skipped, skipped_steps, step_s, samples_per_s, peak_bytes = max RSS,
                      predicted_peak_bytes, measured_peak_bytes, model_state_bytes, and on
                      several ranks comm_calls, comm_bytes, comm by kind) to FILE (JSON lines)
  --data PATH         Training: read each step's batch from a dataset: an ImageFolder directory
                      (DIR/CLASS/*.jpg|png, decoded and augmented as MAE pretrains: random
                      resized crop 0.2-1, bicubic, flip, ImageNet normalization) or a .npy of
                      N samples; the global batch and all random draws depend on the seed and
                      step only, never on the layout. Other float inputs (MAE's masking noise)
                      get U[0,1) draws per step. Without --steps, trains NUM_EPOCHS epochs
  --data-threads T    Decoding threads per rank (default 2)
  --threads T         Threads per rank for kernels (default 1)
  --steps N           Training: the step to train up to (a resumed run continues from its
                      checkpoint's step); inference: runs (mean time printed). Default 1
  --checkpoint-dir D  Training: save checkpoints under D (D/step-NNNNNNNN: each rank's shards and
                      metadata.json; atomic; the newest --keep-checkpoints kept) after the last
                      step, every --save-every K steps, and when SIGINT or SIGTERM stops the run
                      (it ends at the next step boundary; a second signal ends it at once)
  --save-every K      Training: also save every K steps
  --keep-checkpoints N  How many complete checkpoints to keep under D (default 2)
  --resume D          Training: continue from checkpoint D (a step-* directory, or the newest
                      complete one under D) on any layout: its values are resharded to this plan
  --profile           Print the time spent per op kind (--profile-shapes: per op and shapes)
  --trace FILE        Write a Chrome/Perfetto trace (chrome://tracing, ui.perfetto.dev) of every
                      program run and step, one track per rank, and print each rank's share of
                      time in communication
  --quiet             Print only errors
  --verbose           Multi-rank plans: keep the ranks' stderr log and print its path

cpc-run --calibrate FILE [--ranks N] [--threads T] [--quick] [--calibrate-plan PLAN ...]
                      Measure this machine's cost profile into FILE, as `cpc calibrate` does
                      (collectives over N ranks, default 2; the kernels on T threads; each op
                      of the one-rank sample plans by its size)
)";

// Internal options, for tests only (not in --help): `cpc-run FILE --self-test-world N` skips the
// plan and exercises the multi-process layer: launch N ranks, handshake on FILE's hash, then
// --steps steps of one all-reduce each. --self-test-fail-rank K --self-test-fail-step S make rank K
// throw at step S; --self-test-pid-file P appends "RANK PID" per rank to P.

struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

/// cpc-run's flags. cpc-run is the runtime's tool and links no LLVM (the GPU bundle carries it
/// without libLLVM), so it parses by hand rather than with llvm::cl as cpc does.
struct RunFlags {
  std::string planPath, outputDir, metricsPath, pidFile;
  std::vector<std::pair<std::string, std::string>> inputs;
  std::string calibratePath; // --calibrate FILE: measure a cost profile, no plan
  std::vector<std::string> calibratePlans; // --calibrate-plan PLAN: sample plans for the ops' rates
  std::string checkpointDir, resume; // --checkpoint-dir, --resume
  std::string dataPath;               // --data
  int dataThreads = 2;
  bool stepsGiven = false;
  int saveEvery = 0, keepCheckpoints = 2;
  int threads = 1, steps = 1, selfTestWorld = 0, failRank = -1, failStep = 0, ranks = 2;
  bool quick = false;
  bool quiet = false, profile = false, verbose = false, help = false;
};

std::string formatValues(const cpc::TensorRef &t, int64_t count) {
  std::ostringstream os;
  os << std::setprecision(7);
  int64_t n = std::min(count, t.numel());
  for (int64_t i = 0; i < n; ++i) {
    os << (i ? ", " : "");
    switch (t.dtype) {
    case cpc::DType::F32: os << t.as<float>()[i]; break;
    case cpc::DType::F64: os << t.as<double>()[i]; break;
    case cpc::DType::I64: os << t.as<int64_t>()[i]; break;
    case cpc::DType::I32: os << t.as<int32_t>()[i]; break;
    case cpc::DType::I1: case cpc::DType::U8: os << (int)t.as<uint8_t>()[i]; break;
    case cpc::DType::I8: os << (int)t.as<int8_t>()[i]; break;
    case cpc::DType::I16: os << t.as<int16_t>()[i]; break;
    default: os << "?"; break;
    }
  }
  if (t.numel() > n)
    os << ", ...";
  return os.str();
}

bool byShape = false;  // --profile-shapes
std::string tracePath; // --trace

/// Writes the ranks' trace (rank 0 merges it) and prints each rank's share of program time spent
/// in communication.
void finishTrace(const cpc::Plan &plan, const cpc::TraceRecorder &trace, cpc::Communicator &comm, bool quiet) {
  std::vector<cpc::RankTimeShares> shares = cpc::writeTrace(tracePath, trace, comm);
  if (quiet || shares.empty())
    return;
  auto percent = [](double v) {
    std::ostringstream os;
    os << std::fixed << std::setprecision(1) << 100 * v << "%";
    return os.str();
  };
  std::cout << "trace: " << tracePath << " (one track per rank); time in communication:";
  for (size_t r = 0; r < shares.size(); ++r)
    std::cout << (r ? "," : "") << " rank " << r << " " << percent(shares[r].communication);
  std::optional<cpc::PipelineSchedule> schedule = cpc::planPipelineSchedule(plan);
  if (!schedule) {
    std::cout << " (no pipeline stages: no bubble)\n";
    return;
  }
  const cpc::PipelineSchedule &s = *schedule;
  // Waiting on the other stages is the bubble; not computing adds the runtime's own overhead
  // (dispatch, copies between programs), which one rank has too.
  std::cout << "\npipeline idle share (not computing, measured):";
  for (size_t r = 0; r < shares.size(); ++r)
    std::cout << (r ? "," : "") << " rank " << r << " " << percent(shares[r].idle);
  std::cout << "; of it waiting on other ranks:";
  for (size_t r = 0; r < shares.size(); ++r)
    std::cout << (r ? "," : "") << " rank " << r << " " << percent(shares[r].waiting);
  std::cout << "; " << cpc::scheduleName(s.kind) << " bubble with equal stages "
            << (s.virtualStages > 1 ? "(P-1)/(V*M+P-1)" : "(P-1)/(M+P-1)") << " = " << percent(s.bubbleFraction())
            << "\n";
}

void printProfile(const cpc::Executor &executor) {
  double total = 0;
  auto rows = executor.profile(byShape);
  for (const auto &[op, secs] : rows)
    total += secs;
  std::cout << "profile (all runs):\n";
  for (const auto &[op, secs] : rows)
    std::cout << "  " << std::setw(byShape ? 60 : 24) << std::left << op << std::right << std::fixed << std::setprecision(2)
              << std::setw(10) << secs * 1e3 << " ms " << std::setw(6) << 100 * secs / total << "%\n";
}

/// Tensor memory this rank measured: on the CPU, resident growth since the probe started plus
/// what the executor reads in place from the plan's blob (loaded before the probe started); on a
/// GPU, the most device memory its allocator held (the plan's tensors live there).
int64_t measuredPeakBytes(const cpc::Plan &plan, const cpc::Executor &executor, const cpc::MemoryProbe &probe) {
  if (plan.device != cpc::DeviceKind::Cpu)
    return executor.device().allocator(cpc::MemorySpace::Device).peakBytes();
  return probe.peakSinceStart() + executor.memoryStats().inPlanBytes;
}

/// The plan's predicted step time (its metadata's, priced by its compile's cost profile), 0 when
/// the plan has none.
double predictedStepSeconds(const cpc::Plan &plan) {
  const nlohmann::json &run = plan.runMetadata();
  return run.is_object() && run.contains("predicted_step") ? run["predicted_step"].value("total_s", 0.0) : 0.0;
}

/// "step time: measured X ms (median of N), predicted Y ms (+Z%)".
std::string stepTimeLine(const cpc::Plan &plan, std::vector<double> seconds, const char *what) {
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

/// The largest rank's measured peak: the plan's predicted peak is its largest rank's too (a
/// pipeline's stages differ; rank 0's against the largest rank's prediction read 10% low on
/// GPT-small's GPipe). Every rank calls it: a max all-reduce over the world.
int64_t largestMeasuredPeak(const cpc::Plan &plan, const cpc::Executor &executor, const cpc::MemoryProbe &probe,
                            cpc::Communicator *comm) {
  int64_t measured = measuredPeakBytes(plan, executor, probe);
  if (!comm || comm->size() < 2)
    return measured;
  double largest = (double)measured; // exact below 2^53 bytes
  comm->allReduce(&largest, 1, cpc::DType::F64, cpc::ReduceOp::Max, comm->world());
  return (int64_t)largest;
}

std::string memoryLine(const cpc::Plan &plan, int64_t measured, const cpc::MemoryProbe &probe) {
  std::ostringstream os;
  os << "memory per rank: predicted peak " << plan.predictedPeakBytes << " B, measured " << measured
     << " B (the largest rank's; "
     << std::showpos << std::setprecision(3)
     << 100.0 * (measured - plan.predictedPeakBytes) / std::max<int64_t>(plan.predictedPeakBytes, 1) << std::noshowpos
     << "%)" << (probe.exact() ? "" : " [peak counter not resettable: measured may include earlier peaks]");
  return os.str();
}

/// Says on stderr which data inputs of a training plan no --input binds (they get deterministic
/// synthetic data), and that a plan compiled without weights starts from synthetic parameters:
/// neither is what a user should mistake for their own.
void noteSyntheticInputs(const cpc::Plan &plan, const std::vector<std::pair<std::string, std::string>> &inputs,
                         const cpc::DataFeed *feed) {
  std::vector<std::string> fed = feed ? feed->boundInputs() : std::vector<std::string>();
  std::vector<std::string> unbound;
  for (const auto &in : plan.inputs) {
    bool bound = std::any_of(inputs.begin(), inputs.end(), [&](const auto &kv) { return kv.first == in.name; }) ||
                 std::find(fed.begin(), fed.end(), in.name) != fed.end();
    if (!in.isRuntime() && !in.isTransfer() && !bound &&
        std::find(unbound.begin(), unbound.end(), in.name) == unbound.end())
      unbound.push_back(in.name);
  }
  if (plan.hasSyntheticParameters())
    std::cerr << "cpc-run: note: the plan has no weights (cpc compile --synthetic-weights): training from "
                 "deterministic pseudo-random parameters\n";
  if (unbound.empty())
    return;
  std::string names;
  for (const auto &n : unbound)
    names += (names.empty() ? "'" : ", '") + n + "'";
  std::cerr << "cpc-run: note: no --input for " << names << ": training on deterministic synthetic data\n";
}

/// Creates `dir` if needed and checks that a file can be written into it, so that a bad
/// --output-dir fails before the first step rather than after the last.
void prepareOutputDir(const std::string &dir) {
  mkdir(dir.c_str(), 0755);
  struct stat st;
  if (stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode))
    throw cpc::RuntimeError(dir + ": cannot create the output directory");
  std::string probe = dir + "/.cpc-run-write-test-" + std::to_string(getpid());
  int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_EXCL, 0644);
  if (fd < 0)
    throw cpc::RuntimeError(dir + ": cannot write into the output directory: " + std::strerror(errno));
  ::close(fd);
  ::unlink(probe.c_str());
}

/// Writes each parameter's final value into `outputDir` (rank 0; "" elsewhere). The ranks that
/// hold a parameter gather its blocks (a collective over its shard group); when rank 0 holds
/// none of it (another pipeline stage's), the lowest rank that does sends it the whole value.
void saveParameterFiles(const cpc::Plan &plan, cpc::Executor &executor, cpc::Communicator &comm,
                        const std::string &outputDir) {
  std::vector<std::vector<bool>> held;
  for (int r = 0; r < plan.worldSize; ++r)
    held.push_back(cpc::Executor::buffersOfRank(plan, r));
  for (size_t i = 0; i < plan.buffers.size(); ++i) {
    const cpc::BufferDesc &b = plan.buffers[i];
    if (b.kind != cpc::BufferKind::Parameter || b.aliasOf >= 0)
      continue;
    int holder = 0;
    while (holder < plan.worldSize && !held[holder][i])
      ++holder;
    if (holder == plan.worldSize)
      continue; // read by no program
    cpc::HostTensor whole;
    if (held[comm.rank()][i])
      whole = executor.wholeVariable(b.name);
    if (holder != 0 && comm.rank() == holder) {
      comm.send(whole.data.data(), whole.data.size(), 0, 0); // training's transfers are all done
    } else if (holder != 0 && comm.rank() == 0) {
      whole = {b.dtype, b.sharded() ? b.globalShape : b.shape, std::vector<uint8_t>(b.storedBytes())};
      comm.recv(whole.data.data(), whole.data.size(), holder, 0);
    }
    if (!outputDir.empty())
      cpc::writeNpy(outputDir + "/" + b.name + ".npy", whole.ref());
  }
}

/// --data: the dataset reader, its epoch length given to the LR schedule (null without --data).
std::unique_ptr<cpc::DataFeed> openData(const cpc::Plan &plan, cpc::Trainer &trainer, int rank,
                                        const RunFlags &flags, bool quiet) {
  if (flags.dataPath.empty())
    return nullptr;
  cpc::DataOptions options;
  options.path = flags.dataPath;
  options.threads = flags.dataThreads;
  options.seed = (uint64_t)trainer.recipe().seed;
  std::set<std::string> bound;
  for (const auto &[name, file] : flags.inputs)
    bound.insert(name);
  auto feed = std::make_unique<cpc::DataFeed>(plan, trainer, rank, options, bound);
  if (feed->stepsPerEpoch() != trainer.recipe().stepsPerEpoch && !quiet)
    std::cout << "steps per epoch: " << feed->stepsPerEpoch() << " from the dataset (the config said "
              << trainer.recipe().stepsPerEpoch << ")\n";
  trainer.setStepsPerEpoch(feed->stepsPerEpoch());
  if (!quiet)
    std::cout << feed->describe() << "\n";
  return feed;
}

/// --resume: loads the checkpoint into this rank's variables and the trainer's counters; returns
/// the step to continue from (0 without --resume).
int64_t resume(const cpc::Plan &plan, cpc::Executor &executor, cpc::Communicator &comm, cpc::Trainer &trainer,
               const RunFlags &flags, const cpc::DataFeed *feed, bool quiet) {
  if (flags.resume.empty())
    return 0;
  std::string notes;
  cpc::TrainingPosition position = cpc::loadCheckpoint(plan, executor, comm.rank(), flags.resume, &notes);
  trainer.restoreCounters(position.optimizerSteps, position.skippedSteps);
  if (!quiet) {
    std::cout << "resumed from " << cpc::findCheckpoint(flags.resume) << " at step " << position.step << "\n";
    if (!notes.empty())
      std::cerr << "cpc-run: note: " << notes << "\n";
    if (std::string differs = feed ? feed->differsFrom(position.data) : ""; !differs.empty())
      std::cerr << "cpc-run: note: " << differs << "\n";
    if (position.step >= flags.steps)
      std::cout << "the checkpoint is at step " << position.step << ", --steps " << flags.steps
                << ": no step left to run\n";
  }
  return position.step;
}

/// After step `done` (1-based): the ranks agree whether a signal asked them to stop, and with
/// --checkpoint-dir save when it is time (every --save-every steps, the last step, a stop).
/// Returns the stop signal (0: go on).
int checkpointAfterStep(const cpc::Plan &plan, cpc::Executor &executor, cpc::Communicator &comm,
                        cpc::Trainer &trainer, const RunFlags &flags, int64_t done, const cpc::DataFeed *feed,
                        bool quiet) {
  double signal = cpc::stopSignal();
  if (comm.size() > 1) { // the signal reaches the ranks at different steps: stop at the same one
    comm.allReduce(&signal, 1, cpc::DType::F64, cpc::ReduceOp::Max, comm.world());
    comm.resetCounts(); // not the plan's communication
  }
  bool stop = signal != 0, last = done == flags.steps;
  bool due = !flags.checkpointDir.empty() &&
             (stop || last || (flags.saveEvery > 0 && done % flags.saveEvery == 0));
  if (due || stop)
    closeProgressLine();
  if (due) {
    cpc::TrainingPosition position{done, trainer.optimizerSteps(), trainer.skippedSteps()};
    if (feed)
      position.data = feed->position(done);
    auto start = std::chrono::steady_clock::now();
    std::string dir = cpc::saveCheckpoint(plan, executor, comm, flags.checkpointDir, position, flags.keepCheckpoints);
    if (!quiet)
      std::cout << "saved checkpoint " << dir << " ("
                << std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() << " s)\n"
                << std::flush;
  }
  if (stop && !quiet)
    std::cout << "stopped by signal " << (int)signal << " after step " << done
              << (flags.checkpointDir.empty() ? " (no --checkpoint-dir: nothing saved)" : "") << "\n";
  return (int)signal;
}

/// Runs `steps` optimizer steps of a training plan, printing one progress line per step.
int train(const cpc::Plan &plan, cpc::Executor &executor, cpc::Communicator &comm, const RunFlags &flags,
          const std::string &outputDir, bool quiet, cpc::MemoryProbe &probe) {
  const auto &inputs = flags.inputs;
  const std::string &metricsPath = flags.metricsPath;
  int steps = flags.steps;
  cpc::Trainer trainer(plan, executor, comm.rank(), executor.communicator(), &comm);
  std::unique_ptr<cpc::DataFeed> feed = openData(plan, trainer, comm.rank(), flags, quiet);
  if (feed && !flags.stepsGiven)
    steps = (int)std::min<int64_t>(trainer.recipe().numEpochs * feed->stepsPerEpoch(), INT32_MAX);
  const cpc::ModelStateBytes modelStates = cpc::modelStateBytes(plan, comm.rank());
  for (const auto &[name, file] : inputs)
    trainer.setBatchInput(name, cpc::readTensorFile(file));
  trainer.useSyntheticData();
  if (comm.rank() == 0)
    noteSyntheticInputs(plan, inputs, feed.get());
  std::ofstream metrics;
  if (!metricsPath.empty() && comm.rank() == 0) { // every rank has the same (global) metrics
    metrics.open(metricsPath, std::ios::app);
    if (!metrics)
      throw cpc::RuntimeError(metricsPath + ": cannot write metrics");
  }
  const cpc::TrainRecipe &recipe = trainer.recipe();
  if (!quiet)
    std::cout << "training " << plan.source << ": " << steps << " steps, global batch " << recipe.totalBatchSize
              << " (" << recipe.accumulation << " x " << trainer.microbatch() << "), " << plan.worldSize << " rank"
              << (plan.worldSize > 1 ? "s" : "") << ", lr " << recipe.learningRate()
              << " (" << recipe.lrSchedule << ")"
              << (recipe.precision != "fp32" ? ", " + recipe.precision + " mixed precision" : std::string()) << "\n"
              << modelStates.summary() << "\n";
  int64_t first = resume(plan, executor, comm, trainer, flags, feed.get(), quiet);
  probe.restartPeak(); // reading the checkpoint is not the plan's memory
  std::vector<double> stepSeconds;
  for (int64_t s = first; s < steps; ++s) {
    if (feed)
      feed->bind(s);
    cpc::StepMetrics m = trainer.step(s);
    stepSeconds.push_back(m.seconds);
    if (!std::isfinite(m.loss) && !m.skipped) // fp16: an overflow skips the step instead
      throw cpc::RuntimeError("step " + std::to_string(m.step) + ": the loss is not finite (" + std::to_string(m.loss) +
                              ")");
    if (metrics.is_open()) {
      nlohmann::json j = m.toJson();
      j["predicted_peak_bytes"] = plan.predictedPeakBytes;
      j["measured_peak_bytes"] = measuredPeakBytes(plan, executor, probe);
      j["model_state_bytes"] = modelStates.total();
      j["predicted_step_s"] = predictedStepSeconds(plan);
      if (feed) {
        j["epoch"] = feed->epochOf(s);
        j["data_s"] = feed->lastWaitSeconds();
        j["images_per_thread_s"] = feed->imagesPerThreadSecond();
      }
      metrics << j.dump() << "\n" << std::flush;
    }
    if (!quiet)
      std::cout << progressBar(s + 1 - first, steps - first) << "step " << std::setw(5) << m.step << "/" << steps
                << "  loss " << std::setprecision(6)
                << std::fixed << m.loss << std::defaultfloat << "  lr " << std::setprecision(4) << m.lr
                << "  grad_norm " << m.gradNorm
                << (recipe.precision == "fp16" ? "  scale " + formatScale(m.lossScale) : std::string())
                << (m.skipped ? "  skipped (overflow; " + std::to_string(m.skippedSteps) + " so far)" : std::string())
                << "  " << std::setprecision(3) << m.seconds << " s  "
                << std::setprecision(4) << m.samplesPerSecond << " samples/s"
                << (plan.worldSize > 1 ? "  " + m.commSummary : std::string()) << dataNote(feed.get(), s)
                << eta(stepSeconds, steps - s - 1);
    if (!quiet) // on a terminal the line is redrawn, and kept at the end of each epoch
      endProgressLine(s + 1 == steps || (feed && feed->epochOf(s + 1) != feed->epochOf(s)));
    if (int signal = checkpointAfterStep(plan, executor, comm, trainer, flags, s + 1, feed.get(), quiet))
      return cpc::launchedByMpi() ? 0 : 128 + signal; // under mpirun the launcher reports it
  }
  int64_t measured = largestMeasuredPeak(plan, executor, probe, &comm);
  closeProgressLine();
  if (!quiet)
    std::cout << memoryLine(plan, measured, probe) << "\n" << stepTimeLine(plan, stepSeconds, "step") << "\n";
  if (!flags.outputDir.empty()) // every rank takes part in gathering sharded ones
    saveParameterFiles(plan, executor, comm, outputDir);
  if (flags.profile)
    printProfile(executor);
  return 0;
}

/// See the internal options above.
int selfTest(cpc::Communicator &comm, int steps, int failRank, int failStep, const std::string &pidFile, bool quiet) {
  if (!pidFile.empty()) {
    std::ofstream(pidFile, std::ios::app) << comm.rank() << " " << getpid() << "\n" << std::flush;
  }
  for (int s = 1; s <= steps; ++s) {
    if (comm.rank() == failRank && s == failStep)
      throw cpc::RuntimeError("self-test failure at step " + std::to_string(s));
    double value = comm.rank() + 1;
    comm.allReduceSum(&value, 1, cpc::DType::F64, {});
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    if (comm.rank() == 0 && !quiet)
      std::cout << "step " << s << "/" << steps << "  all_reduce " << value << "  " << cpc::formatCommCounts(comm)
                << "\n" << std::flush;
    comm.resetCounts();
  }
  return 0;
}

/// The CPU-threads warnings of one machine (from local rank 0 only).
void warnAboutThreads(const cpc::Plan &plan, int threads) {
  if (plan.device != cpc::DeviceKind::Cpu || cpc::localRank() != 0)
    return;
  std::string crowded = cpc::oversubscriptionWarning(cpc::localRanks(), threads,
                                                     std::max(1u, std::thread::hardware_concurrency()),
                                                     cpc::availableCores());
  if (!crowded.empty())
    std::cerr << "cpc-run: warning: " << crowded << "\n";
  std::string gemmNote = cpc::gemmThreadsNote(threads);
  if (!gemmNote.empty())
    std::cerr << "cpc-run: note: " << gemmNote << "\n";
}

/// Inference: `steps` runs of the plan on the bound (or synthetic) global batch, the outputs
/// printed and written to `outputDir` (rank 0), the mean time and the memory.
void infer(const cpc::Plan &plan, cpc::Executor &executor, cpc::Communicator &comm,
           const std::vector<std::pair<std::string, std::string>> &inputs, int threads, int steps,
           const std::string &outputDir, bool quiet, const cpc::MemoryProbe &probe) {
  cpc::InferenceRunner runner(plan, executor, comm.rank(), plan.worldSize > 1 ? &comm : nullptr);
  for (const auto &[name, file] : inputs)
    runner.setBatchInput(name, cpc::readTensorFile(file));
  std::vector<std::string> synthetic = runner.useSyntheticData();
  if (!quiet && !synthetic.empty()) {
    std::cout << "synthetic data for:";
    for (const auto &n : synthetic)
      std::cout << " " << n;
    std::cout << "\n";
  }
  std::vector<double> runSeconds;
  for (int s = 0; s < steps; ++s) {
    auto start = std::chrono::steady_clock::now();
    runner.run();
    executor.synchronize(); // the time of the work, not of queueing it (and its faults)
    runSeconds.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  double seconds = std::accumulate(runSeconds.begin(), runSeconds.end(), 0.0);
  if (cpc::Communicator *c = executor.communicator(); c && plan.worldSize > 1) {
    if (!quiet) { // before the outputs' broadcasts, which are the runner's, not the plan's
      std::cout << "communication per run (rank 0):";
      for (const auto &[kind, count] : c->counts())
        std::cout << " " << kind << " " << count.calls / steps << " calls " << count.bytes / steps << " B;";
      std::cout << "\n";
    }
    c->resetCounts();
  }
  for (const std::string &name : runner.outputNames()) {
    cpc::HostTensor host = runner.output(name); // every rank takes part (a broadcast from its producer)
    cpc::TensorRef t = host.ref();
    if (!quiet)
      std::cout << name << ": " << cpc::dtypeName(t.dtype) << cpc::shapeString(t.shape) << " = ["
                << formatValues(t, 8) << "]\n";
    if (!outputDir.empty())
      cpc::writeNpy(outputDir + "/" + name + ".npy", t);
  }
  int64_t measured = largestMeasuredPeak(plan, executor, probe, executor.communicator());
  if (quiet)
    return;
  struct rusage usage;
  getrusage(RUSAGE_SELF, &usage);
  cpc::MemoryStats mem = executor.memoryStats();
  std::cout << "time: " << seconds / steps * 1e3 << " ms per run of " << runner.globalBatch() << " samples (" << steps
            << " run" << (steps > 1 ? "s" : "") << ", " << threads << " thread" << (threads > 1 ? "s" : "") << ")\n"
            << stepTimeLine(plan, runSeconds, "run") << "\n"
            << memoryLine(plan, measured, probe) << "\n"
            << "memory: predicted peak " << plan.predictedPeakBytes << " B, allocated " << mem.total()
            << " B (arena " << mem.arenaBytes << ", parameters " << mem.parameterBytes << ", constants "
            << mem.constantBytes << ", inputs " << mem.inputBytes << "), max RSS " << usage.ru_maxrss * 1024 << " B\n";
}

/// Runs a plan on this process's rank: training or inference, printing from rank 0 only.
int runPlan(const cpc::Plan &plan, cpc::Communicator &comm, const RunFlags &flags) {
  const auto &inputs = flags.inputs;
  const std::string &metricsPath = flags.metricsPath;
  std::string outputDir = flags.outputDir;
  int threads = flags.threads, steps = flags.steps;
  bool quiet = flags.quiet, profile = flags.profile;
  cpc::MemoryProbe probe;
  probe.start();
  if (comm.rank() != 0) {
    quiet = true;
    outputDir.clear();
  }
  if (plan.mode != cpc::PlanMode::Train && (!flags.checkpointDir.empty() || !flags.resume.empty()))
    throw UsageError("--checkpoint-dir and --resume are for training; this plan is for inference");
  if (plan.mode == cpc::PlanMode::Train)
    cpc::installStopHandlers(); // SIGINT, SIGTERM (SIGUSR1 from the launcher): save, then stop
  if (plan.mode != cpc::PlanMode::Train && !metricsPath.empty())
    throw UsageError("--metrics records training steps; this plan is for inference");
  std::unique_ptr<cpc::TraceRecorder> trace;
  if (!tracePath.empty())
    trace = std::make_unique<cpc::TraceRecorder>(comm.rank());
  // The device of this rank (GPU r for local rank r on a cuda plan) and the communicator its
  // steps use: NCCL between GPUs; `comm` (MPI) stays for values the host exchanges.
  std::unique_ptr<cpc::Device> device = cpc::makeDevice(plan.device, cpc::localRank());
  warnAboutThreads(plan, threads);
  std::unique_ptr<cpc::Communicator> deviceComm;
  if (plan.device == cpc::DeviceKind::Cuda)
    deviceComm = cpc::makeNcclCommunicator(*device, comm);
  cpc::ExecutorOptions options{comm.rank(), threads, profile, deviceComm ? deviceComm.get() : &comm};
  options.trace = trace.get();
  options.device = device.get();
  cpc::Executor executor(plan, options);
  if (!outputDir.empty())
    prepareOutputDir(outputDir);
  int rc = 0;
  if (plan.mode == cpc::PlanMode::Train) {
    rc = train(plan, executor, comm, flags, outputDir, quiet, probe);
  } else {
    infer(plan, executor, comm, inputs, threads, steps, outputDir, quiet, probe);
    if (profile)
      printProfile(executor);
  }
  if (trace)
    finishTrace(plan, *trace, comm, quiet);
  return rc;
}


/// --input NAME=FILE, each name once.
void addInput(RunFlags &flags, const std::string &spec) {
  size_t eq = spec.find('=');
  if (eq == std::string::npos || eq == 0 || eq + 1 == spec.size())
    throw UsageError("--input expects NAME=FILE, got '" + spec + "'");
  for (const auto &[name, file] : flags.inputs)
    if (name == spec.substr(0, eq))
      throw UsageError("--input " + name + " is given twice ('" + file + "' and '" + spec.substr(eq + 1) + "')");
  flags.inputs.push_back({spec.substr(0, eq), spec.substr(eq + 1)});
}

int positiveFlag(const std::string &flag, const std::string &v) {
  char *end = nullptr;
  long n = std::strtol(v.c_str(), &end, 10);
  if (v.empty() || *end || n < 1 || n > 1 << 20)
    throw UsageError(flag + " expects a positive integer, got '" + v + "'");
  return (int)n;
}

RunFlags parseRunFlags(int argc, char **argv) {
  RunFlags f;
  auto value = [&](int &i) -> std::string {
    if (i + 1 >= argc)
      throw UsageError(std::string(argv[i]) + " needs a value");
    return argv[++i];
  };
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--help" || arg == "-h")
      f.help = true;
    else if (arg == "--input")
      addInput(f, value(i));
    else if (arg == "--output-dir")
      f.outputDir = value(i);
    else if (arg == "--metrics")
      f.metricsPath = value(i);
    else if (arg == "--trace")
      tracePath = value(i);
    else if (arg == "--threads")
      f.threads = positiveFlag(arg, value(i));
    else if (arg == "--steps") {
      f.steps = positiveFlag(arg, value(i));
      f.stepsGiven = true;
    } else if (arg == "--data")
      f.dataPath = value(i);
    else if (arg == "--data-threads")
      f.dataThreads = positiveFlag(arg, value(i));
    else if (arg == "--profile")
      f.profile = true;
    else if (arg == "--checkpoint-dir")
      f.checkpointDir = value(i);
    else if (arg == "--save-every")
      f.saveEvery = positiveFlag(arg, value(i));
    else if (arg == "--keep-checkpoints")
      f.keepCheckpoints = positiveFlag(arg, value(i));
    else if (arg == "--resume")
      f.resume = value(i);
    else if (arg == "--profile-shapes")
      f.profile = byShape = true;
    else if (arg == "--quiet")
      f.quiet = true;
    else if (arg == "--verbose")
      f.verbose = true;
    else if (arg == "--calibrate")
      f.calibratePath = value(i);
    else if (arg == "--calibrate-plan")
      f.calibratePlans.push_back(value(i));
    else if (arg == "--ranks")
      f.ranks = positiveFlag(arg, value(i));
    else if (arg == "--quick")
      f.quick = true;
    else if (arg == "--self-test-world")
      f.selfTestWorld = positiveFlag(arg, value(i));
    else if (arg == "--self-test-fail-step")
      f.failStep = positiveFlag(arg, value(i));
    else if (arg == "--self-test-fail-rank") {
      std::string v = value(i);
      f.failRank = v == "0" ? 0 : positiveFlag(arg, v);
    } else if (arg == "--self-test-pid-file")
      f.pidFile = value(i);
    else if (!arg.empty() && arg[0] == '-')
      throw UsageError("unknown option '" + arg + "' (see cpc-run --help)");
    else if (f.planPath.empty())
      f.planPath = arg;
    else
      throw UsageError("more than one plan given");
  }
  if (f.planPath.empty() && !f.help && f.calibratePath.empty())
    throw UsageError("needs a plan file (see cpc-run --help)");
  if (!f.calibratePath.empty() && !f.planPath.empty())
    throw UsageError("--calibrate measures the machine: it takes no plan");
  if (f.saveEvery > 0 && f.checkpointDir.empty())
    throw UsageError("--save-every needs --checkpoint-dir");
  return f;
}

/// --calibrate: the cost profile of this machine (collectives over --ranks ranks, started under
/// mpirun as a plan's are; the kernels on rank 0), written by rank 0.
int calibrateMachine(const RunFlags &flags, int argc, char **argv) {
  auto body = [&](cpc::Communicator &comm) {
    cpc::CalibrationOptions options;
    options.threads = flags.threads;
    options.quick = flags.quick;
    options.log = comm.rank() == 0 && !flags.quiet ? &std::cout : nullptr;
    std::vector<cpc::Plan> plans;
    for (const std::string &path : flags.calibratePlans)
      if (comm.rank() == 0) // rank 0 alone runs them
        plans.push_back(cpc::readPlan(path));
    for (const cpc::Plan &plan : plans)
      options.plans.push_back(&plan);
    auto start = std::chrono::steady_clock::now();
    cpc::CostProfile profile = cpc::calibrate(comm, options);
    if (comm.rank() != 0)
      return 0;
    std::ofstream out(flags.calibratePath);
    out << profile.toJson().dump(2) << "\n";
    out.close();
    if (!out)
      throw cpc::RuntimeError(flags.calibratePath + ": cannot write the cost profile");
    if (!flags.quiet)
      std::cout << "wrote " << flags.calibratePath << " (" << profile.machine << "; "
                << std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() << " s)\n";
    return 0;
  };
  if (flags.ranks == 1)
    return body(*cpc::makeSingleRankCommunicator());
  if (!cpc::launchedByMpi())
    return cpc::launchUnderMpi(flags.ranks, argc, argv, flags.verbose);
  return cpc::runRank(flags.ranks, "/proc/self/exe", body); // the handshake hashes this program
}

/// Refuses, once and before any rank starts, a plan that would hang or needs GPUs this machine
/// lacks.
void checkBeforeLaunch(const cpc::Plan &plan, const std::string &planPath) {
  if (cpc::launchedByMpi())
    return;
  // Whoever wrote it, a plan in which some rank would wait forever does not start (cpc compile
  // runs the same check; this covers plans from elsewhere).
  if (std::string problem = cpc::checkPlanSchedule(plan); !problem.empty())
    throw cpc::RuntimeError(planPath + ": the plan would hang, " + problem);
  if (plan.device != cpc::DeviceKind::Cuda)
    return;
  std::string why;
  int gpus = cpc::cudaDeviceCount(&why);
  if (gpus == 0)
    throw cpc::RuntimeError(planPath + ": this plan runs on CUDA GPUs and this machine has none (" + why + ")");
  if (gpus < plan.worldSize)
    throw cpc::RuntimeError(planPath + ": this plan runs " + std::to_string(plan.worldSize) +
                            " ranks, one per GPU, and this machine has " + std::to_string(gpus) +
                            " GPUs (start the ranks on several machines with mpirun -H)");
}

int run(int argc, char **argv) {
  RunFlags flags = parseRunFlags(argc, argv);
  if (flags.help) {
    std::cout << kUsage;
    return 0;
  }
  const std::string &planPath = flags.planPath, &outputDir = flags.outputDir;
  int steps = flags.steps, selfTestWorld = flags.selfTestWorld;
  bool quiet = flags.quiet, verbose = flags.verbose;
  if (!flags.calibratePath.empty())
    return calibrateMachine(flags, argc, argv);
  if (selfTestWorld > 0) {
    if (!cpc::launchedByMpi())
      return cpc::launchUnderMpi(selfTestWorld, argc, argv, verbose);
    return cpc::runRank(selfTestWorld, planPath, [&](cpc::Communicator &comm) {
      return selfTest(comm, steps, flags.failRank, flags.failStep, flags.pidFile, quiet);
    });
  }

  // Read (and validate) the plan before starting ranks, so that a bad plan fails once, here.
  // The tensors stay in the file: each rank copies out only what it keeps (its parameter blocks).
  auto plan = std::make_unique<cpc::Plan>(cpc::readPlan(planPath, cpc::PlanBlob::InFile));
  const int world = plan->worldSize;
  checkBeforeLaunch(*plan, planPath);
  if (!outputDir.empty() && !cpc::launchedByMpi())
    prepareOutputDir(outputDir); // before any rank starts
  if (cpc::needsMpiLaunch(world)) {
    bool training = plan->mode == cpc::PlanMode::Train;
    plan.reset(); // the ranks load their own copy
    return cpc::launchUnderMpi(world, argc, argv, verbose, training);
  }
  if (cpc::launchedByMpi())
    return cpc::runRank(world, planPath, [&](cpc::Communicator &comm) {
      return runPlan(*plan, comm, flags);
    });
  return runPlan(*plan, *cpc::makeSingleRankCommunicator(), flags);
}

} // namespace

int main(int argc, char **argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception &e) {
    std::string message = e.what();
    std::replace(message.begin(), message.end(), '\n', ' ');
    std::cerr << "cpc-run: error: " << message << "\n";
    return 1;
  }
}
