//===- Launcher.cpp - starting a plan's ranks under mpirun, and their handshake -===//
#include "runtime/Launcher.h"

#include <algorithm>
#include <chrono>
#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <fstream>
#include <functional>
#include <iostream>
#include <regex>
#include <sstream>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>
#include <vector>

extern char **environ;

namespace cpc {
namespace {

pid_t mpirunPid = 0;
volatile std::sig_atomic_t launcherStop = 0;
bool stopGracefully = false; // the ranks train: they save and stop on SIGUSR1

// Ctrl-C or a kill of cpc-run must not leave mpirun and its ranks running. The first asks the
// ranks to stop at a step boundary (mpirun forwards SIGUSR1 to them; they save a checkpoint
// first); a second one ends them at once.
void forwardSignal(int sig) {
  if (mpirunPid > 0)
    kill(mpirunPid, launcherStop || !stopGracefully ? sig : SIGUSR1);
  launcherStop = sig;
}

volatile std::sig_atomic_t rankStop = 0;

void requestStop(int sig) {
  if (rankStop && sig != SIGUSR1) {
    std::signal(sig, SIG_DFL);
    std::raise(sig);
  }
  rankStop = sig;
}

std::string selfExecutable(const char *argv0) {
  char buf[4096];
  ssize_t n = readlink("/proc/self/exe", buf, sizeof buf - 1);
  return n > 0 ? std::string(buf, n) : std::string(argv0);
}

std::string readAll(const std::string &path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream os;
  os << in.rdbuf();
  return os.str();
}

/// Starts mpirun with `args` and `env`, its stderr into `logFd` (closed here), and returns its
/// pid; calls `failed(errno)` (which throws) when it cannot start. mpirun runs in its own process
/// group, so a Ctrl-C on the terminal reaches cpc-run alone, which asks the ranks to stop
/// gracefully instead of mpirun killing them; and it gets SIGTERM (ending its ranks) if cpc-run
/// dies, so a killed launcher leaves nothing running. A pipe closed by the exec tells whether
/// mpirun started.
pid_t startMpirun(std::vector<std::string> &args, std::vector<std::string> &env, int logFd,
                  const std::function<void(int)> &failed) {
  std::vector<char *> cargs, cenv;
  for (auto &a : args)
    cargs.push_back(a.data());
  cargs.push_back(nullptr);
  for (auto &e : env)
    cenv.push_back(e.data());
  cenv.push_back(nullptr);
  int startPipe[2];
  if (pipe2(startPipe, O_CLOEXEC) != 0) {
    close(logFd);
    failed(errno);
  }
  int devNull = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  pid_t parent = getpid();
  std::cout.flush();
  pid_t pid = fork();
  if (pid == 0) {
    setpgid(0, 0);
    prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (getppid() != parent)
      _exit(127);
    dup2(devNull, 0); // mpirun would forward our stdin to rank 0; the ranks never read it
    dup2(logFd, 2);
    execvpe("mpirun", cargs.data(), cenv.data());
    int err = errno;
    ssize_t ignored = write(startPipe[1], &err, sizeof err);
    (void)ignored;
    _exit(127);
  }
  close(startPipe[1]);
  close(devNull);
  close(logFd);
  int rc = pid < 0 ? errno : 0;
  if (pid > 0 && read(startPipe[0], &rc, sizeof rc) != sizeof rc)
    rc = 0; // the exec closed the pipe: mpirun runs
  close(startPipe[0]);
  if (rc != 0) {
    if (pid > 0)
      waitpid(pid, nullptr, 0);
    failed(rc);
  }
  return pid;
}

} // namespace

bool needsMpiLaunch(int worldSize) { return worldSize > 1 && !launchedByMpi(); }

int launchUnderMpi(int worldSize, int argc, char **argv, bool verbose, bool gracefulStop) {
  stopGracefully = gracefulStop;
  std::vector<std::string> args = {"mpirun", "-np", std::to_string(worldSize), "--oversubscribe", "--bind-to", "none",
                                   // A rank that exits non-zero or dies by a signal ends the whole job.
                                   "--mca", "orte_abort_on_non_zero_status", "1"};
  // mpirun hands the ranks a pseudo-terminal whatever its own output is: tell rank 0 whether
  // its lines reach a terminal.
  setenv("CPC_PROGRESS_TTY", isatty(STDOUT_FILENO) ? "1" : "0", 1);
  for (const char *var : {"OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "CPC_PROGRESS_TTY"})
    if (std::getenv(var))
      args.insert(args.end(), {"-x", var});
  args.push_back(selfExecutable(argv[0]));
  for (int i = 1; i < argc; ++i)
    args.push_back(argv[i]);

  std::vector<std::string> env;
  for (char **e = environ; *e; ++e)
    if (std::strncmp(*e, "OMPI_ALLOW_RUN_AS_ROOT", 22) != 0)
      env.push_back(*e);
  // Containers and CI run as root; mpirun refuses that without both variables.
  env.push_back("OMPI_ALLOW_RUN_AS_ROOT=1");
  env.push_back("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1");

  const char *tmp = std::getenv("TMPDIR");
  std::string logPath = std::string(tmp && *tmp ? tmp : "/tmp") + "/cpc-run-XXXXXX";
  std::vector<char> tmpl(logPath.begin(), logPath.end());
  tmpl.push_back('\0');
  int logFd = mkstemp(tmpl.data());
  if (logFd < 0)
    throw RuntimeError(logPath + ": cannot create the ranks' log file: " + std::strerror(errno));
  logPath = tmpl.data();

  pid_t pid = startMpirun(args, env, logFd, [&](int err) {
    unlink(logPath.c_str());
    throw RuntimeError(std::string("cannot start mpirun for ") + std::to_string(worldSize) +
                       " ranks: " + std::strerror(err));
  });
  mpirunPid = pid;
  auto oldInt = std::signal(SIGINT, forwardSignal);
  auto oldTerm = std::signal(SIGTERM, forwardSignal);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  std::signal(SIGINT, oldInt);
  std::signal(SIGTERM, oldTerm);
  mpirunPid = 0;

  bool ok = WIFEXITED(status) && WEXITSTATUS(status) == 0;
  if (ok && launcherStop && stopGracefully) {
    unlink(logPath.c_str());
    return 128 + launcherStop;
  }
  bool keepLog = verbose;
  if (!ok) {
    std::string log = readAll(logPath);
    // A rank stopped by a sanitizer's report has no error line of its own: the report is the
    // only clue, so the log stays and the line says where.
    bool report = log.find("cpc-run: error: ") == std::string::npos &&
                  (log.find("Sanitizer") != std::string::npos || log.find("runtime error:") != std::string::npos);
    std::cerr << "cpc-run: error: " << describeMpiFailure(log, status)
              << (report && !verbose ? " (the ranks' stderr, with the sanitizer's report: " + logPath + ")" : "")
              << "\n";
    keepLog |= report;
  }
  if (verbose)
    std::cerr << "cpc-run: the ranks' stderr is in " << logPath << "\n";
  else if (!keepLog)
    unlink(logPath.c_str());
  return ok ? 0 : 1;
}

void installStopHandlers() {
  for (int sig : {SIGINT, SIGTERM, SIGUSR1})
    std::signal(sig, requestStop);
}

int stopSignal() { return rankStop; }

std::string describeMpiFailure(const std::string &log, int waitStatus) {
  // A rank's own message comes first: it says why, mpirun only says how.
  std::istringstream lines(log);
  for (std::string line; std::getline(lines, line);)
    if (line.rfind("cpc-run: error: ", 0) == 0)
      return line.substr(16);
  // mpirun wraps its messages; match over one line.
  std::string flat = log;
  std::replace(flat.begin(), flat.end(), '\n', ' ');
  std::smatch m;
  if (std::regex_search(flat, m, std::regex(R"(process rank (\d+) with PID \d+ on node \S+ exited on signal (\d+) \(([^)]*)\))")))
    return "rank " + m[1].str() + " exited on signal " + m[2].str() + " (" + m[3].str() + ")";
  if (std::regex_search(flat, m, std::regex(R"(process rank (\d+) with PID \d+ on node \S+ exited on signal (\d+))")))
    return "rank " + m[1].str() + " exited on signal " + m[2].str();
  if (std::regex_search(flat, m, std::regex(R"(MPI_ABORT was invoked on rank (\d+)\D+?errorcode (-?\d+))")))
    return "rank " + m[1].str() + " aborted the job (MPI_Abort, error code " + m[2].str() + ")";
  if (std::regex_search(flat, m, std::regex(R"(Process name:\s*\[\[\d+,\d+\],(\d+)\]\s*Exit code:\s*(-?\d+))")))
    return "rank " + m[1].str() + " exited with code " + m[2].str();
  std::string how = WIFSIGNALED(waitStatus) ? "mpirun was killed by signal " + std::to_string(WTERMSIG(waitStatus))
                                            : "mpirun failed with exit code " + std::to_string(WEXITSTATUS(waitStatus));
  // mpirun's own complaint (not enough slots, cannot start a program, ...): its first text line.
  std::istringstream again(log);
  for (std::string line; std::getline(again, line);)
    if (!line.empty() && line[0] != '-' && line[0] != ' ' && line[0] != '\t')
      return how + ": " + line;
  return how;
}

uint64_t hashFile(const std::string &path) {
  std::ifstream in(path, std::ios::binary);
  if (!in)
    throw RuntimeError(path + ": cannot read the file");
  // FNV-1a over 8-byte words with a final avalanche: fast on GB-sized plans, and any changed
  // byte changes the result (equality check only, not security).
  uint64_t h = 1469598103934665603ull, total = 0;
  std::vector<char> buf(1 << 20);
  while (in) {
    in.read(buf.data(), buf.size());
    size_t n = in.gcount();
    total += n;
    std::memset(buf.data() + n, 0, (8 - n % 8) % 8);
    for (size_t i = 0; i < n; i += 8) {
      uint64_t w;
      std::memcpy(&w, buf.data() + i, 8);
      h = (h ^ w) * 1099511628211ull;
    }
  }
  h ^= total;
  h ^= h >> 33;
  h *= 0xff51afd7ed558ccdull;
  h ^= h >> 33;
  return h;
}

int runRank(int worldSize, const std::string &planPath, const std::function<int(Communicator &)> &body) {
  std::unique_ptr<Communicator> comm;
  try {
    comm = makeMpiCommunicator();
    if (comm->size() != worldSize) {
      if (comm->rank() == 0)
        std::cerr << "cpc-run: error: the plan was compiled for " << worldSize << " ranks but runs on "
                  << comm->size() << "\n";
      return 1;
    }
    uint64_t hash = hashFile(planPath);
    std::vector<uint64_t> hashes(comm->size());
    comm->allGather(&hash, hashes.data(), 1, DType::I64, {});
    std::string differ;
    for (int r = 1; r < comm->size(); ++r)
      if (hashes[r] != hashes[0])
        differ += (differ.empty() ? "" : ", ") + std::to_string(r);
    if (!differ.empty()) {
      if (comm->rank() == 0)
        std::cerr << "cpc-run: error: " << planPath << ": rank" << (differ.find(',') == std::string::npos ? " " : "s ")
                  << differ << " read different plan bytes than rank 0\n";
      return 1;
    }
    comm->resetCounts();
    return body(*comm);
  } catch (const std::exception &e) {
    std::string message = e.what();
    std::replace(message.begin(), message.end(), '\n', ' ');
    const char *envRank = std::getenv("OMPI_COMM_WORLD_RANK");
    std::string prefix = "rank " + (comm ? std::to_string(comm->rank()) : envRank ? envRank : "?") + ": ";
    // Communicator errors already name the rank.
    if (message.rfind(prefix, 0) == 0)
      message = message.substr(prefix.size());
    std::cerr << "cpc-run: error: " << prefix << message << "\n" << std::flush;
    // Let mpirun forward the line before MPI_Abort tears the job down (its I/O forwarding drops
    // output that is still in flight).
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    abortMpiJob(1);
  }
}

} // namespace cpc
