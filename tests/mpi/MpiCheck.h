//===- MpiCheck.h - checks for the plain MPI test programs ----------------===//
//
// The MPI tests are plain programs, not gtest: every rank must run every check, in the same
// order, or the collectives would hang. Each rank counts its checks; finish() sums them over
// the job and rank 0 prints "N passed, N failed".
//
#ifndef CPC_TESTS_MPI_MPICHECK_H
#define CPC_TESTS_MPI_MPICHECK_H

#include "runtime/Communicator.h"

#include <cstdio>
#include <memory>
#include <string>

namespace cpc::mpitest {

inline int passed = 0, failed = 0, myRank = 0;

inline void check(bool ok, const std::string &what) {
  if (ok) {
    ++passed;
  } else {
    ++failed;
    std::printf("rank %d: FAIL %s\n", myRank, what.c_str());
    std::fflush(stdout);
  }
}

/// This rank's MPI communicator, or null after printing why there is none (main then fails).
inline std::unique_ptr<Communicator> start() {
  try {
    auto comm = makeMpiCommunicator();
    myRank = comm->rank();
    return comm;
  } catch (const std::exception &e) {
    std::printf("cannot make the MPI communicator: %s\n0 passed, 1 failed\n", e.what());
    return nullptr;
  }
}

/// Sums the ranks' counts; returns main's exit code.
inline int finish(Communicator &comm) {
  int64_t totals[2] = {passed, failed};
  comm.allReduceSum(totals, 2, DType::I64, {});
  if (comm.rank() == 0)
    std::printf("%lld passed, %lld failed\n", (long long)totals[0], (long long)totals[1]);
  return totals[1] ? 1 : 0;
}

} // namespace cpc::mpitest

#endif
