//===- MpiShared.h - all-reduce through memory a group's processes share ----===//
//
// Ranks on one node can read each other's memory directly. A group whose members all share
// this node's memory gets a segment (POSIX shared memory that every member maps) holding a
// control line and a staging area per member. An all-reduce then goes chunk by chunk: each
// member copies the chunk of its bucket into its staging area, combines its own block of the
// chunk straight from the others' areas, and copies every member's combined block back into
// its bucket. No messages and no copies through the kernel (MPI's single-copy CMA), whose page
// pinning and polling cost more than the sums (measured on MAE-small dp2: see the notes of
// bench/dp_overlap.py). Like the rings, the all-reduce is a Pending collective moved on by polls.
//
// The order of arithmetic within a block is the ring's (the block's first member's value, then
// each next member's added in front), so every member holds the same bits; for two members they
// are the ring's bits.
//
#ifndef CPC_RUNTIME_MPISHARED_H
#define CPC_RUNTIME_MPISHARED_H

#include "runtime/MpiSchedule.h"

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>

namespace cpc::mpi {

/// A group's shared segment: per member a control block and a staging area of
/// kCollectiveChunkBytes, mapped by every member.
class SharedSegment {
public:
  /// Made by the members of `comm` together (collective over it): null when they do not all
  /// share this node's memory, or when the segment cannot be made (every member agrees; their
  /// all-reduces then take the rings). `rank` is this process's rank in `comm`.
  static std::unique_ptr<SharedSegment> create(MPI_Comm comm, int rank, int size);
  ~SharedSegment();
  SharedSegment(const SharedSegment &) = delete;
  SharedSegment &operator=(const SharedSegment &) = delete;

  /// The last chunk (sequence number) a member has copied in, combined its block of, and copied
  /// out of; each on its own cache line.
  struct alignas(64) Counter {
    std::atomic<uint64_t> value{0};
  };
  struct Control {
    Counter posted, reduced, finished;
  };

  Control &control(int member) const;
  char *staging(int member) const;
  int rank() const { return rank_; }
  int size() const { return size_; }
  /// The sequence number of the next chunk any all-reduce of the group moves (members move the
  /// same chunks in the same order).
  uint64_t takeSequence() { return nextSequence_++; }
  uint64_t nextSequence() const { return nextSequence_; }

private:
  SharedSegment(char *base, int64_t bytes, int rank, int size) : base_(base), bytes_(bytes), rank_(rank), size_(size) {}
  char *base_;
  int64_t bytes_;
  int rank_, size_;
  uint64_t nextSequence_ = 1;
};

/// An all-reduce of a bucket in place through a group's shared segment.
class SharedAllReduce final : public Pending {
public:
  SharedAllReduce(SharedSegment &segment, Bucket bucket, Combine combine)
      : segment_(segment), bucket_(std::move(bucket)), combine_(std::move(combine)) {}
  bool advance(bool block) override;
  bool done() const override { return done_; }

private:
  enum class Phase { CopyIn, Combine, CopyOut };
  /// Whether every member's `counter` has reached `sequence` (spinning for it with `block`).
  bool allReached(SharedSegment::Counter SharedSegment::Control::*counter, uint64_t sequence, bool block) const;
  /// Elements [begin, end) of member `member`'s block of the current chunk.
  std::pair<int64_t, int64_t> blockOf(int member) const;
  void copyIn();
  void combineOwnBlock();
  void copyOut();

  SharedSegment &segment_;
  Bucket bucket_;
  Combine combine_;
  Phase phase_ = Phase::CopyIn;
  int64_t start_ = 0, length_ = 0; // the current chunk, in elements of the bucket
  uint64_t sequence_ = 0;
  bool done_ = false;
};

} // namespace cpc::mpi

#endif
