//===- CommunicatorTest.cpp - the MPI communicator, run under mpirun -np N ---===//
//
// A plain program (not gtest: every rank must run every check, in the same order, or the
// collectives would hang). Rank 0 prints the job's totals, "N passed, N failed".
//
#include "kernels/Float16.h"
#include "runtime/Communicator.h"
#include "tests/mpi/MpiCheck.h"
#include "runtime/Launcher.h"
#include "runtime/Plan.h"

#include <mpi.h>

#include <algorithm>
#include <cstdio>
#include <cmath>
#include <cstdlib>
#include <functional>
#include <string>

using namespace cpc;
using namespace cpc::mpitest;

namespace {


/// `fn` must throw a RuntimeError whose message contains every one of `parts`.
void expectError(const std::string &what, const std::function<void()> &fn, std::vector<std::string> parts) {
  try {
    fn();
    check(false, what + ": no error");
  } catch (const RuntimeError &e) {
    bool ok = true;
    for (const auto &p : parts)
      ok = ok && std::string(e.what()).find(p) != std::string::npos;
    check(ok, what + ": message '" + e.what() + "'");
  }
}

CollectiveCount countOf(const Communicator &c, const std::string &kind) {
  auto it = c.counts().find(kind);
  return it == c.counts().end() ? CollectiveCount{} : it->second;
}

template <typename T> void allReduceWorld(Communicator &comm, DType type) {
  const int n = comm.size(), r = comm.rank();
  std::vector<T> v(5);
  for (int i = 0; i < 5; ++i)
    v[i] = T((r + 1) * (i + 1));
  comm.resetCounts();
  comm.allReduceSum(v.data(), 5, type, {});
  bool ok = true;
  for (int i = 0; i < 5; ++i)
    ok = ok && v[i] == T(n * (n + 1) / 2 * (i + 1));
  check(ok, std::string("all_reduce values ") + dtypeName(type));
  int64_t bytes = 5 * sizeof(T);
  check(countOf(comm, "all_reduce").calls == 1 && countOf(comm, "all_reduce").bytes == 2 * (n - 1) * bytes / n,
        std::string("all_reduce bytes ") + dtypeName(type));
}

/// Max over the world and over groups: each element's maximum sits on a different rank (so a
/// sum or a copy of one rank's values fails), across ring chunks, and a NaN on one rank wins.
void maxCollectives(Communicator &comm) {
  const int n = comm.size(), r = comm.rank();
  const int64_t count = 2 * (kCollectiveChunkBytes / 4) * n + 3; // several chunks, uneven blocks
  std::vector<float> v(count);
  for (int64_t i = 0; i < count; ++i)
    v[i] = (i % n == r) ? float(1000 + i % 997) : float(-r - (i % 13));
  comm.allReduce(v.data(), count, DType::F32, ReduceOp::Max, {});
  bool ok = true;
  for (int64_t i = 0; i < count && ok; ++i)
    ok = v[i] == float(1000 + i % 997);
  check(ok, "all_reduce max over the world");
  int64_t w[2] = {-(int64_t)r, (int64_t)r * 3};
  comm.allReduce(w, 2, DType::I64, ReduceOp::Max, {});
  check(w[0] == 0 && w[1] == 3 * (n - 1), "all_reduce max i64");
  std::vector<int> pair = {r - r % 2, std::min(r - r % 2 + 1, n - 1)}; // ranks {0,1}, {2,3}, ...
  if (pair[0] == pair[1])
    pair.pop_back();
  double d = r;
  comm.allReduce(&d, 1, DType::F64, ReduceOp::Max, pair);
  check(d == pair.back(), "all_reduce max over a group");
  float f = r == n - 1 ? std::nanf("") : float(r);
  comm.allReduce(&f, 1, DType::F32, ReduceOp::Max, {});
  check(std::isnan(f), "all_reduce max keeps a NaN");
  check(parseReduceOp("max") == ReduceOp::Max && std::string(reduceOpName(ReduceOp::Sum)) == "sum",
        "reduction names");
}

/// f16 and bf16 travel as 2 bytes per element and are summed in f32, rounded once per combine:
/// 1 + 2^-9 is not a bf16, but the sum of n ranks' contributions of 2^-9 + ... lands where f32
/// arithmetic puts it. Max keeps the largest, across ring chunks.
void sixteenBitCollectives(Communicator &comm) {
  const int n = comm.size(), r = comm.rank();
  for (DType type : {DType::BF16, DType::F16}) {
    const int64_t count = (kCollectiveChunkBytes / 2) * n + 7; // several chunks
    std::vector<uint16_t> v(count);
    for (int64_t i = 0; i < count; ++i)
      v[i] = store16(type, float((r + 1) * (i % 5 + 1)));
    comm.resetCounts();
    comm.allReduceSum(v.data(), count, type, {});
    bool ok = true;
    for (int64_t i = 0; i < count && ok; ++i)
      ok = load16(type, v[i]) == float(n * (n + 1) / 2 * (i % 5 + 1));
    check(ok, std::string("all_reduce sum ") + dtypeName(type));
    check(countOf(comm, "all_reduce").bytes == 2 * (n - 1) * (count * 2) / n,
          std::string("all_reduce moves 2 bytes per element ") + dtypeName(type));
    std::vector<uint16_t> blocks(3 * n), mine(3);
    for (int64_t i = 0; i < 3 * n; ++i)
      blocks[i] = store16(type, 0.5f * float(i + r));
    comm.reduceScatter(blocks.data(), mine.data(), 3, type, ReduceOp::Sum, {});
    ok = true;
    for (int64_t e = 0; e < 3; ++e)
      ok = ok && load16(type, mine[e]) == 0.5f * float(n * (3 * r + e) + n * (n - 1) / 2);
    check(ok, std::string("reduce_scatter ") + dtypeName(type));
    uint16_t m = store16(type, r == n - 1 ? 100.f : float(-r));
    comm.allReduce(&m, 1, type, ReduceOp::Max, {});
    check(load16(type, m) == 100.f, std::string("all_reduce max ") + dtypeName(type));
  }
}

void worldCollectives(Communicator &comm) {
  const int n = comm.size(), r = comm.rank();
  allReduceWorld<float>(comm, DType::F32);
  allReduceWorld<double>(comm, DType::F64);
  allReduceWorld<int64_t>(comm, DType::I64);

  // all_gather: block k of recv is rank k's send.
  comm.resetCounts();
  std::vector<float> send = {r * 10.f, r * 10.f + 1, r * 10.f + 2}, recv(3 * n, -1);
  comm.allGather(send.data(), recv.data(), 3, DType::F32, {});
  bool ok = true;
  for (int k = 0; k < n; ++k)
    for (int i = 0; i < 3; ++i)
      ok = ok && recv[k * 3 + i] == k * 10.f + i;
  check(ok, "all_gather values");
  check(countOf(comm, "all_gather").bytes == (n - 1) * 3 * 4, "all_gather bytes");
  // In place: this rank's block already sits in recv.
  std::vector<int64_t> inPlace(2 * n, -1);
  inPlace[2 * r] = r;
  inPlace[2 * r + 1] = 100 + r;
  comm.allGather(&inPlace[2 * r], inPlace.data(), 2, DType::I64, {});
  ok = true;
  for (int k = 0; k < n; ++k)
    ok = ok && inPlace[2 * k] == k && inPlace[2 * k + 1] == 100 + k;
  check(ok, "all_gather in place");

  // reduce_scatter: rank k keeps the sum of block k.
  comm.resetCounts();
  const int count = 4;
  std::vector<double> full(count * n), mine(count, -1);
  for (int j = 0; j < count * n; ++j)
    full[j] = r + j;
  comm.reduceScatter(full.data(), mine.data(), count, DType::F64, ReduceOp::Sum, {});
  ok = true;
  for (int i = 0; i < count; ++i)
    ok = ok && mine[i] == n * (n - 1) / 2.0 + n * double(r * count + i);
  check(ok, "reduce_scatter values");
  check(countOf(comm, "reduce_scatter").bytes == (n - 1) * count * 8, "reduce_scatter bytes");

  // broadcast from the last rank: only the root sends.
  comm.resetCounts();
  char text[24] = {};
  if (r == n - 1)
    std::snprintf(text, sizeof text, "from %d", n - 1);
  comm.broadcast(text, sizeof text, n - 1);
  check(std::string(text) == "from " + std::to_string(n - 1), "broadcast value");
  check(countOf(comm, "broadcast").bytes == (r == n - 1 ? 24 : 0), "broadcast bytes");

  comm.barrier();
  check(countOf(comm, "barrier").calls == 1 && countOf(comm, "barrier").bytes == 0, "barrier counted");
  nlohmann::json j = commCountsJson(comm);
  check(j["comm_calls"] == 2 && j["comm_bytes"] == (r == n - 1 ? 24 : 0) && j["comm"]["broadcast"]["calls"] == 1,
        "counts json " + j.dump());
  check(formatCommCounts(comm) == (r == n - 1 ? "comm 2 calls 24 B" : "comm 2 calls 0 B"),
        "counts line '" + formatCommCounts(comm) + "'");
}

/// The ring collectives move messages in chunks of kCollectiveChunkBytes: sizes that span several
/// chunks, blocks of unequal size (counts that do not divide by the ranks) and fewer elements
/// than ranks must all come out exact.
void largeAndUnevenCollectives(Communicator &comm) {
  const int n = comm.size(), r = comm.rank();
  const int64_t chunk = kCollectiveChunkBytes / 4;
  for (int64_t count : {int64_t(1), int64_t(n - 1), int64_t(1000003), 3 * n * chunk + 7}) {
    if (count < 1)
      continue;
    std::vector<float> v(count);
    for (int64_t i = 0; i < count; ++i)
      v[i] = float((r + 1) * (i % 1000));
    comm.allReduceSum(v.data(), count, DType::F32, {});
    bool ok = true;
    for (int64_t i = 0; i < count && ok; ++i)
      ok = v[i] == float(n * (n + 1) / 2 * (i % 1000));
    check(ok, "all_reduce of " + std::to_string(count) + " elements");
  }
  for (int64_t count : {int64_t(3), 2 * chunk + 5}) {
    std::vector<double> full(count * n), mine(count, -1);
    for (int64_t j = 0; j < count * n; ++j)
      full[j] = r + j % 977;
    comm.reduceScatter(full.data(), mine.data(), count, DType::F64, ReduceOp::Sum, {});
    bool ok = true;
    for (int64_t i = 0; i < count && ok; ++i)
      ok = mine[i] == n * (n - 1) / 2.0 + n * double((r * count + i) % 977);
    check(ok, "reduce_scatter of " + std::to_string(count) + " elements per rank");
    std::vector<double> all(count * n, -1);
    comm.allGather(mine.data(), all.data(), count, DType::F64, {});
    ok = true;
    for (int64_t j = 0; j < count * n && ok; ++j)
      ok = all[j] == n * (n - 1) / 2.0 + n * double(j % 977);
    check(ok, "all_gather of " + std::to_string(count) + " elements per rank");
  }
}

void groupCollectives(Communicator &comm) {
  const int n = comm.size(), r = comm.rank();
  // Two groups by parity; the odd group lists its ranks in descending order, which defines the
  // members' positions (the block order of all_gather).
  std::vector<int> group;
  for (int k = r % 2; k < n; k += 2)
    group.push_back(k);
  if (r % 2)
    std::reverse(group.begin(), group.end());
  const int g = (int)group.size();
  const int pos = int(std::find(group.begin(), group.end(), r) - group.begin());

  for (int repeat = 0; repeat < 2; ++repeat) { // the second time uses the cached communicator
    comm.resetCounts();
    double v = r + 1, expect = 0;
    for (int k : group)
      expect += k + 1;
    comm.allReduceSum(&v, 1, DType::F64, group);
    check(v == expect, "group all_reduce value (repeat " + std::to_string(repeat) + ")");
    check(countOf(comm, "all_reduce").bytes == 2 * (g - 1) * 8 / g, "group all_reduce bytes");
  }

  std::vector<int64_t> recv(g, -1);
  int64_t mine = r;
  comm.allGather(&mine, recv.data(), 1, DType::I64, group);
  check(recv == std::vector<int64_t>(group.begin(), group.end()), "group all_gather follows the group's order");

  std::vector<float> full(2 * g), out(2);
  for (int j = 0; j < 2 * g; ++j)
    full[j] = float(j);
  comm.reduceScatter(full.data(), out.data(), 2, DType::F32, ReduceOp::Sum, group);
  check(out[0] == g * float(2 * pos) && out[1] == g * float(2 * pos + 1), "group reduce_scatter keeps block pos");

  // A group of the whole world in reverse order, then the world itself again.
  std::vector<int> reversed;
  for (int k = n - 1; k >= 0; --k)
    reversed.push_back(k);
  std::vector<int64_t> all(n);
  mine = 1000 + r;
  comm.allGather(&mine, all.data(), 1, DType::I64, reversed);
  check(all.front() == 1000 + n - 1 && all.back() == 1000, "reversed world group");
  double one = 1;
  comm.allReduceSum(&one, 1, DType::F64, {});
  check(one == n, "world after groups");
}

/// broadcast_from and reduce_to (SUMMA's steps): for every root of the world and of the parity
/// groups, small and larger than one chunk, f32 and bf16; the bytes counted are what this rank
/// passes on along the chain (every member but the last sends the buffer once).
void rootedCollectives(Communicator &comm) {
  const int n = comm.size(), r = comm.rank();
  const int64_t chunk = kCollectiveChunkBytes / 4;
  std::vector<int> parity;
  for (int k = r % 2; k < n; k += 2)
    parity.push_back(k);
  for (const std::vector<int> &group : {std::vector<int>{}, parity}) {
    const int g = group.empty() ? n : (int)group.size();
    const int pos = group.empty() ? r : int(std::find(group.begin(), group.end(), r) - group.begin());
    auto member = [&](int p) { return group.empty() ? p : group[p]; };
    for (int64_t count : {int64_t(3), 2 * chunk + 5})
      for (int root = 0; root < g; ++root) {
        std::string what = " root " + std::to_string(root) + " of " + std::to_string(g) + ", " +
                           std::to_string(count) + " elements";
        comm.resetCounts();
        std::vector<float> v(count);
        for (int64_t i = 0; i < count; ++i)
          v[i] = float(r * 1000 + i % 997);
        comm.broadcastFrom(v.data(), count, DType::F32, root, group);
        bool ok = true;
        for (int64_t i = 0; i < count && ok; ++i)
          ok = v[i] == float(member(root) * 1000 + i % 997);
        check(ok, "broadcast_from values" + what);
        bool last = (pos - root + g) % g == g - 1;
        check(countOf(comm, "broadcast_from").bytes == (last ? 0 : count * 4), "broadcast_from bytes" + what);

        std::vector<float> mine(count), sum(count, -7.f);
        for (int64_t i = 0; i < count; ++i)
          mine[i] = float((r + 1) * (i % 13));
        comm.reduceTo(mine.data(), sum.data(), count, DType::F32, ReduceOp::Sum, root, group);
        float members = 0;
        for (int p = 0; p < g; ++p)
          members += float(member(p) + 1);
        ok = true;
        for (int64_t i = 0; i < count && ok; ++i)
          ok = pos == root ? sum[i] == members * float(i % 13) : sum[i] == -7.f;
        check(ok, "reduce_to values (the root's sum, the others untouched)" + what);
        check(countOf(comm, "reduce_to").bytes == (pos == root ? 0 : count * 4), "reduce_to bytes" + what);
      }
  }
  // bf16: the chain sums in f32 per step and rounds once per step, as the rings do.
  std::vector<uint16_t> h(4), out(4, 0);
  for (int i = 0; i < 4; ++i)
    h[i] = store16(DType::BF16, float(i + 1));
  comm.reduceTo(h.data(), out.data(), 4, DType::BF16, ReduceOp::Sum, 0, {});
  comm.broadcastFrom(out.data(), 4, DType::BF16, 0, {});
  check(load16(DType::BF16, out[3]) == float(4 * n), "bf16 reduce_to then broadcast_from");
  expectError("a root outside the group", [&] { comm.broadcastFrom(h.data(), 4, DType::BF16, n, {}); },
              {"broadcast_from", "root " + std::to_string(n)});
}

/// all_to_all: block j of rank r's send goes to rank j; block i of recv comes from rank i; over
/// the world, over a reversed group (positions follow the list), and with blocks larger than
/// one message piece.
void allToAllCollectives(Communicator &comm) {
  const int n = comm.size(), r = comm.rank();
  comm.resetCounts();
  std::vector<int64_t> send(2 * n), recv(2 * n, -1);
  for (int j = 0; j < n; ++j) {
    send[2 * j] = 100 * r + j;
    send[2 * j + 1] = -(100 * r + j);
  }
  comm.allToAll(send.data(), recv.data(), 2, DType::I64, {});
  bool ok = true;
  for (int i = 0; i < n; ++i)
    ok = ok && recv[2 * i] == 100 * i + r && recv[2 * i + 1] == -(100 * i + r);
  check(ok, "all_to_all values");
  check(countOf(comm, "all_to_all").calls == 1 && countOf(comm, "all_to_all").bytes == (n - 1) * 2 * 8,
        "all_to_all bytes");

  // Moving values takes any element type (a layout may move a mask); combining does not.
  std::vector<uint8_t> mask(3 * n), masks(3 * n * n, 7), moved(3 * n, 7);
  for (int j = 0; j < 3 * n; ++j)
    mask[j] = (uint8_t)((r + j) % 2);
  comm.allGather(mask.data(), masks.data(), 3 * n, DType::I1, {});
  comm.allToAll(mask.data(), moved.data(), 3, DType::I1, {});
  std::vector<uint8_t> root(5, (uint8_t)(r == 0));
  comm.broadcastFrom(root.data(), 5, DType::U8, 0, {});
  ok = true;
  for (int i = 0; i < n; ++i)
    for (int j = 0; j < 3 * n; ++j)
      ok = ok && masks[i * 3 * n + j] == (uint8_t)((i + j) % 2);
  for (int i = 0; i < n; ++i)
    for (int j = 0; j < 3; ++j)
      ok = ok && moved[3 * i + j] == (uint8_t)((i + 3 * r + j) % 2);
  check(ok && root == std::vector<uint8_t>(5, 1), "i1 and u8 move by all_gather, all_to_all and broadcast_from");
  expectError("combining i1", [&] { comm.allReduceSum(mask.data(), 3, DType::I1, {}); },
              {"rank " + std::to_string(r), "all_reduce", "unsupported element type i1"});

  std::vector<int> reversed;
  for (int k = n - 1; k >= 0; --k)
    reversed.push_back(k);
  const int pos = n - 1 - r;
  std::vector<double> one(n), got(n, -1);
  for (int j = 0; j < n; ++j)
    one[j] = 10.0 * pos + j; // block j goes to position j, i.e. rank n - 1 - j
  comm.allToAll(one.data(), got.data(), 1, DType::F64, reversed);
  ok = true;
  for (int i = 0; i < n; ++i)
    ok = ok && got[i] == 10.0 * i + pos;
  check(ok, "all_to_all over a reversed group");

  const int64_t count = kCollectiveChunkBytes / 4 + 5; // more than one piece per block
  std::vector<float> big(count * n), bigOut(count * n, -1);
  for (int j = 0; j < n; ++j)
    for (int64_t e = 0; e < count; ++e)
      big[j * count + e] = float(r * 7 + j * 3 + e % 11);
  comm.allToAll(big.data(), bigOut.data(), count, DType::F32, {});
  ok = true;
  for (int i = 0; i < n; ++i)
    for (int64_t e = 0; e < count; ++e)
      ok = ok && bigOut[i * count + e] == float(i * 7 + r * 3 + e % 11);
  check(ok, "all_to_all in pieces");
  if (n > 1)
    expectError("all_to_all in place", [&] { comm.allToAll(send.data(), send.data(), 2, DType::I64, {}); },
                {"rank " + std::to_string(r), "all_to_all", "must differ"});
}

void errorPaths(Communicator &comm) {
  const int n = comm.size(), r = comm.rank();
  std::string me = "rank " + std::to_string(r);
  comm.resetCounts();
  double v = 0;
  expectError("non-member group", [&] { comm.allReduceSum(&v, 1, DType::F64, {(r + 1) % n}); },
              {me, "all_reduce", "not a member"});
  expectError("out-of-range rank", [&] { comm.allReduceSum(&v, 1, DType::F64, {r, n}); }, {me, "invalid group"});
  expectError("duplicate rank", [&] { comm.allGather(&v, &v, 1, DType::F64, {r, r}); }, {me, "all_gather", "invalid group"});
  expectError("i32", [&] { comm.reduceScatter(&v, &v, 1, DType::I32, ReduceOp::Sum, {}); }, {me, "reduce_scatter", "i32"});
  expectError("negative count", [&] { comm.allReduceSum(&v, -1, DType::F64, {}); }, {me, "negative count"});
  expectError("broadcast root", [&] { comm.broadcast(&v, 8, n); }, {me, "broadcast", "invalid root"});
  check(comm.counts().empty(), "failed calls are not counted");
}

void singleRank() {
  auto one = makeSingleRankCommunicator();
  check(one->rank() == 0 && one->size() == 1, "single rank size");
  float a[3] = {1, 2, 3}, b[3] = {};
  one->allReduceSum(a, 3, DType::F32, {});
  one->allGather(a, b, 3, DType::F32, {0});
  check(a[2] == 3 && b[0] == 1 && b[2] == 3, "single rank identities");
  one->reduceScatter(a, b, 3, DType::F32, ReduceOp::Sum, {});
  one->broadcast(a, 12, 0);
  one->allToAll(a, b, 3, DType::F32, {});
  check(one->counts().size() == 5 && commCountsJson(*one)["comm_bytes"] == 0 &&
            formatCommCounts(*one) == "comm 5 calls 0 B",
        "single rank counts '" + formatCommCounts(*one) + "'");
  expectError("single rank group", [&] { one->allReduceSum(a, 3, DType::F32, {1}); }, {"rank 0", "all_reduce"});
  // A stage talking to itself: the send is kept until the receive takes it, in either order.
  float c[3] = {};
  one->send(a, 12, 0, 4);
  one->recv(c, 12, 0, 4);
  check(c[0] == 1 && c[2] == 3, "single rank send then recv");
  Communicator::Transfer early = one->postRecv(b, 12, 0, 5);
  one->send(a, 12, 0, 5);
  one->wait(early);
  check(b[1] == 2, "single rank recv posted first");
  expectError("single rank recv without send", [&] { one->recv(c, 12, 0, 6); }, {"channel 6", "no matching send"});
}

/// Pipeline-style point-to-point: every rank sends a buffer to the next rank and receives the
/// previous one's (a ring), with the receive posted before the send (as a stage posts its
/// receives early) so that no order of arrival can block; then two channels between the same
/// pair arriving in the other order than they were sent; counted as "send" (bytes) and "recv".
void pointToPoint(Communicator &comm) {
  const int n = comm.size(), r = comm.rank(), next = (r + 1) % n, prev = (r + n - 1) % n;
  std::vector<float> out(1000), in(1000, -1.f);
  for (int i = 0; i < 1000; ++i)
    out[i] = float(r * 1000 + i);
  comm.resetCounts();
  Communicator::Transfer recv = comm.postRecv(in.data(), 4000, prev, 7);
  Communicator::Transfer send = comm.postSend(out.data(), 4000, next, 7);
  comm.wait(send);
  comm.wait(recv);
  bool ok = true;
  for (int i = 0; i < 1000; ++i)
    ok = ok && in[i] == float(prev * 1000 + i);
  check(ok, "p2p ring values");
  check(countOf(comm, "send").calls == 1 && countOf(comm, "send").bytes == 4000 && countOf(comm, "recv").calls == 1 &&
            countOf(comm, "recv").bytes == 0,
        "p2p counts");
  // Ranks 0 and 1: two messages on channels 1 and 2; the receiver waits for channel 2 first.
  if (r < 2) {
    int64_t a = 10 + r, b = 20 + r, ga = 0, gb = 0;
    if (r == 0) {
      comm.send(&a, 8, 1, 1);
      comm.send(&b, 8, 1, 2);
    } else {
      Communicator::Transfer t1 = comm.postRecv(&ga, 8, 0, 1), t2 = comm.postRecv(&gb, 8, 0, 2);
      comm.wait(t2);
      comm.wait(t1);
      check(ga == 10 && gb == 20, "p2p channels keep their messages apart");
    }
  }
  expectError("p2p to self", [&] { comm.send(out.data(), 4, r, 1); }, {"rank " + std::to_string(r), "invalid peer"});
  expectError("p2p bad channel", [&] { comm.send(out.data(), 4, next, -1); }, {"channel -1"});
}

void failureLines() {
  check(describeMpiFailure("noise\ncpc-run: error: rank 3: boom\nmore\n", 256) == "rank 3: boom", "own line");
  check(describeMpiFailure("mpirun noticed that process rank 1 with PID 42 on node box exited on signal 9 (Killed).\n",
                           256) == "rank 1 exited on signal 9 (Killed)",
        "signal line");
  check(describeMpiFailure("  Process name: [[123,1],2]\n  Exit code:    3\n", 256) == "rank 2 exited with code 3",
        "exit code line");
  check(describeMpiFailure("MPI_ABORT was invoked on rank 0 in communicator MPI_COMM_WORLD\nwith errorcode 7.\n", 256) ==
            "rank 0 aborted the job (MPI_Abort, error code 7)",
        "abort line");
}

} // namespace

/// The asynchronous forms: a bucket of buffers (one empty, one spanning several ring chunks)
/// reduced in place as one call; posted collectives complete in order, whichever is waited for;
/// max for the reduce-scatter and the rooted reduction too.
void postedCollectives(Communicator &comm) {
  const int n = comm.size(), r = comm.rank();
  std::vector<float> a(3), b(2 * (kCollectiveChunkBytes / 4) * n + 5), c(1);
  std::vector<BufferRange> bucket = {{a.data(), 3}, {nullptr, 0}, {b.data(), (int64_t)b.size()}, {c.data(), 1}};
  auto fill = [&] {
    for (size_t i = 0; i < a.size(); ++i)
      a[i] = float(r + i);
    for (size_t i = 0; i < b.size(); ++i)
      b[i] = float((r + 1) * (i % 31));
    c[0] = float(r == 0 ? 7 : -r);
  };
  fill();
  comm.resetCounts();
  std::unique_ptr<Work> sum = comm.postAllReduce(bucket, DType::F32, comm.world(), {});
  sum->wait();
  bool ok = c[0] == float(7 - (n - 1) * n / 2 + 0);
  for (size_t i = 0; i < a.size(); ++i)
    ok = ok && a[i] == float(n * (n - 1) / 2 + n * i);
  for (size_t i = 0; i < b.size() && ok; ++i)
    ok = b[i] == float(n * (n + 1) / 2 * (i % 31));
  check(ok, "posted bucket all_reduce sums every member in place");
  int64_t bytes = 4 * int64_t(a.size() + b.size() + c.size());
  check(countOf(comm, "all_reduce").calls == 1 && countOf(comm, "all_reduce").bytes == 2 * (n - 1) * bytes / n,
        "a bucket counts as one all_reduce of its bytes");
  fill();
  std::unique_ptr<Work> max = comm.postAllReduce(bucket, DType::F32, comm.world(), {ReduceOp::Max});
  std::vector<double> blocks(3 * n), mine(3);
  for (int i = 0; i < 3 * n; ++i)
    blocks[i] = r == i % n ? 100.0 + i : -double(r);
  std::unique_ptr<Work> scatter = comm.postReduceScatter(blocks.data(), mine.data(), 3, DType::F64, comm.world(),
                                                         {ReduceOp::Max});
  scatter->wait(); // completes the all-reduce before it
  check(max->test(), "waiting for a later collective completes the earlier ones");
  ok = c[0] == 7.f && a[2] == float(n - 1 + 2) && b[30] == float(n * 30);
  check(ok, "posted bucket all_reduce max");
  ok = true;
  for (int j = 0; j < 3; ++j)
    ok = ok && mine[j] == 100.0 + 3 * r + j;
  check(ok, "reduce_scatter max keeps each block's largest");
  std::vector<int64_t> gathered(2 * n), own = {r, 10 * r};
  std::unique_ptr<Work> gather = comm.postAllGather(own.data(), gathered.data(), 2, DType::I64, comm.world(), {});
  while (!gather->test()) {
  }
  ok = true;
  for (int i = 0; i < n; ++i)
    ok = ok && gathered[2 * i] == i && gathered[2 * i + 1] == 10 * i;
  check(ok, "posted all_gather completes by polling");
  const CommGroup &mine2 = comm.group({r});
  check(&comm.group({r}) == &mine2 && &comm.group({}) == &comm.world() && comm.world().size() == n &&
            comm.world().position() == r && mine2.size() == 1 && mine2.position() == 0,
        "a group is made once and kept");
  float value = float(r), top = -1.f;
  comm.reduceTo(&value, &top, 1, DType::F32, ReduceOp::Max, n - 1, {});
  check(r != n - 1 || top == float(n - 1), "reduce_to max at the root");
}

/// The all-reduce through shared memory (members on one node, the default; staged, or in place
/// for buffers in the shared arena) and the rings (CPC_MPI_SHARED_MEMORY=0, read when a
/// communicator is made) give the same sums of values that round: the same bits for two ranks
/// (each element's two values added once), within an ulp or so for more (a block's order of
/// arithmetic is the ring's, its blocks are not).
void sharedMemoryAgreesWithTheRings(Communicator &shared) {
  const int n = shared.size(), r = shared.rank();
  const char *asked = std::getenv("CPC_MPI_SHARED_MEMORY");
  const bool sharedMemory = !asked || std::string(asked) != "0"; // (the rings' run of these tests: none)
  setenv("CPC_MPI_SHARED_MEMORY", "0", 1);
  std::unique_ptr<Communicator> rings = makeMpiCommunicator();
  if (sharedMemory)
    unsetenv("CPC_MPI_SHARED_MEMORY");
  const int64_t count = 3 * (kCollectiveChunkBytes / 4) + 11; // several chunks of both
  std::vector<float> a(count), b;
  uint64_t state = 0x9E3779B97F4A7C15ull * uint64_t(r + 1);
  for (float &x : a) {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    x = float(int64_t(state >> 40) % 2000003) * 1e-3f + 0.1f;
  }
  b = a;
  // The same values in the shared arena (at the same offset on every rank): reduced in place.
  auto *arena = static_cast<float *>(shared.allocateSharedHost((count + 16) * 4));
  check((arena != nullptr) == sharedMemory, "the ranks of one node get a shared arena (unless asked not to)");
  float *inArena = arena ? arena + 16 : nullptr;
  if (inArena)
    std::copy(a.begin(), a.end(), inArena);
  shared.allReduceSum(a.data(), count, DType::F32, {});
  rings->allReduceSum(b.data(), count, DType::F32, {});
  if (inArena)
    shared.postAllReduce({{inArena, count / 2}, {inArena + count / 2, count - count / 2}}, DType::F32, shared.world(),
                         {})
        ->wait();
  bool ok = true, inPlace = true;
  for (int64_t i = 0; i < count && ok; ++i)
    ok = n == 2 ? a[i] == b[i] : std::abs(a[i] - b[i]) <= 4e-7f * std::abs(b[i]);
  for (int64_t i = 0; inArena && i < count && inPlace; ++i)
    inPlace = n == 2 ? inArena[i] == b[i] : std::abs(inArena[i] - b[i]) <= 4e-7f * std::abs(b[i]);
  check(ok, "shared-memory all_reduce agrees with the rings");
  check(inPlace, "the all_reduce of buffers in the shared arena (in place) agrees with the rings");
}

/// On one node (shared memory) every collective sums in rank order, for every element whatever
/// block it falls in: a bf16 value reduce-scattered has the bits its all-reduce (staged, or in
/// place in the shared arena) gives, which 16-bit sums of three or more ranks in the rings'
/// orders would not (ZeRO-2's gradients then equal ZeRO-1's).
void sharedReduceScatterHasTheAllReducesBits(Communicator &comm) {
  const char *asked = std::getenv("CPC_MPI_SHARED_MEMORY");
  if (asked && std::string(asked) == "0")
    return; // the rings' run
  const int n = comm.size(), r = comm.rank();
  const int64_t count = kCollectiveChunkBytes / 2 + 13; // per rank: several staging pieces
  std::vector<uint16_t> full(count * n);
  uint64_t state = 0xD1B54A32D192ED03ull * uint64_t(r + 3);
  for (uint16_t &x : full) {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    x = store16(DType::BF16, float(int64_t(state >> 33) % 200001 - 100000) * 1.37e-3f);
  }
  std::vector<uint16_t> reduced = full, mine(count);
  comm.reduceScatter(full.data(), mine.data(), count, DType::BF16, ReduceOp::Sum, {});
  comm.allReduceSum(reduced.data(), count * n, DType::BF16, {});
  check(std::equal(mine.begin(), mine.end(), reduced.begin() + r * count),
        "bf16 reduce_scatter has the all_reduce's bits");
  auto *arena = static_cast<uint16_t *>(comm.allocateSharedHost((count * n + 32) * 2));
  if (!arena)
    return;
  std::copy(full.begin(), full.end(), arena + 32);
  comm.postAllReduce({{arena + 32, count * n}}, DType::BF16, comm.world(), {})->wait();
  check(std::equal(reduced.begin(), reduced.end(), arena + 32), "bf16 all_reduce in place has the staged one's bits");
}

int main() {
  std::unique_ptr<Communicator> comm = start();
  if (!comm)
    return 1;
  check(comm->size() == std::atoi(std::getenv("OMPI_COMM_WORLD_SIZE")), "world size");
  auto second = makeMpiCommunicator(); // a second communicator (its own MPI_Comm_dup) works too
  check(second->size() == comm->size(), "second communicator");
  for (auto *step : {&worldCollectives, &maxCollectives, &largeAndUnevenCollectives, &groupCollectives, &allToAllCollectives,
                     &rootedCollectives, &pointToPoint, &errorPaths, &sixteenBitCollectives, &postedCollectives,
                     &sharedMemoryAgreesWithTheRings, &sharedReduceScatterHasTheAllReducesBits}) {
    try {
      step(*comm);
    } catch (const std::exception &e) {
      check(false, std::string("unexpected error: ") + e.what());
    }
  }
  singleRank();
  failureLines();
  return finish(*comm);
}
