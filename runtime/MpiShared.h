//===- MpiShared.h - collectives through memory a group's processes share ---===//
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
// The order of arithmetic is the members' (member 0's value, then each next member's added), for
// every element whatever block it falls in, and alike in the reduce-scatter: a gradient has the
// same bits all-reduced whole (ZeRO-0/1) or reduce-scattered in blocks (ZeRO-2/3), which 16-bit
// sums of three or more members would not have in the rings' orders. For two members these are
// the rings' bits too.
//
#ifndef CPC_RUNTIME_MPISHARED_H
#define CPC_RUNTIME_MPISHARED_H

#include "runtime/MpiSchedule.h"

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

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
    Counter layout; // an all-reduce's buffers in the shared arena (offsets and sizes), 0: not there
  };

  Control &control(int member) const;
  char *staging(int member) const;
  /// Whether every member's `counter` has reached `sequence` (spinning for it with `block`).
  bool allReached(Counter Control::*counter, uint64_t sequence, bool block) const;
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

/// Every rank's region of memory on this node, each mapped by all of them: a CPU plan's arena
/// (Communicator::allocateSharedHost). A rank's buffers in it are at the same offsets in its
/// peers' regions when they run the same program, which an all-reduce checks before it reads
/// and writes them there.
class SharedArena {
public:
  /// Collective over `world`: this rank's region of `bytes`, and the regions of the ranks on its
  /// node mapped; null on every rank when any rank could not make or map them.
  static std::unique_ptr<SharedArena> create(MPI_Comm world, int rank, int size, int64_t bytes);
  ~SharedArena();
  SharedArena(const SharedArena &) = delete;
  SharedArena &operator=(const SharedArena &) = delete;
  char *mine() const { return regions_[rank_].first; }
  /// The offset of [p, p + bytes) in this rank's region, or -1 when it is not inside.
  int64_t offsetOf(const void *p, int64_t bytes) const;
  /// Where offset `offset` of `bytes` is in world rank `peer`'s region; null when that region is
  /// not mapped or too small.
  char *at(int peer, int64_t offset, int64_t bytes) const;

private:
  SharedArena(std::vector<std::pair<char *, int64_t>> regions, int rank) : regions_(std::move(regions)), rank_(rank) {}
  std::vector<std::pair<char *, int64_t>> regions_; // by world rank: base, bytes (null: another node)
  int rank_;
};

/// An all-reduce of a bucket in place through a group's shared segment. When every member's
/// bucket lies in the shared arena at the same offsets (`layout` agrees), each member combines its
/// block straight from the others' buffers and writes the result into all of them: no staging.
/// Otherwise it goes chunk by chunk through the stages.
class SharedAllReduce final : public Pending {
public:
  /// `arena` (may be null) holds the bucket when `layout` is nonzero; `members` are the group's
  /// world ranks in group order.
  SharedAllReduce(SharedSegment &segment, Bucket bucket, Combine combine, const SharedArena *arena,
                  uint64_t layout, std::vector<int> members)
      : segment_(segment), bucket_(std::move(bucket)), combine_(std::move(combine)), arena_(arena), layout_(layout),
        members_(std::move(members)) {}
  bool advance(bool block) override;
  bool done() const override { return done_; }

private:
  enum class Phase { Handshake, Decide, InPlaceDone, CopyIn, Combine, CopyOut };
  /// Both members' buffers in the arena: combine this member's block in place, write it to all.
  void combineInPlace();
  /// Where elements [begin, end) of the bucket are in member `member`'s memory, piece by piece.
  Region memberRegion(int member, int64_t begin, int64_t end) const;
  /// Elements [begin, end) of member `member`'s block of the current chunk.
  std::pair<int64_t, int64_t> blockOf(int member) const;
  void copyIn();
  void combineOwnBlock();
  void copyOut();

  SharedSegment &segment_;
  Bucket bucket_;
  Combine combine_;
  const SharedArena *arena_;
  uint64_t layout_;
  std::vector<int> members_;
  Phase phase_ = Phase::Handshake;
  int64_t start_ = 0, length_ = 0; // the current chunk, in elements of the bucket
  uint64_t sequence_ = 0;
  bool done_ = false;
};

/// A reduce-scatter through a group's shared segment: piece by piece of every member's block,
/// each member copies its input's pieces (one per destination member) into its staging area and
/// combines its own block's from every staging area, in rank order as SharedAllReduce does, so a
/// value reduce-scattered has the bits it has all-reduced.
class SharedReduceScatter final : public Pending {
public:
  /// `send` holds `count` elements of `elementSize` bytes per member, in member order; this
  /// member's combined block goes to `recv`.
  SharedReduceScatter(SharedSegment &segment, const void *send, void *recv, int64_t count, int64_t elementSize,
                      Combine combine)
      : segment_(segment), send_(static_cast<const char *>(send)), recv_(static_cast<char *>(recv)), count_(count),
        es_(elementSize), combine_(std::move(combine)) {}
  bool advance(bool block) override;
  bool done() const override { return done_; }

private:
  enum class Phase { CopyIn, Combine };

  SharedSegment &segment_;
  const char *send_;
  char *recv_;
  int64_t count_, es_;
  Combine combine_;
  Phase phase_ = Phase::CopyIn;
  int64_t start_ = 0, length_ = 0; // the current piece of every block, in elements
  uint64_t sequence_ = 0;
  bool done_ = false;
};

} // namespace cpc::mpi

#endif
