//===- Launcher.h - starting a plan's ranks under mpirun, and their handshake -===//
//
// `cpc-run PLAN` on a multi-rank plan re-executes itself under mpirun (launchUnderMpi); each rank
// then joins the MPI world, checks its size and that all ranks read the same plan bytes, and runs
// (runRank). A rank that fails prints one line and aborts the job, so that the launcher can turn
// mpirun's exit into one line for the user.
//
#ifndef CPC_RUNTIME_LAUNCHER_H
#define CPC_RUNTIME_LAUNCHER_H

#include "runtime/Communicator.h"

#include <cstdint>
#include <functional>
#include <string>

namespace cpc {

/// Whether a plan for `worldSize` ranks must be started under mpirun by this process.
bool needsMpiLaunch(int worldSize);

/// Re-executes this program (same arguments) under `mpirun -np worldSize`, waits for it and
/// returns the exit code for main: 0; with `gracefulStop` (the ranks train), 128 + the signal
/// after a SIGINT or SIGTERM stopped them at a step boundary (forwarded to them as SIGUSR1, on
/// which they save; a second signal ends them at once; without it, the first does); or 1 after printing one line `cpc-run: error: ...` (the
/// failing rank's own message, or what mpirun says happened to it). The ranks' stderr goes to a
/// log file under $TMPDIR, kept and named on stderr only with `verbose`. stdout passes through.
int launchUnderMpi(int worldSize, int argc, char **argv, bool verbose, bool gracefulStop = false);

/// Under mpirun: makes the MPI communicator, checks the world has `worldSize` ranks and that every
/// rank's `planPath` has the same bytes, resets the counters, then returns `body(comm)`. Returns 1
/// on a size or plan mismatch (rank 0 prints the error). If `body` throws, the rank prints
/// `cpc-run: error: rank K: message` and aborts the whole job (never returns).
int runRank(int worldSize, const std::string &planPath, const std::function<int(Communicator &)> &body);

/// Asks for a graceful stop on SIGINT, SIGTERM and SIGUSR1 (what the launcher forwards to the
/// ranks): stopSignal() turns non-zero, and the training loop saves and ends at its next step
/// boundary. A second SIGINT or SIGTERM ends the process at once.
void installStopHandlers();
/// The signal that asked this process to stop, or 0.
int stopSignal();

/// A 64-bit hash of a file's bytes. Throws RuntimeError.
uint64_t hashFile(const std::string &path);

/// The one line describing how an mpirun job failed, from mpirun's stderr (`log`) and its wait
/// status; exposed for tests.
std::string describeMpiFailure(const std::string &log, int waitStatus);

} // namespace cpc

#endif
