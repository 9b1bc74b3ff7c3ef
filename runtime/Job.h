//===- Job.h - one rank's run of a plan: data, steps, checkpoints, metrics --===//
//
// What `cpc-run PLAN` does on each rank once the ranks are up: a training job binds its data (a
// fixed batch, a dataset or synthetic), resumes from a checkpoint, runs the steps with metrics,
// progress and checkpoints, stops on a signal at a step boundary, and reports memory and time
// against the plan's predictions; an inference job runs the plan and writes its outputs. The
// tool only parses flags into JobOptions: the run loop lives here, so that other front ends (a
// test, a server) run plans the same way.
//
#ifndef CPC_RUNTIME_JOB_H
#define CPC_RUNTIME_JOB_H

#include "runtime/Communicator.h"
#include "runtime/Plan.h"

#include <string>
#include <utility>
#include <vector>

namespace cpc {

struct JobOptions {
  std::vector<std::pair<std::string, std::string>> inputs; // --input NAME=FILE
  std::string outputDir;   // outputs (inference) or final parameters (training), rank 0
  std::string metricsPath; // one JSON line per training step
  std::string tracePath;   // a Chrome trace of every rank
  std::string dataPath;    // an ImageFolder directory or a .npy dataset
  int dataThreads = 2;
  bool dataReducedDecode = true; // --data-decode fast (false: exact, torchvision's pixels)
  std::string checkpointDir, resume;
  int saveEvery = 0, keepCheckpoints = 2;
  int threads = 1;
  int steps = 1;           // training: the step to train up to; inference: runs
  bool stepsGiven = false; // without it, a dataset trains NUM_EPOCHS epochs
  bool quiet = false, profile = false, profileByShape = false;
};

/// Runs `plan` on this process's rank of `comm` (every rank calls it; rank 0 prints). Returns the
/// exit code: 0, or 128 + the signal that stopped a training run (not under mpirun, whose
/// launcher reports it). Throws RuntimeError on bad options or data.
int runJob(const Plan &plan, Communicator &comm, const JobOptions &options);

/// Creates `dir` if needed and checks that a file can be written into it, so that a bad output
/// directory fails before the first step rather than after the last.
void prepareOutputDir(const std::string &dir);

/// Refuses, once and before any rank starts, a plan that would hang or needs GPUs this machine
/// lacks (nothing under mpirun: the launching process checked).
void checkBeforeLaunch(const Plan &plan, const std::string &planPath);

/// The multi-process layer alone, for tests: `steps` steps of one all-reduce each, `failRank`
/// throwing at `failStep`; each rank appends "RANK PID" to `pidFile` when given.
int runSelfTest(Communicator &comm, int steps, int failRank, int failStep, const std::string &pidFile, bool quiet);

} // namespace cpc

#endif
