//===- Calibrate.cpp - cpc calibrate: its flags (the work is runtime/Calibrate) ===//
//
// The measurement needs MPI ranks and the runtime's kernels, which cpc-run owns (its launcher
// starts the ranks under mpirun as for a plan): cpc calibrate checks its flags and runs
// `cpc-run --calibrate` from the same directory.
#include "tools/cpc/Commands.h"

#include <climits>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <string>
#include <sys/wait.h>
#include <unistd.h>
#include <vector>

namespace cpc::tools {

namespace {
const char *kCalibrateUsage = R"(Usage: cpc calibrate -o PROFILE.json [--ranks N] [--threads T] [--plan PLAN.bin ...] [--quick]

Measures this machine's cost profile, which `cpc compile --profile` prices plans with (predicted
step times in cpc compile, cpc inspect and cpc-run): the collectives (all_reduce, all_gather,
reduce_scatter, all_to_all, broadcast_from, send) over N MPI ranks (default 2) at a few sizes,
each fitted to a latency and a bandwidth; then on every rank at once (sharing memory bandwidth
and caches as a plan's ranks do; the rates averaged over them) the CPU kernels on T threads
(default 1): GEMMs on a grid of shapes, attention, AdamW and memory-bound work; and, with
--plan, every op of the sample plans' steps at the sizes they run (the memory-bound ops differ
more than one rate can say). A few seconds.

Options:
  -o FILE        Where to write the profile (JSON; required)
  --ranks N      Ranks for the collectives (started under mpirun; 1: kernels only)
  --threads T    Kernel threads, as cpc-run --threads
  --plan PLAN    A one-rank plan (training or inference) whose steps are run on synthetic data
                 to measure each op's rate (repeatable)
  --quick        Fewer sizes, shorter timings (for tests)
)";

/// cpc-run beside this executable.
std::string runtimeTool() {
  char self[PATH_MAX] = {0};
  ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
  std::string dir = n > 0 ? std::string(self, n) : std::string("cpc");
  dir = dir.substr(0, dir.rfind('/') + 1);
  return dir + "cpc-run";
}

int positive(const std::string &flag, const char *value) {
  char *end = nullptr;
  long n = value ? std::strtol(value, &end, 10) : 0;
  if (!value || *end || n < 1 || n > 4096)
    throw UsageError(flag + " expects a positive integer, got '" + (value ? value : "") + "'");
  return (int)n;
}
} // namespace

int runCalibrate(int argc, char **argv) {
  std::vector<std::string> args{runtimeTool()};
  std::string output;
  for (int i = 2; i < argc; ++i) {
    std::string arg = argv[i];
    const char *value = i + 1 < argc ? argv[i + 1] : nullptr;
    if (arg == "--help" || arg == "-h") {
      std::cout << kCalibrateUsage;
      return 0;
    } else if (arg == "-o" && value) {
      output = value;
      ++i;
    } else if (arg == "--ranks" || arg == "--threads") {
      args.insert(args.end(), {arg, std::to_string(positive(arg, value))});
      ++i;
    } else if (arg == "--plan" && value) {
      args.insert(args.end(), {"--calibrate-plan", value});
      ++i;
    } else if (arg == "--quick") {
      args.push_back(arg);
    } else {
      throw UsageError("unknown option '" + arg + "' (see cpc calibrate --help)");
    }
  }
  if (output.empty())
    throw UsageError("'cpc calibrate' needs -o PROFILE.json");
  args.insert(args.begin() + 1, {"--calibrate", output});
  std::vector<char *> cargs;
  for (std::string &a : args)
    cargs.push_back(a.data());
  cargs.push_back(nullptr);
  std::cout.flush();
  pid_t pid = fork();
  if (pid == 0) {
    execv(cargs[0], cargs.data());
    std::cerr << "cpc: error: cannot run " << args[0] << ": " << std::strerror(errno) << "\n";
    _exit(1);
  }
  int status = 0;
  if (pid < 0 || waitpid(pid, &status, 0) < 0)
    throw std::runtime_error(std::string("cannot start ") + args[0] + ": " + std::strerror(errno));
  return WIFEXITED(status) ? WEXITSTATUS(status) : 1;
}

} // namespace cpc::tools
