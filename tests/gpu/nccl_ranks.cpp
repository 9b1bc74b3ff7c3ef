//===- nccl_ranks.cpp - the NCCL communicator against the MPI one, mpirun -np N ---===//
//
// Every rank drives GPU (its local rank) and runs each collective twice: over MPI on host copies
// of the inputs and over NCCL on device copies; outputs (bit for bit: the values are small
// integers, exact in every element type and summation order) and counters must agree. Groups:
// the world, parity groups (made lazily), the world in reverse order, and a 2-D mesh's groups made
// by prepareGroups. Then point-to-point transfers, buffered sends, host buffers and a barrier.
// Without a GPU per rank it prints "skipped: ..." and exits 0. Rank 0 prints "N passed, N failed".
//
#include "runtime/Communicator.h"
#include "runtime/Device.h"
#include "runtime/Plan.h"
#include "tests/gpu/DeviceBytes.h"
#include "tests/mpi/MpiCheck.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <string>

using namespace cpc;
using namespace cpc::mpitest;
using namespace cpc::gputest;

namespace {

Device *gpu = nullptr;

/// `count` elements of `type`, small integers in [0, 8) that depend on `salt` (the rank, say).
Bytes values(DType type, int64_t count, int salt) {
  return elementBytes(type, count, [&](int64_t i) { return double((salt * 5 + i * 3 + i / 7) % 8); });
}

bool sameCounts(const std::map<std::string, CollectiveCount> &a, const std::map<std::string, CollectiveCount> &b) {
  if (a.size() != b.size())
    return false;
  for (const auto &[kind, c] : a) {
    auto it = b.find(kind);
    if (it == b.end() || it->second.calls != c.calls || it->second.bytes != c.bytes)
      return false;
  }
  return true;
}

/// Runs `op` over MPI on host copies of `in` and `out`, then over NCCL on device copies: both
/// buffers and the counters must agree. Every rank runs the same cases in the same order.
void compare(Communicator &mpi, Communicator &nccl, const std::string &what, const Bytes &in, const Bytes &out,
             const std::function<void(Communicator &, void *, void *)> &op) {
  try {
    Bytes hostIn = in, hostOut = out;
    mpi.resetCounts();
    op(mpi, hostIn.data(), hostOut.data());
    auto mpiCounts = mpi.counts();
    DeviceBytes deviceIn(gpu, in), deviceOut(gpu, out);
    nccl.resetCounts();
    op(nccl, deviceIn.ptr, deviceOut.ptr);
    check(deviceIn.download() == hostIn && deviceOut.download() == hostOut, what + ": values");
    check(sameCounts(mpiCounts, nccl.counts()), what + ": counters");
  } catch (const std::exception &e) {
    check(false, what + ": " + e.what());
  }
}

std::vector<std::vector<int>> groupsOf(int n, int r) {
  std::vector<int> parity, reversed;
  for (int k = r % 2; k < n; k += 2)
    parity.push_back(k);
  for (int k = n - 1; k >= 0; --k)
    reversed.push_back(k);
  return {{}, parity, reversed};
}

void collectives(Communicator &mpi, Communicator &nccl) {
  const int n = mpi.size(), r = mpi.rank();
  for (const std::vector<int> &group : groupsOf(n, r)) {
    const int g = group.empty() ? n : (int)group.size();
    const std::string on = " over " + (group.empty() ? std::string("the world") : "a group of " + std::to_string(g));
    for (DType type : {DType::F32, DType::F64, DType::F16, DType::BF16, DType::I64}) {
      for (int64_t count : {int64_t(1), int64_t(1000), int64_t(3 * kCollectiveChunkBytes / 8 + 5)}) {
        const std::string what = std::string(dtypeName(type)) + " x" + std::to_string(count) + on;
        const size_t es = dtypeSize(type);
        for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Max})
          compare(mpi, nccl, std::string("all_reduce ") + reduceOpName(op) + " " + what, values(type, count, r), {},
                  [&](Communicator &c, void *in, void *) { c.allReduce(in, count, type, op, group); });
        compare(mpi, nccl, "all_gather " + what, values(type, count, r), Bytes(count * g * es, 0),
                [&](Communicator &c, void *in, void *out) { c.allGather(in, out, count, type, group); });
        compare(mpi, nccl, "reduce_scatter " + what, values(type, count * g, r), Bytes(count * es, 0),
                [&](Communicator &c, void *in, void *out) { c.reduceScatter(in, out, count, type, ReduceOp::Sum, group); });
        compare(mpi, nccl, "all_to_all " + what, values(type, count * g, r), Bytes(count * g * es, 0),
                [&](Communicator &c, void *in, void *out) { c.allToAll(in, out, count, type, group); });
        if (count > 1000)
          continue; // every root of the large ones would take long under MPI
        for (int root = 0; root < g; ++root) {
          compare(mpi, nccl, "broadcast_from root " + std::to_string(root) + " " + what, values(type, count, r), {},
                  [&](Communicator &c, void *in, void *) { c.broadcastFrom(in, count, type, root, group); });
          // The members other than the root keep what their output held.
          compare(mpi, nccl, "reduce_to root " + std::to_string(root) + " " + what, values(type, count, r),
                  values(type, count, 100 + r),
                  [&](Communicator &c, void *in, void *out) { c.reduceTo(in, out, count, type, ReduceOp::Sum, root, group); });
        }
      }
    }
  }
  // i32: NCCL only (MPI's collectives do not take it): sums and maxima against their values.
  std::vector<int32_t> mine = {r, -r, 7 * r + 1};
  DeviceBytes sum(gpu, Bytes((uint8_t *)mine.data(), (uint8_t *)(mine.data() + 3))), max(gpu, sum.download());
  nccl.allReduce(sum.ptr, 3, DType::I32, ReduceOp::Sum, {});
  nccl.allReduce(max.ptr, 3, DType::I32, ReduceOp::Max, {});
  Bytes s = sum.download(), m = max.download();
  const int32_t *ps = (const int32_t *)s.data(), *pm = (const int32_t *)m.data();
  check(ps[0] == n * (n - 1) / 2 && ps[1] == -n * (n - 1) / 2 && ps[2] == 7 * n * (n - 1) / 2 + n, "i32 sum");
  check(pm[0] == n - 1 && pm[1] == 0 && pm[2] == 7 * (n - 1) + 1, "i32 max");
  // A NaN in a max wins on every rank, as in the MPI communicator (the float max reduces
  // order-preserving keys, kernels/cuda/CollectiveMath.h; NCCL's own fmaxf would drop it).
  for (DType type : {DType::F32, DType::F64, DType::F16, DType::BF16}) {
    const double nan = std::nan("");
    Bytes in = elementBytes(type, 4, [&](int64_t i) {
      switch (i) {
      case 0: return r == n - 1 ? nan : double(r);
      case 1: return double(r);
      case 2: return r == 0 ? -nan : double(-r);
      default: return double(-r - 1);
      }
    });
    DeviceBytes f(gpu, in);
    nccl.allReduce(f.ptr, 4, type, ReduceOp::Max, {});
    Bytes got = f.download();
    auto at = [&](int i) {
      const uint8_t *p = got.data() + i * dtypeSize(type);
      switch (type) {
      case DType::F32: return double(*(const float *)p);
      case DType::F64: return *(const double *)p;
      default: return double(load16(type, *(const uint16_t *)p));
      }
    };
    const std::string what = std::string("max with NaNs, ") + dtypeName(type);
    check(std::isnan(at(0)) && at(1) == n - 1 && std::isnan(at(2)) && at(3) == -1, what);
  }
}

/// Groups of a [n/2, 2] mesh made up front (the parity groups above were made lazily: a split
/// over a group made before must leave it be).
void preparedGroups(Communicator &mpi, Communicator &nccl) {
  const int n = mpi.size(), r = mpi.rank();
  if (n % 2)
    return;
  const std::vector<int64_t> shape = {n / 2, 2};
  const std::vector<std::string> axes = {"dp", "tp"};
  try {
    nccl.prepareGroups({{"tp"}, {"dp"}, {"dp", "tp"}}, shape, axes);
    check(true, "prepareGroups");
  } catch (const std::exception &e) {
    check(false, std::string("prepareGroups: ") + e.what());
  }
  for (const std::vector<std::string> &set : {std::vector<std::string>{"dp"}, std::vector<std::string>{"tp"}}) {
    std::vector<int> group = meshGroup(r, shape, meshDimsAlong(axes, set));
    compare(mpi, nccl, "all_reduce over prepared " + set[0], values(DType::F32, 4099, r), {},
            [&](Communicator &c, void *in, void *) { c.allReduce(in, 4099, DType::F32, ReduceOp::Sum, group); });
    compare(mpi, nccl, "all_gather over prepared " + set[0], values(DType::BF16, 33, r),
            Bytes(33 * 2 * group.size(), 0),
            [&](Communicator &c, void *in, void *out) { c.allGather(in, out, 33, DType::BF16, group); });
  }
}

void pointToPoint(Communicator &mpi, Communicator &nccl) {
  const int n = mpi.size(), r = mpi.rank(), next = (r + 1) % n, prev = (r + n - 1) % n;
  std::vector<int> peers = {next, prev};
  try {
    nccl.preparePeers(peers);
    nccl.preparePeers(peers); // again: nothing more to connect
    check(true, "preparePeers");
  } catch (const std::exception &e) {
    check(false, std::string("preparePeers: ") + e.what());
  }
  // A ring, receives posted before sends, two channels, the second one waited for first.
  compare(mpi, nccl, "ring send/recv", values(DType::F32, 2000, r), Bytes(8000, 0),
          [&](Communicator &c, void *in, void *out) {
            char *from = (char *)in, *to = (char *)out;
            Communicator::Transfer r1 = c.postRecv(to, 4000, prev, 7), r2 = c.postRecv(to + 4000, 4000, prev, 8);
            Communicator::Transfer s1 = c.postSend(from, 4000, next, 7), s2 = c.postSend(from + 4000, 4000, next, 8);
            c.wait(r2);
            c.wait(r1);
            c.wait(s1);
            while (!c.test(s2)) {
            }
          });
  // Buffered sends: the source is overwritten at once; the receiver gets what was sent.
  compare(mpi, nccl, "buffered sends", values(DType::I64, 500, r), Bytes(4000, 0),
          [&](Communicator &c, void *in, void *out) {
            Communicator::Transfer t = c.postRecv(out, 4000, prev, 3);
            c.sendBuffered(in, 4000, next, 3);
            check(c.bufferedSendBytes() == 4000, "buffered bytes");
            if (&c == &nccl)
              gpu->fillZero(in, 4000);
            else
              std::fill((char *)in, (char *)in + 4000, 0);
            c.wait(t);
            c.reapSends();
            c.completeSends();
            check(c.bufferedSendBytes() == 0, "buffered bytes after completeSends");
          });
  // Zero-byte messages keep their place in the order.
  compare(mpi, nccl, "empty message then a full one", values(DType::F32, 4, r), Bytes(16, 0),
          [&](Communicator &c, void *in, void *out) {
            Communicator::Transfer a = c.postRecv(out, 0, prev, 1), b = c.postRecv(out, 16, prev, 2);
            c.send(in, 0, next, 1);
            c.send(in, 16, next, 2);
            c.wait(a);
            c.wait(b);
          });
}

void hostBuffersAndBarrier(Communicator &mpi, Communicator &nccl) {
  const int n = mpi.size(), r = mpi.rank();
  double value = r == n - 1 ? 3.25 : 0;
  nccl.broadcast(&value, sizeof value, n - 1);
  check(value == 3.25, "host broadcast through MPI");
  int64_t hash = 1000 + r;
  std::vector<int64_t> hashes(n);
  nccl.allGather(&hash, hashes.data(), 1, DType::I64, {});
  bool ok = true;
  for (int k = 0; k < n; ++k)
    ok = ok && hashes[k] == 1000 + k;
  check(ok, "host all_gather through MPI");
  compare(mpi, nccl, "broadcast", values(DType::F64, 17, r), {},
          [&](Communicator &c, void *in, void *) { c.broadcast(in, 17 * 8, n - 1); });
  nccl.resetCounts();
  nccl.barrier();
  check(nccl.counts().at("barrier").calls == 1 && nccl.counts().at("barrier").bytes == 0, "barrier counted");
}

} // namespace

int main() {
  std::unique_ptr<Communicator> mpi = start();
  if (!mpi)
    return 1;
  std::string why;
  int64_t missing = localRank() >= cudaDeviceCount(&why) ? 1 : 0;
  mpi->allReduce(&missing, 1, DType::I64, ReduceOp::Max, {});
  if (missing) {
    if (mpi->rank() == 0)
      std::printf("skipped: %d ranks need a GPU each on their machine%s\n", mpi->size(),
                  why.empty() ? "" : (" (" + why + ")").c_str());
    return 0;
  }
  std::unique_ptr<Device> device;
  std::unique_ptr<Communicator> nccl;
  try {
    device = makeCudaDevice(localRank());
    gpu = device.get();
    nccl = makeNcclCommunicator(*device, *mpi);
  } catch (const std::exception &e) {
    std::printf("rank %d: cannot start NCCL: %s\n", mpi->rank(), e.what());
    abortMpiJob(1);
  }
  check(nccl->rank() == mpi->rank() && nccl->size() == mpi->size(), "ranks");
  for (auto *step : {&collectives, &preparedGroups, &pointToPoint, &hostBuffersAndBarrier})
    step(*mpi, *nccl);
  nccl.reset();
  return finish(*mpi);
}
