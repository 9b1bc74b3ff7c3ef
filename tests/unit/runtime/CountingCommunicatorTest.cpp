//===- CountingCommunicatorTest.cpp - traffic counted in one place ---------===//
//
// The counting decorator's formulas (what a ring or chain sends from each rank) and that it
// counts each call of the communicator it wraps once, after the call returns: a failed call is
// not counted. The MPI ranks' counts are checked against these in tests/mpi.
//
#include "runtime/Communicator.h"

#include <gtest/gtest.h>

#include <stdexcept>
#include <vector>

using namespace cpc;

namespace {

TEST(CountingCommunicator, TrafficFollowsTheRingAndChainFormulas) {
  for (int n = 1; n <= 8; ++n) {
    const int64_t bytes = 4 * 1000003; // not a multiple of n
    EXPECT_EQ(traffic::allReduce(bytes, n), 2 * (n - 1) * bytes / n) << n;
    EXPECT_EQ(traffic::blockExchange(bytes, n), (n - 1) * bytes) << n;
    for (int root = 0; root < n; ++root) {
      int64_t broadcastTotal = 0, reduceTotal = 0;
      for (int position = 0; position < n; ++position) {
        broadcastTotal += traffic::broadcastFrom(bytes, n, position, root);
        reduceTotal += traffic::reduceTo(bytes, n, position, root);
        // The chain: the member before the root is the broadcast's last; the root is the reduce's.
        EXPECT_EQ(traffic::broadcastFrom(bytes, n, position, root),
                  n > 1 && position != (root + n - 1) % n ? bytes : 0);
        EXPECT_EQ(traffic::reduceTo(bytes, n, position, root), position != root ? bytes : 0);
      }
      EXPECT_EQ(broadcastTotal, (n - 1) * bytes);
      EXPECT_EQ(reduceTotal, (n - 1) * bytes);
    }
  }
  EXPECT_EQ(traffic::allReduce(8, 2), 8);
  EXPECT_EQ(traffic::broadcast(24, 4, 3, 3), 24);
  EXPECT_EQ(traffic::broadcast(24, 4, 2, 3), 0);
  EXPECT_EQ(traffic::broadcast(24, 1, 0, 0), 0); // one rank sends to no one
}

TEST(CountingCommunicator, CountsEachCallOnceAndNotAFailedOne) {
  std::unique_ptr<Communicator> comm = makeSingleRankCommunicator();
  std::vector<float> a(6, 1.0f), b(6);
  comm->allReduce(a.data(), 6, DType::F32, ReduceOp::Sum, {});
  comm->allReduce(a.data(), 6, DType::F32, ReduceOp::Max, {0});
  comm->allGather(a.data(), b.data(), 6, DType::F32, {});
  comm->barrier();
  Communicator::Transfer send = comm->postSend(a.data(), 8, 0, 3), recv = comm->postRecv(b.data(), 8, 0, 3);
  comm->wait(send);
  comm->wait(recv);
  EXPECT_EQ(comm->counts().at("all_reduce").calls, 2);
  EXPECT_EQ(comm->counts().at("all_reduce").bytes, 0); // one rank sends nothing
  EXPECT_EQ(comm->counts().at("all_gather").calls, 1);
  EXPECT_EQ(comm->counts().at("barrier").calls, 1);
  EXPECT_EQ(comm->counts().at("send").bytes, 8);
  EXPECT_EQ(comm->counts().at("recv").calls, 1);
  EXPECT_THROW(comm->allReduce(a.data(), 6, DType::F32, ReduceOp::Sum, {1}), std::exception); // no rank 1
  EXPECT_EQ(comm->counts().at("all_reduce").calls, 2);
  comm->resetCounts();
  EXPECT_TRUE(comm->counts().empty());
}

} // namespace
