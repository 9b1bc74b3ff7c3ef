//===- NcclCommunicatorTest.cpp - the NCCL communicator on one GPU ---------===//
//
// A world of one rank on GPU 0 (the single-rank communicator carries the bootstrap): every
// collective is an identity or a copy, point-to-point transfers go to the rank itself, counters
// follow the MPI formulas, host buffers go through the world, and bad calls fail with the MPI
// communicator's words. Several ranks: tests/gpu/nccl_ranks.cpp under mpirun.
//
#include "runtime/Communicator.h"
#include "tests/unit/TestUtil.h"
#include "tests/gpu/DeviceBytes.h"
#include "tests/gpu/GpuTestUtil.h"

#include <cstdlib>

using namespace cpc;
using cpc::test::expectError;
using namespace cpc::gputest;

namespace {

/// `count` elements of `type` with small exact values (they survive any element type).
Bytes values(DType type, int64_t count, int salt) {
  return elementBytes(type, count, [&](int64_t i) { return double((salt * 7 + i * 3) % 11) - 3; });
}

CollectiveCount countOf(const Communicator &c, const std::string &kind) {
  auto it = c.counts().find(kind);
  return it == c.counts().end() ? CollectiveCount{} : it->second;
}

const DType kTypes[] = {DType::F32, DType::F64, DType::F16, DType::BF16, DType::I64, DType::I32};

TEST(NcclCommunicatorTest, CollectivesOfOneRankAreIdentities) {
  CPC_REQUIRE_GPU(device);
  auto world = makeSingleRankCommunicator();
  auto comm = makeNcclCommunicator(*device, *world);
  EXPECT_EQ(comm->rank(), 0);
  EXPECT_EQ(comm->size(), 1);
  for (DType type : kTypes) {
    SCOPED_TRACE(dtypeName(type));
    for (int64_t count : {int64_t(1), int64_t(1000), int64_t(300007)}) {
      SCOPED_TRACE(count);
      const Bytes in = values(type, count, 1), other = values(type, count, 2);
      for (const std::vector<int> &group : {std::vector<int>{}, std::vector<int>{0}}) {
        DeviceBytes data(device, in), out(device, other);
        comm->allReduce(data.ptr, count, type, ReduceOp::Sum, group);
        comm->allReduce(data.ptr, count, type, ReduceOp::Max, group);
        comm->broadcastFrom(data.ptr, count, type, 0, group);
        EXPECT_EQ(data.download(), in);
        comm->allGather(data.ptr, out.ptr, count, type, group);
        EXPECT_EQ(out.download(), in);
        DeviceBytes out2(device, other);
        comm->reduceScatter(data.ptr, out2.ptr, count, type, ReduceOp::Sum, group);
        EXPECT_EQ(out2.download(), in);
        DeviceBytes out3(device, other);
        comm->allToAll(data.ptr, out3.ptr, count, type, group);
        EXPECT_EQ(out3.download(), in);
        DeviceBytes out4(device, other);
        comm->reduceTo(data.ptr, out4.ptr, count, type, ReduceOp::Sum, 0, group);
        EXPECT_EQ(out4.download(), in);
      }
    }
  }
  // One rank sends nothing (the MPI formulas with n = 1), every call counted.
  for (const char *kind : {"all_reduce", "broadcast_from", "all_gather", "reduce_scatter", "all_to_all", "reduce_to"}) {
    EXPECT_EQ(countOf(*comm, kind).bytes, 0) << kind;
    EXPECT_EQ(countOf(*comm, kind).calls, (std::string(kind) == "all_reduce" ? 2 : 1) * 6 * 3 * 2) << kind;
  }
}

TEST(NcclCommunicatorTest, BroadcastBarrierAndCounters) {
  CPC_REQUIRE_GPU(device);
  auto world = makeSingleRankCommunicator();
  auto comm = makeNcclCommunicator(*device, *world);
  const Bytes text = {'f', 'r', 'o', 'm', ' ', '0', 0, 0};
  DeviceBytes data(device, text);
  comm->broadcast(data.ptr, (int64_t)text.size(), 0);
  EXPECT_EQ(data.download(), text);
  comm->barrier();
  EXPECT_EQ(countOf(*comm, "broadcast").calls, 1);
  EXPECT_EQ(countOf(*comm, "broadcast").bytes, 0); // one rank sends to no one (the counting decorator's rule for every kind)
  EXPECT_EQ(countOf(*comm, "barrier").calls, 1);
  EXPECT_EQ(formatCommCounts(*comm), "comm 2 calls 0 B");
  comm->resetCounts();
  EXPECT_TRUE(comm->counts().empty());
  // Empty calls do nothing but are counted.
  comm->allReduce(nullptr, 0, DType::F32, ReduceOp::Sum, {});
  comm->allGather(nullptr, nullptr, 0, DType::BF16, {});
  EXPECT_EQ(countOf(*comm, "all_reduce").calls, 1);
  EXPECT_EQ(countOf(*comm, "all_gather").calls, 1);
}

TEST(NcclCommunicatorTest, HostBuffersGoThroughTheWorld) {
  CPC_REQUIRE_GPU(device);
  auto world = makeSingleRankCommunicator();
  auto comm = makeNcclCommunicator(*device, *world);
  double value = 2.5;
  comm->broadcast(&value, sizeof value, 0);
  EXPECT_EQ(value, 2.5);
  int64_t hash = 42, hashes[1] = {0};
  comm->allGather(&hash, hashes, 1, DType::I64, {});
  EXPECT_EQ(hashes[0], 42);
  EXPECT_EQ(countOf(*comm, "all_gather").calls, 1);
  EXPECT_EQ(countOf(*world, "all_gather").calls, 1);
  DeviceBytes onDevice(device, values(DType::F32, 4, 0));
  float host[4] = {};
  expectError([&] { comm->allGather(onDevice.ptr, host, 4, DType::F32, {}); },
              {"rank 0", "all_gather", "partly device and partly host memory"});
}

TEST(NcclCommunicatorTest, PointToPointToItself) {
  CPC_REQUIRE_GPU(device);
  auto world = makeSingleRankCommunicator();
  auto comm = makeNcclCommunicator(*device, *world);
  comm->preparePeers({0});
  const Bytes a = values(DType::F32, 1000, 3), zeros(4000, 0);
  DeviceBytes src(device, a), dst(device, zeros), dst2(device, zeros);
  comm->resetCounts();
  // Send first, then receive; then a receive posted before its send.
  comm->send(src.ptr, 4000, 0, 4);
  comm->recv(dst.ptr, 4000, 0, 4);
  EXPECT_EQ(dst.download(), a);
  Communicator::Transfer early = comm->postRecv(dst2.ptr, 4000, 0, 5);
  EXPECT_FALSE(comm->test(early));
  comm->send(src.ptr, 4000, 0, 5);
  EXPECT_TRUE(comm->test(early));
  EXPECT_EQ(dst2.download(), a);
  EXPECT_EQ(countOf(*comm, "send").calls, 2);
  EXPECT_EQ(countOf(*comm, "send").bytes, 8000);
  EXPECT_EQ(countOf(*comm, "recv").calls, 2);
  EXPECT_EQ(countOf(*comm, "recv").bytes, 0);
  // A buffered send copies: the source may change right after, the receiver gets the old bytes.
  DeviceBytes changing(device, a), got(device, zeros);
  comm->sendBuffered(changing.ptr, 4000, 0, 9);
  EXPECT_EQ(comm->bufferedSendBytes(), 4000);
  device->fillZero(changing.ptr, 4000);
  comm->recv(got.ptr, 4000, 0, 9);
  comm->reapSends();
  comm->completeSends();
  EXPECT_EQ(comm->bufferedSendBytes(), 0);
  EXPECT_EQ(got.download(), a);
  expectError([&] { comm->recv(dst.ptr, 4000, 0, 6); }, {"channel 6", "no matching send"});
  comm->send(src.ptr, 4000, 0, 7);
  expectError([&] { comm->recv(dst.ptr, 8, 0, 7); }, {"channel 7", "expects 8 B", "4000 B"});
}

TEST(NcclCommunicatorTest, BadCallsFailWithTheMpiWords) {
  CPC_REQUIRE_GPU(device);
  auto world = makeSingleRankCommunicator();
  auto comm = makeNcclCommunicator(*device, *world);
  DeviceBytes data(device, values(DType::F32, 4, 0)), out(device, values(DType::F32, 4, 1));
  comm->resetCounts();
  expectError([&] { comm->allReduce(data.ptr, 4, DType::F32, ReduceOp::Sum, {1}); },
              {"rank 0", "all_reduce", "invalid group"});
  expectError([&] { comm->allReduce(data.ptr, 4, DType::I8, ReduceOp::Sum, {}); },
              {"rank 0", "all_reduce", "unsupported element type i8"});
  expectError([&] { comm->allReduce(data.ptr, -1, DType::F32, ReduceOp::Sum, {}); }, {"negative count"});
  expectError([&] { comm->broadcastFrom(data.ptr, 4, DType::F32, 1, {}); },
              {"broadcast_from", "root 1 outside a group of 1"});
  expectError([&] { comm->reduceTo(data.ptr, out.ptr, 4, DType::F32, ReduceOp::Sum, 1, {0}); }, {"reduce_to", "root 1"});
  expectError([&] { comm->broadcast(data.ptr, 16, 1); }, {"broadcast", "invalid root 1"});
  expectError([&] { comm->send(data.ptr, 16, 1, 0); }, {"send", "invalid peer 1"});
  expectError([&] { comm->postRecv(data.ptr, 16, 0, -1); }, {"recv", "channel -1"});
  expectError([&] { comm->wait(12345); }, {"unknown transfer"});
  EXPECT_TRUE(comm->counts().empty()) << "failed calls are not counted";
  // Groups of a one-rank mesh are the world: nothing to split, nothing to fail.
  comm->prepareGroups({{"dp"}, {"tp"}, {"dp", "tp"}}, {1, 1}, {"dp", "tp"});
  expectError([&] { comm->prepareGroups({{"dp"}}, {2, 1}, {"dp", "tp"}); }, {"does not describe 1 ranks"});
}

TEST(NcclCommunicatorTest, TheTimeoutMustBeANumber) {
  CPC_REQUIRE_GPU(device);
  auto world = makeSingleRankCommunicator();
  setenv("CPC_NCCL_TIMEOUT_S", "soon", 1);
  expectError([&] { makeNcclCommunicator(*device, *world); }, {"CPC_NCCL_TIMEOUT_S", "soon"});
  setenv("CPC_NCCL_TIMEOUT_S", "0", 1); // no timeout: the watchdog still watches for errors
  auto comm = makeNcclCommunicator(*device, *world);
  unsetenv("CPC_NCCL_TIMEOUT_S");
  DeviceBytes data(device, values(DType::F32, 8, 0));
  comm->allReduce(data.ptr, 8, DType::F32, ReduceOp::Sum, {});
  EXPECT_EQ(data.download(), values(DType::F32, 8, 0));
}

} // namespace
