//===- Job.cpp - one rank's run of a plan: data, steps, checkpoints, metrics --===//
#include "runtime/Job.h"

#include "runtime/Checkpoint.h"
#include "runtime/DataFeed.h"
#include "runtime/Device.h"
#include "runtime/Executor.h"
#include "runtime/InferenceRunner.h"
#include "runtime/JobReport.h"
#include "runtime/Launcher.h"
#include "runtime/MemoryProbe.h"
#include "runtime/ModelState.h"
#include "runtime/Progress.h"
#include "runtime/ScheduleCheck.h"
#include "runtime/TensorIO.h"
#include "runtime/Trace.h"
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

namespace cpc {
namespace {

using namespace progress;

/// Says on stderr which data inputs of a training plan nothing binds (they get deterministic
/// synthetic data), and that a plan compiled without weights starts from synthetic parameters:
/// neither is what a user should mistake for their own.
void noteSyntheticInputs(const Plan &plan, const std::vector<std::pair<std::string, std::string>> &inputs,
                         const DataFeed *feed) {
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

/// A training job on one rank: the trainer, its data, its checkpoints and what it prints.
class TrainingJob {
public:
  /// `modelStates` is computed before the memory probe starts (its maps are not the plan's memory).
  TrainingJob(const Plan &plan, Executor &executor, Communicator &comm, const JobOptions &options,
              MemoryProbe &probe, bool quiet, ModelStateBytes modelStates);
  /// Runs the steps; returns 0, or the signal that stopped the run.
  int run();

private:
  void openData();
  void openMetrics();
  void printHeader() const;
  /// --resume: loads the checkpoint; returns the step to continue from (0 without one).
  int64_t resume();
  void recordStep(int64_t step, const StepMetrics &m);
  void printStep(int64_t step, int64_t first, const StepMetrics &m);
  /// After step `done` (1-based): the ranks agree whether a signal asked them to stop, and with a
  /// checkpoint directory save when it is time (every saveEvery steps, the last step, a stop).
  /// Returns the stop signal (0: go on).
  int checkpointAfterStep(int64_t done);

  const Plan &plan_;
  Executor &executor_;
  Communicator &comm_;
  const JobOptions &options_;
  MemoryProbe &probe_;
  bool quiet_;
  Trainer trainer_;
  std::unique_ptr<DataFeed> feed_;
  ModelStateBytes modelStates_;
  std::ofstream metrics_;
  int64_t steps_;
  std::vector<double> stepSeconds_;
  int64_t dataBytes_ = 0; // the data pipeline's resident memory, measured when primed
};

TrainingJob::TrainingJob(const Plan &plan, Executor &executor, Communicator &comm, const JobOptions &options,
                         MemoryProbe &probe, bool quiet, ModelStateBytes modelStates)
    : plan_(plan), executor_(executor), comm_(comm), options_(options), probe_(probe), quiet_(quiet),
      trainer_(plan, executor, comm.rank(), executor.communicator(), &comm),
      modelStates_(std::move(modelStates)), steps_(options.steps) {
  openData();
  for (const auto &[name, file] : options_.inputs)
    trainer_.setBatchInput(name, readTensorFile(file));
  trainer_.useSyntheticData();
  if (comm_.rank() == 0)
    noteSyntheticInputs(plan_, options_.inputs, feed_.get());
  openMetrics();
}

/// A dataset: its reader, and its epoch length given to the LR schedule (without --steps, the
/// run trains the recipe's epochs).
void TrainingJob::openData() {
  if (options_.dataPath.empty())
    return;
  DataOptions data;
  data.path = options_.dataPath;
  data.threads = options_.dataThreads;
  data.reducedDecode = options_.dataReducedDecode;
  data.seed = (uint64_t)trainer_.recipe().seed;
  std::set<std::string> bound;
  for (const auto &[name, file] : options_.inputs)
    bound.insert(name);
  feed_ = std::make_unique<DataFeed>(plan_, trainer_, comm_.rank(), data, bound);
  if (feed_->stepsPerEpoch() != trainer_.recipe().stepsPerEpoch && !quiet_)
    std::cout << "steps per epoch: " << feed_->stepsPerEpoch() << " from the dataset (the config said "
              << trainer_.recipe().stepsPerEpoch << ")\n";
  trainer_.setStepsPerEpoch(feed_->stepsPerEpoch());
  if (!options_.stepsGiven)
    steps_ = std::min<int64_t>(trainer_.recipe().numEpochs * feed_->stepsPerEpoch(), INT32_MAX);
  if (!quiet_)
    std::cout << feed_->describe() << "\n";
}

void TrainingJob::openMetrics() {
  if (options_.metricsPath.empty() || comm_.rank() != 0) // every rank has the same (global) metrics
    return;
  metrics_.open(options_.metricsPath, std::ios::app);
  if (!metrics_)
    throw RuntimeError(options_.metricsPath + ": cannot write metrics");
}

void TrainingJob::printHeader() const {
  if (quiet_)
    return;
  const TrainRecipe &recipe = trainer_.recipe();
  std::cout << "training " << plan_.source << ": " << steps_ << " steps, global batch " << recipe.totalBatchSize
            << " (" << recipe.accumulation << " x " << trainer_.microbatch() << "), " << plan_.worldSize << " rank"
            << (plan_.worldSize > 1 ? "s" : "") << ", lr " << recipe.learningRate() << " (" << recipe.lrSchedule << ")"
            << (recipe.precision != "fp32" ? ", " + recipe.precision + " mixed precision" : std::string()) << "\n"
            << modelStates_.summary() << "\n";
}

int64_t TrainingJob::resume() {
  if (options_.resume.empty())
    return 0;
  std::string notes;
  TrainingPosition position = loadCheckpoint(plan_, executor_, comm_.rank(), options_.resume, &notes);
  trainer_.restoreCounters(position.optimizerSteps, position.skippedSteps);
  if (!quiet_) {
    std::cout << "resumed from " << findCheckpoint(options_.resume) << " at step " << position.step << "\n";
    if (!notes.empty())
      std::cerr << "cpc-run: note: " << notes << "\n";
    if (std::string differs = feed_ ? feed_->differsFrom(position.data) : ""; !differs.empty())
      std::cerr << "cpc-run: note: " << differs << "\n";
    if (position.step >= steps_)
      std::cout << "the checkpoint is at step " << position.step << ", --steps " << steps_
                << ": no step left to run\n";
  }
  return position.step;
}

void TrainingJob::recordStep(int64_t step, const StepMetrics &m) {
  if (!metrics_.is_open())
    return;
  nlohmann::json j = m.toJson();
  j["predicted_peak_bytes"] = plan_.predictedPeakBytes;
  j["measured_peak_bytes"] = measuredPeakBytes(plan_, executor_, probe_);
  j["model_state_bytes"] = modelStates_.total();
  j["predicted_step_s"] = predictedStepSeconds(plan_);
  if (feed_) {
    j["epoch"] = feed_->epochOf(step);
    j["data_s"] = feed_->lastWaitSeconds();
    j["images_per_thread_s"] = feed_->imagesPerThreadSecond();
    j["data_resident_bytes"] = dataBytes_;
  }
  metrics_ << j.dump() << "\n" << std::flush;
}

void TrainingJob::printStep(int64_t step, int64_t first, const StepMetrics &m) {
  if (quiet_)
    return;
  bool fp16 = trainer_.recipe().precision == "fp16";
  std::cout << progressBar(step + 1 - first, steps_ - first) << "step " << std::setw(5) << m.step << "/" << steps_
            << "  loss " << std::setprecision(6) << std::fixed << m.loss << std::defaultfloat << "  lr "
            << std::setprecision(4) << m.lr << "  grad_norm " << m.gradNorm
            << (fp16 ? "  scale " + formatScale(m.lossScale) : std::string())
            << (m.skipped ? "  skipped (overflow; " + std::to_string(m.skippedSteps) + " so far)" : std::string())
            << "  " << std::setprecision(3) << m.seconds << " s  " << std::setprecision(4) << m.samplesPerSecond
            << " samples/s" << (plan_.worldSize > 1 ? "  " + m.commSummary : std::string())
            << dataNote(feed_.get(), step) << eta(stepSeconds_, steps_ - step - 1);
  // On a terminal the line is redrawn, and kept at the end of each epoch.
  endProgressLine(step + 1 == steps_ || (feed_ && feed_->epochOf(step + 1) != feed_->epochOf(step)));
}

int TrainingJob::checkpointAfterStep(int64_t done) {
  double signal = stopSignal();
  if (comm_.size() > 1) { // the signal reaches the ranks at different steps: stop at the same one
    comm_.allReduce(&signal, 1, DType::F64, ReduceOp::Max, comm_.world());
    comm_.resetCounts(); // not the plan's communication
  }
  bool stop = signal != 0, last = done == steps_;
  bool due = !options_.checkpointDir.empty() &&
             (stop || last || (options_.saveEvery > 0 && done % options_.saveEvery == 0));
  if (due || stop)
    closeProgressLine();
  if (due) {
    TrainingPosition position{done, trainer_.optimizerSteps(), trainer_.skippedSteps()};
    if (feed_)
      position.data = feed_->position(done);
    auto start = std::chrono::steady_clock::now();
    std::string dir =
        saveCheckpoint(plan_, executor_, comm_, options_.checkpointDir, position, options_.keepCheckpoints);
    if (!quiet_)
      std::cout << "saved checkpoint " << dir << " ("
                << std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() << " s)\n"
                << std::flush;
  }
  if (stop && !quiet_)
    std::cout << "stopped by signal " << (int)signal << " after step " << done
              << (options_.checkpointDir.empty() ? " (no --checkpoint-dir: nothing saved)" : "") << "\n";
  return (int)signal;
}

int TrainingJob::run() {
  printHeader();
  int64_t first = resume();
  if (feed_ && first < steps_) { // its memory is measured with the plan's: it is set apart
    int64_t before = residentDataBytes();
    feed_->prime(first);
    dataBytes_ = std::max<int64_t>(residentDataBytes() - before, 0);
    if (!quiet_)
      std::cout << "data pipeline: " << dataBytes_ << " B resident per rank (decoding, steps read ahead)\n";
  }
  probe_.restartPeak(); // reading the checkpoint is not the plan's memory
  for (int64_t s = first; s < steps_; ++s) {
    if (feed_ && s != first)
      feed_->bind(s);
    StepMetrics m = trainer_.step(s);
    stepSeconds_.push_back(m.seconds);
    if (!std::isfinite(m.loss) && !m.skipped) // fp16: an overflow skips the step instead
      throw RuntimeError("step " + std::to_string(m.step) + ": the loss is not finite (" + std::to_string(m.loss) +
                         ")");
    recordStep(s, m);
    printStep(s, first, m);
    if (int signal = checkpointAfterStep(s + 1))
      return signal;
  }
  int64_t measured = largestMeasuredPeak(plan_, executor_, probe_, &comm_, dataBytes_);
  closeProgressLine();
  if (!quiet_)
    std::cout << memoryLine(plan_, measured, probe_, dataBytes_) << "\n"
              << stepTimeLine(plan_, stepSeconds_, "step") << "\n";
  if (!options_.outputDir.empty()) // every rank takes part in gathering sharded ones
    saveParameterFiles(plan_, executor_, comm_, comm_.rank() == 0 ? options_.outputDir : "");
  if (options_.profile)
    printProfile(executor_, options_.profileByShape);
  return 0;
}

/// Inference: `steps` runs of the plan on the bound (or synthetic) global batch; the outputs
/// printed and written to the output directory (rank 0), the mean time and the memory.
void infer(const Plan &plan, Executor &executor, Communicator &comm, const JobOptions &options, bool quiet,
           const MemoryProbe &probe) {
  InferenceRunner runner(plan, executor, comm.rank(), plan.worldSize > 1 ? &comm : nullptr);
  for (const auto &[name, file] : options.inputs)
    runner.setBatchInput(name, readTensorFile(file));
  std::vector<std::string> synthetic = runner.useSyntheticData();
  if (!quiet && !synthetic.empty()) {
    std::cout << "synthetic data for:";
    for (const auto &n : synthetic)
      std::cout << " " << n;
    std::cout << "\n";
  }
  const int steps = options.steps;
  std::vector<double> runSeconds;
  for (int s = 0; s < steps; ++s) {
    auto start = std::chrono::steady_clock::now();
    runner.run();
    executor.synchronize(); // the time of the work, not of queueing it (and its faults)
    runSeconds.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  double seconds = std::accumulate(runSeconds.begin(), runSeconds.end(), 0.0);
  if (Communicator *c = executor.communicator(); c && plan.worldSize > 1) {
    if (!quiet) { // before the outputs' broadcasts, which are the runner's, not the plan's
      std::cout << "communication per run (rank 0):";
      for (const auto &[kind, count] : c->counts())
        std::cout << " " << kind << " " << count.calls / steps << " calls " << count.bytes / steps << " B;";
      std::cout << "\n";
    }
    c->resetCounts();
  }
  const std::string outputDir = comm.rank() == 0 ? options.outputDir : "";
  for (const std::string &name : runner.outputNames()) {
    HostTensor host = runner.output(name); // every rank takes part (a broadcast from its producer)
    TensorRef t = host.ref();
    if (!quiet)
      std::cout << name << ": " << dtypeName(t.dtype) << shapeString(t.shape) << " = [" << formatValues(t, 8) << "]\n";
    if (!outputDir.empty())
      writeNpy(outputDir + "/" + name + ".npy", t);
  }
  int64_t measured = largestMeasuredPeak(plan, executor, probe, executor.communicator());
  if (quiet)
    return;
  struct rusage usage;
  getrusage(RUSAGE_SELF, &usage);
  MemoryStats mem = executor.memoryStats();
  std::cout << "time: " << seconds / steps * 1e3 << " ms per run of " << runner.globalBatch() << " samples (" << steps
            << " run" << (steps > 1 ? "s" : "") << ", " << options.threads << " thread"
            << (options.threads > 1 ? "s" : "") << ")\n"
            << stepTimeLine(plan, runSeconds, "run") << "\n"
            << memoryLine(plan, measured, probe) << "\n"
            << "memory: predicted peak " << plan.predictedPeakBytes << " B, allocated " << mem.total()
            << " B (arena " << mem.arenaBytes << ", parameters " << mem.parameterBytes << ", constants "
            << mem.constantBytes << ", inputs " << mem.inputBytes << "), max RSS " << usage.ru_maxrss * 1024 << " B\n";
}

/// The CPU-threads warnings of one machine (from local rank 0 only).
void warnAboutThreads(const Plan &plan, int threads) {
  if (plan.device != DeviceKind::Cpu || localRank() != 0)
    return;
  std::string crowded = oversubscriptionWarning(localRanks(), threads,
                                                std::max(1u, std::thread::hardware_concurrency()), availableCores());
  if (!crowded.empty())
    std::cerr << "cpc-run: warning: " << crowded << "\n";
  std::string gemmNote = gemmThreadsNote(threads);
  if (!gemmNote.empty())
    std::cerr << "cpc-run: note: " << gemmNote << "\n";
}

} // namespace

int runJob(const Plan &plan, Communicator &comm, const JobOptions &options) {
  bool training = plan.mode == PlanMode::Train;
  ModelStateBytes modelStates = training ? modelStateBytes(plan, comm.rank()) : ModelStateBytes{};
  MemoryProbe probe;
  probe.start();
  bool quiet = options.quiet || comm.rank() != 0;
  if (!training && (!options.checkpointDir.empty() || !options.resume.empty()))
    throw RuntimeError("--checkpoint-dir and --resume are for training; this plan is for inference");
  if (!training && !options.metricsPath.empty())
    throw RuntimeError("--metrics records training steps; this plan is for inference");
  if (!training && !options.dataPath.empty())
    throw RuntimeError("--data feeds training steps; this plan is for inference (use --input)");
  if (training)
    installStopHandlers(); // SIGINT, SIGTERM (SIGUSR1 from the launcher): save, then stop
  std::unique_ptr<TraceRecorder> trace;
  if (!options.tracePath.empty())
    trace = std::make_unique<TraceRecorder>(comm.rank());
  // The device of this rank (GPU r for local rank r on a cuda plan) and the communicator its
  // steps use: NCCL between GPUs; `comm` (MPI) stays for values the host exchanges.
  std::unique_ptr<Device> device = makeDevice(plan.device, localRank());
  warnAboutThreads(plan, options.threads);
  std::unique_ptr<Communicator> deviceComm;
  if (plan.device == DeviceKind::Cuda)
    deviceComm = makeNcclCommunicator(*device, comm);
  ExecutorOptions executorOptions{comm.rank(), options.threads, options.profile,
                                  deviceComm ? deviceComm.get() : &comm};
  executorOptions.trace = trace.get();
  executorOptions.device = device.get();
  Executor executor(plan, executorOptions);
  if (!options.outputDir.empty() && comm.rank() == 0)
    prepareOutputDir(options.outputDir);
  int signal = 0;
  if (training) {
    signal = TrainingJob(plan, executor, comm, options, probe, quiet, std::move(modelStates)).run();
  } else {
    infer(plan, executor, comm, options, quiet, probe);
    if (options.profile)
      printProfile(executor, options.profileByShape);
  }
  if (trace)
    finishTrace(plan, options.tracePath, *trace, comm, quiet);
  if (signal)
    return launchedByMpi() ? 0 : 128 + signal; // under mpirun the launcher reports it
  return 0;
}

void prepareOutputDir(const std::string &dir) {
  mkdir(dir.c_str(), 0755);
  struct stat st;
  if (stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode))
    throw RuntimeError(dir + ": cannot create the output directory");
  std::string probe = dir + "/.cpc-run-write-test-" + std::to_string(getpid());
  int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_EXCL, 0644);
  if (fd < 0)
    throw RuntimeError(dir + ": cannot write into the output directory: " + std::strerror(errno));
  ::close(fd);
  ::unlink(probe.c_str());
}

void checkBeforeLaunch(const Plan &plan, const std::string &planPath) {
  if (launchedByMpi())
    return;
  // Whoever wrote it, a plan in which some rank would wait forever does not start (cpc compile
  // runs the same check; this covers plans from elsewhere).
  if (std::string problem = checkPlanSchedule(plan); !problem.empty())
    throw RuntimeError(planPath + ": the plan would hang, " + problem);
  if (plan.device != DeviceKind::Cuda)
    return;
  std::string why;
  int gpus = cudaDeviceCount(&why);
  if (gpus == 0)
    throw RuntimeError(planPath + ": this plan runs on CUDA GPUs and this machine has none (" + why + ")");
  if (gpus < plan.worldSize)
    throw RuntimeError(planPath + ": this plan runs " + std::to_string(plan.worldSize) +
                       " ranks, one per GPU, and this machine has " + std::to_string(gpus) +
                       " GPUs (start the ranks on several machines with mpirun -H)");
}

int runSelfTest(Communicator &comm, int steps, int failRank, int failStep, const std::string &pidFile, bool quiet) {
  if (!pidFile.empty())
    std::ofstream(pidFile, std::ios::app) << comm.rank() << " " << getpid() << "\n" << std::flush;
  for (int s = 1; s <= steps; ++s) {
    if (comm.rank() == failRank && s == failStep)
      throw RuntimeError("self-test failure at step " + std::to_string(s));
    double value = comm.rank() + 1;
    comm.allReduceSum(&value, 1, DType::F64, {});
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    if (comm.rank() == 0 && !quiet)
      std::cout << "step " << s << "/" << steps << "  all_reduce " << value << "  " << formatCommCounts(comm) << "\n"
                << std::flush;
    comm.resetCounts();
  }
  return 0;
}

} // namespace cpc
