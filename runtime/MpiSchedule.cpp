//===- MpiSchedule.cpp ----------------------------------------------------===//
#include "runtime/MpiSchedule.h"
#include "runtime/Plan.h"

#include <algorithm>
#include <cstring>

namespace cpc::mpi {

void Region::add(const void *data, int64_t n) {
  if (n <= 0)
    return;
  pieces.push_back({static_cast<char *>(const_cast<void *>(data)), n});
  bytes += n;
}

Region Region::split(const void *data, const Region &like) {
  Region r;
  const char *p = static_cast<const char *>(data);
  for (const auto &[ignored, n] : like.pieces) {
    r.add(p, n);
    p += n;
  }
  return r;
}

void Schedule::check(int rc) const {
  if (rc == MPI_SUCCESS)
    return;
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  std::string message = MPI_Error_string(rc, text, &len) == MPI_SUCCESS ? std::string(text, len)
                                                                        : "MPI error " + std::to_string(rc);
  throw RuntimeError(where_ + ": " + message);
}

void Schedule::post(Exchange &e) {
  // A message per piece: contiguous messages go by a single copy between the processes (CMA),
  // where a derived type would go through 32 kB fragments, each waiting for a poll.
  requests_.clear();
  if (e.from >= 0)
    for (const auto &[p, n] : e.recv.pieces) {
      requests_.emplace_back();
      check(MPI_Irecv(p, (int)n, MPI_BYTE, e.from, tag_, comm_, &requests_.back()));
    }
  if (e.to >= 0)
    for (const auto &[p, n] : e.send.pieces) {
      requests_.emplace_back();
      check(MPI_Isend(p, (int)n, MPI_BYTE, e.to, tag_, comm_, &requests_.back()));
    }
}

bool Schedule::advance(bool block) {
  if (done_)
    return true;
  if (!started_) {
    started_ = true;
    if (begin)
      begin();
  }
  while (next_ < steps.size()) {
    Exchange &e = steps[next_];
    if (!posted_) {
      post(e);
      posted_ = true;
    }
    if (block) {
      check(MPI_Waitall((int)requests_.size(), requests_.data(), MPI_STATUSES_IGNORE));
    } else {
      int finished = 0;
      check(MPI_Testall((int)requests_.size(), requests_.data(), &finished, MPI_STATUSES_IGNORE));
      if (!finished)
        return false;
    }
    posted_ = false;
    if (e.then)
      e.then();
    ++next_;
  }
  done_ = true;
  steps.clear();
  return true;
}

Bucket::Bucket(const std::vector<BufferRange> &buffers, int64_t elementSize) : es_(elementSize) {
  offsets_.push_back(0);
  for (const BufferRange &b : buffers) {
    starts_.push_back(static_cast<char *>(b.data));
    offsets_.push_back(offsets_.back() + b.count);
  }
}

Region Bucket::region(int64_t begin, int64_t end) const {
  Region r;
  size_t i = std::upper_bound(offsets_.begin(), offsets_.end(), begin) - offsets_.begin();
  for (i = i == 0 ? 0 : i - 1; i < starts_.size() && offsets_[i] < end; ++i) {
    int64_t from = std::max(begin, offsets_[i]), to = std::min(end, offsets_[i + 1]);
    r.add(starts_[i] + (from - offsets_[i]) * es_, (to - from) * es_);
  }
  return r;
}

namespace {
int64_t wrap(int64_t b, int64_t n) { return (b % n + n) % n; }
} // namespace

void ringAllReduce(Schedule &s, const Bucket &bucket, int rank, int n, char *scratch, const Combine &combine) {
  const int64_t es = bucket.elementSize(), count = bucket.elements(), chunk = kCollectiveChunkBytes / es;
  const int right = (rank + 1) % n, left = (rank + n - 1) % n;
  char *incoming = scratch;
  for (int64_t start = 0; start < count && n > 1; start += n * chunk) {
    const int64_t len = std::min(n * chunk, count - start);
    auto begin = [&](int64_t b) { return start + wrap(b, n) * len / n; };
    auto size = [&](int64_t b) { return (wrap(b, n) + 1) * len / n - wrap(b, n) * len / n; };
    auto region = [&](int64_t b) { return bucket.region(begin(b), begin(b) + size(b)); };
    // Reduce-scatter: after step k, the block received holds k + 2 ranks' values combined.
    for (int64_t k = 0; k + 1 < n; ++k) {
      Exchange e;
      e.send = region(rank - k);
      e.to = right;
      Region target = region(rank - k - 1);
      e.recv = Region::split(incoming, target); // the sender's pieces are the same members
      e.from = left;
      e.then = [target, incoming, es, combine] {
        int64_t offset = 0;
        for (const auto &[p, bytes] : target.pieces) {
          combine(p, p, incoming + offset, bytes / es);
          offset += bytes;
        }
      };
      s.steps.push_back(std::move(e));
    }
    // All-gather: this rank's reduced block is rank + 1; pass the reduced blocks around.
    for (int64_t k = 0; k + 1 < n; ++k) {
      Exchange e;
      e.send = region(rank + 1 - k);
      e.to = right;
      e.recv = region(rank - k);
      e.from = left;
      s.steps.push_back(std::move(e));
    }
  }
}

void ringAllGather(Schedule &s, const void *send, void *recv, int64_t blockBytes, int rank, int n) {
  char *out = static_cast<char *>(recv);
  auto block = [=](int64_t b) { return out + wrap(b, n) * blockBytes; };
  s.begin = [=] {
    if (send != block(rank))
      std::memcpy(block(rank), send, blockBytes);
  };
  const int right = (rank + 1) % n, left = (rank + n - 1) % n;
  for (int64_t done = 0; done < blockBytes; done += kCollectiveChunkBytes) { // pieces: bounded messages
    int64_t piece = std::min<int64_t>(kCollectiveChunkBytes, blockBytes - done);
    for (int64_t k = 0; k + 1 < n; ++k) {
      Exchange e;
      e.send.add(block(rank - k) + done, piece);
      e.to = right;
      e.recv.add(block(rank - k - 1) + done, piece);
      e.from = left;
      s.steps.push_back(std::move(e));
    }
  }
}

void ringReduceScatter(Schedule &s, const void *send, void *recv, int64_t count, int64_t es, int rank, int n,
                       char *scratch, const Combine &combine) {
  const char *in = static_cast<const char *>(send);
  auto block = [=](int64_t b) { return in + wrap(b, n) * count * es; };
  if (n == 1 && send != recv)
    s.begin = [=] { std::memcpy(recv, send, count * es); };
  char *sum = scratch, *incoming = scratch + kCollectiveChunkBytes;
  const int right = (rank + 1) % n, left = (rank + n - 1) % n;
  // Segment by segment of every block; rank r's running value of block r - k - 1 goes right at
  // step k, so that after n - 1 steps it holds the reduction of its own block r.
  for (int64_t done = 0; done < count && n > 1; done += kCollectiveChunkBytes / es) {
    int64_t piece = std::min<int64_t>(kCollectiveChunkBytes / es, count - done);
    for (int64_t k = 0; k + 1 < n; ++k) {
      Exchange e;
      e.send.add(k == 0 ? block(rank - 1) + done * es : sum, piece * es);
      e.to = right;
      e.recv.add(incoming, piece * es);
      e.from = left;
      char *target = k + 2 == n ? static_cast<char *>(recv) + done * es : sum;
      const char *own = block(rank - k - 2) + done * es;
      e.then = [=] { combine(target, incoming, own, piece); };
      s.steps.push_back(std::move(e));
    }
  }
}

} // namespace cpc::mpi
