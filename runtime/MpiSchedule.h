//===- MpiSchedule.h - collectives as steps that run while the caller goes on ----===//
//
// The MPI communicator's ring collectives written as schedules: the list of message exchanges
// (and the combines after them) one rank takes part in. A schedule runs one step at a time with
// nonblocking MPI calls, moved on by advance() whenever the runtime polls (between the steps of a
// program) or waits: that is how an all-reduce goes on during backward without a thread of its
// own. The steps are the same rings the blocking calls ran (same messages, same order of
// arithmetic), so results do not depend on when they were polled.
//
#ifndef CPC_RUNTIME_MPISCHEDULE_H
#define CPC_RUNTIME_MPISCHEDULE_H

#include "runtime/Communicator.h"

#include <mpi.h>

#include <functional>
#include <string>
#include <utility>
#include <vector>

namespace cpc::mpi {

/// Bytes at several places, a message each. The pieces of a bucket's region are cut at its
/// members' boundaries, which are the same on every rank: sender and receiver agree on them.
struct Region {
  std::vector<std::pair<char *, int64_t>> pieces; // address, bytes
  int64_t bytes = 0;
  void add(const void *data, int64_t n);
  /// Contiguous bytes at `data` cut into pieces of the sizes of `like`'s.
  static Region split(const void *data, const Region &like);
};

/// dst = op(a, b) over `count` elements (the communicator binds the type and the operation).
using Combine = std::function<void(void *dst, const void *a, const void *b, int64_t count)>;

/// One step: a message to `to` and one from `from` (-1: none), then `then` once both are done.
struct Exchange {
  Region send;
  int to = -1;
  Region recv;
  int from = -1;
  std::function<void()> then;
};

/// A posted collective of this rank, moved on by polls.
class Pending {
public:
  virtual ~Pending() = default;
  /// Moves it on as far as it goes without blocking (with `block`: to its end). Returns whether
  /// it is done. Throws RuntimeError naming the call on an error.
  virtual bool advance(bool block) = 0;
  virtual bool done() const = 0;
};

/// A collective as the steps it takes on this rank, run one after another.
class Schedule final : public Pending {
public:
  Schedule(std::string where, MPI_Comm comm, int tag) : where_(std::move(where)), comm_(comm), tag_(tag) {}
  Schedule(const Schedule &) = delete;
  Schedule &operator=(const Schedule &) = delete;

  /// Local work before the first message (copying this rank's own block, say).
  std::function<void()> begin;
  std::vector<Exchange> steps;

  bool advance(bool block) override;
  bool done() const override { return done_; }

private:
  void post(Exchange &e);
  void check(int rc) const;

  std::string where_;
  MPI_Comm comm_;
  int tag_;
  size_t next_ = 0;
  bool started_ = false, posted_ = false, done_ = false;
  std::vector<MPI_Request> requests_; // of the step posted
};

/// The buffers of a bucket as one array of elements of `elementSize` bytes.
class Bucket {
public:
  Bucket(const std::vector<BufferRange> &buffers, int64_t elementSize);
  int64_t elements() const { return offsets_.back(); }
  int64_t elementSize() const { return es_; }
  /// Elements [begin, end) where they lie.
  Region region(int64_t begin, int64_t end) const;

private:
  int64_t es_;
  std::vector<char *> starts_;
  std::vector<int64_t> offsets_; // element offset of each buffer, then the total
};

/// Ring all-reduce of `bucket` in place among `n` ranks (this one at `rank`), through
/// `scratch` (kCollectiveChunkBytes).
void ringAllReduce(Schedule &s, const Bucket &bucket, int rank, int n, char *scratch, const Combine &combine);
/// Ring all-gather: `recv` gets every rank's `blockBytes` of `send` in rank order.
void ringAllGather(Schedule &s, const void *send, void *recv, int64_t blockBytes, int rank, int n);
/// Ring reduce-scatter of `send` (n blocks of `count` elements of `es` bytes): block `rank` of
/// the reduction into `recv`, through `scratch` (2 kCollectiveChunkBytes).
void ringReduceScatter(Schedule &s, const void *send, void *recv, int64_t count, int64_t es, int rank, int n,
                       char *scratch, const Combine &combine);

} // namespace cpc::mpi

#endif
