//===- cpc-run.cpp - run a cpc plan ---------------------------------------===//
#include "runtime/Calibrate.h"
#include "runtime/Job.h"
#include "runtime/Launcher.h"
#include "runtime/Plan.h"

#include <algorithm>
#include <cstdlib>
#include <functional>
#include <iostream>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

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
  --data-decode fast|exact
                      fast (default): a JPEG whose crop is at least 2x the input size on each
                      side is decoded at 1/2, 1/4 or 1/8 in the DCT domain (as DALI and Pillow's
                      draft mode do), several times faster; exact: every image decoded whole,
                      the pixels torchvision's transforms give
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

/// cpc-run's flags: the job's options and the tool's own. cpc-run is the runtime's tool and links
/// no LLVM (the GPU bundle carries it without libLLVM), so it parses by hand rather than with
/// llvm::cl as cpc does.
struct RunFlags {
  cpc::JobOptions job;
  std::string planPath, pidFile;
  std::string calibratePath; // --calibrate FILE: measure a cost profile, no plan
  std::vector<std::string> calibratePlans; // --calibrate-plan PLAN: sample plans for the ops' rates
  int selfTestWorld = 0, failRank = -1, failStep = 0, ranks = 2;
  bool quick = false, verbose = false, help = false;
};

/// --input NAME=FILE, each name once.
void addInput(cpc::JobOptions &job, const std::string &spec) {
  size_t eq = spec.find('=');
  if (eq == std::string::npos || eq == 0 || eq + 1 == spec.size())
    throw UsageError("--input expects NAME=FILE, got '" + spec + "'");
  for (const auto &[name, file] : job.inputs)
    if (name == spec.substr(0, eq))
      throw UsageError("--input " + name + " is given twice ('" + file + "' and '" + spec.substr(eq + 1) + "')");
  job.inputs.push_back({spec.substr(0, eq), spec.substr(eq + 1)});
}

int positiveFlag(const std::string &flag, const std::string &v) {
  char *end = nullptr;
  long n = std::strtol(v.c_str(), &end, 10);
  if (v.empty() || *end || n < 1 || n > 1 << 20)
    throw UsageError(flag + " expects a positive integer, got '" + v + "'");
  return (int)n;
}

/// The flags of --calibrate and of the internal self-test; false when `arg` is none of them.
bool parseToolFlag(RunFlags &f, const std::string &arg, const std::function<std::string()> &value) {
  if (arg == "--calibrate")
    f.calibratePath = value();
  else if (arg == "--calibrate-plan")
    f.calibratePlans.push_back(value());
  else if (arg == "--ranks")
    f.ranks = positiveFlag(arg, value());
  else if (arg == "--quick")
    f.quick = true;
  else if (arg == "--self-test-world")
    f.selfTestWorld = positiveFlag(arg, value());
  else if (arg == "--self-test-fail-step")
    f.failStep = positiveFlag(arg, value());
  else if (arg == "--self-test-fail-rank") {
    std::string v = value();
    f.failRank = v == "0" ? 0 : positiveFlag(arg, v);
  } else if (arg == "--self-test-pid-file")
    f.pidFile = value();
  else
    return false;
  return true;
}

/// --data-decode fast|exact.
bool reducedDecodeFlag(const std::string &mode) {
  if (mode != "fast" && mode != "exact")
    throw UsageError("--data-decode expects fast or exact, got '" + mode + "'");
  return mode == "fast";
}

RunFlags parseRunFlags(int argc, char **argv) {
  RunFlags f;
  int i = 1;
  std::function<std::string()> value = [&]() -> std::string {
    if (i + 1 >= argc)
      throw UsageError(std::string(argv[i]) + " needs a value");
    return argv[++i];
  };
  for (; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--help" || arg == "-h")
      f.help = true;
    else if (arg == "--input")
      addInput(f.job, value());
    else if (arg == "--output-dir")
      f.job.outputDir = value();
    else if (arg == "--metrics")
      f.job.metricsPath = value();
    else if (arg == "--trace")
      f.job.tracePath = value();
    else if (arg == "--threads")
      f.job.threads = positiveFlag(arg, value());
    else if (arg == "--steps") {
      f.job.steps = positiveFlag(arg, value());
      f.job.stepsGiven = true;
    } else if (arg == "--data")
      f.job.dataPath = value();
    else if (arg == "--data-threads")
      f.job.dataThreads = positiveFlag(arg, value());
    else if (arg == "--data-decode")
      f.job.dataReducedDecode = reducedDecodeFlag(value());
    else if (arg == "--profile")
      f.job.profile = true;
    else if (arg == "--checkpoint-dir")
      f.job.checkpointDir = value();
    else if (arg == "--save-every")
      f.job.saveEvery = positiveFlag(arg, value());
    else if (arg == "--keep-checkpoints")
      f.job.keepCheckpoints = positiveFlag(arg, value());
    else if (arg == "--resume")
      f.job.resume = value();
    else if (arg == "--profile-shapes")
      f.job.profile = f.job.profileByShape = true;
    else if (arg == "--quiet")
      f.job.quiet = true;
    else if (arg == "--verbose")
      f.verbose = true;
    else if (parseToolFlag(f, arg, value))
      continue;
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
  if (f.job.saveEvery > 0 && f.job.checkpointDir.empty())
    throw UsageError("--save-every needs --checkpoint-dir");
  return f;
}

/// --calibrate: the cost profile of this machine (collectives over --ranks ranks, started under
/// mpirun as a plan's are; the kernels on rank 0), written by rank 0.
int calibrateMachine(const RunFlags &flags, int argc, char **argv) {
  auto body = [&](cpc::Communicator &comm) {
    cpc::CalibrationOptions options;
    options.threads = flags.job.threads;
    options.quick = flags.quick;
    options.log = comm.rank() == 0 && !flags.job.quiet ? &std::cout : nullptr;
    cpc::calibrateIntoFile(comm, options, flags.calibratePlans, flags.calibratePath);
    return 0;
  };
  if (flags.ranks == 1)
    return body(*cpc::makeSingleRankCommunicator());
  if (!cpc::launchedByMpi())
    return cpc::launchUnderMpi(flags.ranks, argc, argv, flags.verbose);
  return cpc::runRank(flags.ranks, "/proc/self/exe", body); // the handshake hashes this program
}

int run(int argc, char **argv) {
  RunFlags flags = parseRunFlags(argc, argv);
  if (flags.help) {
    std::cout << kUsage;
    return 0;
  }
  if (!flags.calibratePath.empty())
    return calibrateMachine(flags, argc, argv);
  if (flags.selfTestWorld > 0) {
    if (!cpc::launchedByMpi())
      return cpc::launchUnderMpi(flags.selfTestWorld, argc, argv, flags.verbose);
    return cpc::runRank(flags.selfTestWorld, flags.planPath, [&](cpc::Communicator &comm) {
      return cpc::runSelfTest(comm, flags.job.steps, flags.failRank, flags.failStep, flags.pidFile, flags.job.quiet);
    });
  }
  // Read (and validate) the plan before starting ranks, so that a bad plan fails once, here.
  // The tensors stay in the file: each rank copies out only what it keeps (its parameter blocks).
  auto plan = std::make_unique<cpc::Plan>(cpc::readPlan(flags.planPath, cpc::PlanBlob::InFile));
  const int world = plan->worldSize;
  cpc::checkBeforeLaunch(*plan, flags.planPath);
  if (!flags.job.outputDir.empty() && !cpc::launchedByMpi())
    cpc::prepareOutputDir(flags.job.outputDir); // before any rank starts
  if (cpc::needsMpiLaunch(world)) {
    bool training = plan->mode == cpc::PlanMode::Train;
    plan.reset(); // the ranks load their own copy
    return cpc::launchUnderMpi(world, argc, argv, flags.verbose, training);
  }
  if (cpc::launchedByMpi())
    return cpc::runRank(world, flags.planPath, [&](cpc::Communicator &comm) {
      return cpc::runJob(*plan, comm, flags.job);
    });
  return cpc::runJob(*plan, *cpc::makeSingleRankCommunicator(), flags.job);
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
