//===- MpiShared.cpp ------------------------------------------------------===//
#include "runtime/MpiShared.h"
#include "runtime/HostMemory.h"
#include "runtime/Plan.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <immintrin.h>
#include <sched.h>

namespace cpc::mpi {

namespace {

constexpr int64_t kStagingBytes = kCollectiveChunkBytes;

/// The segment's layout: every member's control block, then every member's staging area.
int64_t controlBytes(int size) { return (int64_t(size) * sizeof(SharedSegment::Control) + 4095) / 4096 * 4096; }

/// Whether the members of `comm` all share this node's memory (every member gets the same answer).
bool onOneNode(MPI_Comm comm, int size) {
  MPI_Comm node = MPI_COMM_NULL;
  int all = 0, agreed = 0;
  if (MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node) == MPI_SUCCESS) {
    int nodeSize = 0;
    MPI_Comm_size(node, &nodeSize);
    MPI_Comm_free(&node);
    all = nodeSize == size;
  }
  if (MPI_Allreduce(&all, &agreed, 1, MPI_INT, MPI_MIN, comm) != MPI_SUCCESS)
    return false;
  return agreed;
}

/// Maps `fd`'s first `bytes` at an address aligned to kFaultAroundBytes (HostMemory.h): a
/// reservation one window larger, the object mapped over its aligned part, the rest given back.
void *mapAligned(int fd, int64_t bytes) {
  const int64_t window = kFaultAroundBytes;
  void *reserved = mmap(nullptr, bytes + window, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (reserved == MAP_FAILED)
    return MAP_FAILED;
  uintptr_t start = reinterpret_cast<uintptr_t>(reserved), aligned = (start + window - 1) / window * window;
  void *p = mmap(reinterpret_cast<void *>(aligned), bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, fd, 0);
  if (p == MAP_FAILED) {
    munmap(reserved, bytes + window);
    return MAP_FAILED;
  }
  if (aligned > start)
    munmap(reserved, aligned - start);
  uintptr_t end = aligned + (uintptr_t)((bytes + 4095) / 4096 * 4096), reservedEnd = start + bytes + window;
  if (reservedEnd > end)
    munmap(reinterpret_cast<void *>(end), reservedEnd - end);
  return p;
}

/// Maps the shared-memory object `name` of `bytes`, making it first when `make` (a name nobody
/// holds); null when it cannot.
char *mapObject(const char *name, int64_t bytes, bool make) {
  int fd = shm_open(name, make ? O_CREAT | O_EXCL | O_RDWR : O_RDWR, 0600);
  if (fd < 0)
    return nullptr;
  void *p = !make || ftruncate(fd, bytes) == 0 ? mapAligned(fd, bytes) : MAP_FAILED;
  close(fd);
  return p == MAP_FAILED ? nullptr : static_cast<char *>(p);
}

} // namespace

std::unique_ptr<SharedSegment> SharedSegment::create(MPI_Comm comm, int rank, int size) {
  if (size < 2 || !onOneNode(comm, size))
    return nullptr;
  const int64_t bytes = controlBytes(size) + int64_t(size) * kStagingBytes;
  // Member 0 makes the object under a name unique to it and tells the others; each maps it; once
  // all have, member 0 removes the name, so that nothing outlives the job.
  char name[64] = {};
  static int made = 0;
  char *base = nullptr;
  if (rank == 0) {
    std::snprintf(name, sizeof(name), "/cpc-%d-%d", (int)getpid(), made++);
    base = mapObject(name, bytes, true);
  }
  int ok = rank != 0 || base;
  MPI_Bcast(name, sizeof(name), MPI_CHAR, 0, comm);
  MPI_Bcast(&ok, 1, MPI_INT, 0, comm);
  if (ok && rank != 0)
    base = mapObject(name, bytes, false);
  int mapped = base != nullptr, all = 0;
  MPI_Allreduce(&mapped, &all, 1, MPI_INT, MPI_MIN, comm);
  if (rank == 0 && ok)
    shm_unlink(name);
  if (!all) { // (the rings carry the group's all-reduces instead)
    if (base)
      munmap(base, bytes);
    return nullptr;
  }
  return std::unique_ptr<SharedSegment>(new SharedSegment(base, bytes, rank, size));
}

SharedSegment::~SharedSegment() { munmap(base_, bytes_); }

SharedSegment::Control &SharedSegment::control(int member) const {
  return reinterpret_cast<Control *>(base_)[member];
}

char *SharedSegment::staging(int member) const { return base_ + controlBytes(size_) + int64_t(member) * kStagingBytes; }

std::unique_ptr<SharedArena> SharedArena::create(MPI_Comm world, int rank, int size, int64_t bytes) {
  // Each rank makes its own region under a name unique to it, the ranks of a node exchange the
  // names and map each other's, and once every rank has, each removes its name.
  static int made = 0;
  const int64_t mapped = std::max<int64_t>(bytes, 4096);
  char name[64] = {};
  std::snprintf(name, sizeof(name), "/cpc-arena-%d-%d", (int)getpid(), made++);
  char *mine = mapObject(name, mapped, true);
  MPI_Comm node = MPI_COMM_NULL; // (every rank takes part in the split, even one without a region)
  bool ok = MPI_Comm_split_type(world, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node) == MPI_SUCCESS && mine;
  std::vector<std::pair<char *, int64_t>> regions(size, {nullptr, 0});
  if (node != MPI_COMM_NULL) {
    int nodeSize = 0;
    MPI_Comm_size(node, &nodeSize);
    struct Entry {
      char name[64];
      int64_t bytes;
      int rank;
    } own{};
    std::vector<Entry> all(nodeSize);
    std::memcpy(own.name, name, sizeof(name));
    own.bytes = mine ? mapped : 0;
    own.rank = rank;
    MPI_Allgather(&own, sizeof(Entry), MPI_BYTE, all.data(), sizeof(Entry), MPI_BYTE, node);
    for (int i = 0; i < nodeSize && ok; ++i) {
      const Entry &e = all[i];
      if (e.rank == rank) {
        regions[rank] = {mine, mapped};
        continue;
      }
      char *p = e.bytes > 0 ? mapObject(e.name, e.bytes, false) : nullptr;
      ok = p != nullptr;
      if (ok)
        regions[e.rank] = {p, e.bytes};
    }
    MPI_Comm_free(&node);
  }
  int good = ok, everyone = 0;
  MPI_Allreduce(&good, &everyone, 1, MPI_INT, MPI_MIN, world); // also: every rank has mapped
  if (mine)
    shm_unlink(name);
  if (!everyone) { // (the arena comes from the device, the all-reduces stage)
    for (auto &[base, n] : regions)
      if (base && base != mine)
        munmap(base, n);
    if (mine)
      munmap(mine, mapped);
    return nullptr;
  }
  return std::unique_ptr<SharedArena>(new SharedArena(std::move(regions), rank));
}

SharedArena::~SharedArena() {
  for (auto &[base, bytes] : regions_)
    if (base)
      munmap(base, bytes);
}

int64_t SharedArena::offsetOf(const void *p, int64_t bytes) const {
  const char *c = static_cast<const char *>(p);
  auto [base, size] = regions_[rank_];
  return c >= base && c + bytes <= base + size ? c - base : -1;
}

char *SharedArena::at(int peer, int64_t offset, int64_t bytes) const {
  if (peer < 0 || peer >= (int)regions_.size())
    return nullptr;
  auto [base, size] = regions_[peer];
  return base && offset >= 0 && offset + bytes <= size ? base + offset : nullptr;
}

Region SharedAllReduce::memberRegion(int member, int64_t begin, int64_t end) const {
  Region r;
  for (const auto &[p, bytes] : bucket_.region(begin, end).pieces)
    r.add(arena_->at(members_[member], arena_->offsetOf(p, bytes), bytes), bytes);
  return r;
}

void SharedAllReduce::combineInPlace() {
  // In rank order (the members' values from the first member's on, as every shared collective
  // sums), accumulated in this member's staging area, a staging area's worth at a time; then the
  // block goes to every member, this one included.
  const int me = segment_.rank(), n = segment_.size();
  const int64_t es = bucket_.elementSize();
  auto [begin, end] = blockOf(me);
  char *acc = segment_.staging(me);
  for (int64_t from = begin; from < end; from += kStagingBytes / es) {
    const int64_t to = std::min(end, from + kStagingBytes / es);
    std::vector<Region> values;
    for (int m = 0; m < n; ++m)
      values.push_back(memberRegion(m, from, to));
    int64_t offset = 0;
    for (size_t i = 0; i < values[0].pieces.size(); ++i) {
      const int64_t count = values[0].pieces[i].second / es;
      char *dst = acc + offset;
      combine_(dst, values[0].pieces[i].first, n > 1 ? values[1].pieces[i].first : values[0].pieces[i].first, count);
      for (int m = 2; m < n; ++m)
        combine_(dst, dst, values[m].pieces[i].first, count);
      offset += values[0].pieces[i].second;
    }
    for (int m = 0; m < n; ++m) {
      const char *from = acc;
      for (const auto &[p, bytes] : values[m].pieces) {
        std::memcpy(p, from, bytes);
        from += bytes;
      }
    }
  }
}

bool SharedSegment::allReached(Counter Control::*counter, uint64_t sequence, bool block) const {
  for (int m = 0; m < size_; ++m)
    for (int spins = 0; (control(m).*counter).value.load(std::memory_order_acquire) < sequence; ++spins) {
      if (!block)
        return false;
      if (spins % 1024 == 1023) // more ranks than cores: let the member we wait for run
        sched_yield();
      else
        _mm_pause();
    }
  return true;
}

std::pair<int64_t, int64_t> SharedAllReduce::blockOf(int member) const {
  const int64_t n = segment_.size();
  return {member * length_ / n, (member + 1) * length_ / n};
}

void SharedAllReduce::copyIn() {
  // The others' blocks only: this member's own block is combined from its bucket directly.
  const int me = segment_.rank();
  const int64_t es = bucket_.elementSize();
  for (int m = 0; m < segment_.size(); ++m) {
    if (m == me)
      continue;
    auto [begin, end] = blockOf(m);
    char *out = segment_.staging(me) + begin * es;
    for (const auto &[p, bytes] : bucket_.region(start_ + begin, start_ + end).pieces) {
      std::memcpy(out, p, bytes);
      out += bytes;
    }
  }
}

void SharedAllReduce::combineOwnBlock() {
  // In rank order: member 0's value, then each next member's added (this member's own value is
  // read from its bucket, the others' from their staging areas).
  const int me = segment_.rank(), n = segment_.size();
  const int64_t es = bucket_.elementSize();
  auto [begin, end] = blockOf(me);
  char *running = segment_.staging(me) + begin * es;
  const Region own = bucket_.region(start_ + begin, start_ + end);
  // dst = op(dst or the first value, member m's value), with this member's value piece by piece.
  auto add = [&](const char *first, int m) {
    if (m != me) {
      combine_(running, first, segment_.staging(m) + begin * es, end - begin);
      return;
    }
    int64_t offset = 0;
    for (const auto &[p, bytes] : own.pieces) {
      combine_(running + offset, first == running ? running + offset : first + offset, p, bytes / es);
      offset += bytes;
    }
  };
  if (n < 2)
    return;
  if (me == 0) { // the first value is this member's: its pieces, then member 1's
    int64_t offset = 0;
    for (const auto &[p, bytes] : own.pieces) {
      combine_(running + offset, p, segment_.staging(1) + begin * es + offset, bytes / es);
      offset += bytes;
    }
  } else {
    add(segment_.staging(0) + begin * es, 1);
  }
  for (int m = 2; m < n; ++m)
    add(running, m);
}

void SharedAllReduce::copyOut() {
  const int64_t es = bucket_.elementSize();
  for (int m = 0; m < segment_.size(); ++m) {
    auto [begin, end] = blockOf(m);
    Region target = bucket_.region(start_ + begin, start_ + end);
    const char *from = segment_.staging(m) + begin * es;
    for (const auto &[p, bytes] : target.pieces) {
      std::memcpy(p, from, bytes);
      from += bytes;
    }
  }
}

// Over 80 lines: one state machine, its phases in the order they run (the handshake that picks
// in place or staged, then either's steps), each returning where it must wait.
bool SharedAllReduce::advance(bool block) {
  const int me = segment_.rank(), n = segment_.size();
  const int64_t chunk = kStagingBytes / bucket_.elementSize();
  using Control = SharedSegment::Control;
  while (!done_) {
    if (phase_ == Phase::Handshake) {
      // Every member says where its bucket is; the counters of the last call must be done.
      if (!segment_.allReached(&Control::finished, segment_.nextSequence() - 1, block))
        return false;
      sequence_ = segment_.takeSequence();
      segment_.control(me).layout.value.store(layout_, std::memory_order_relaxed);
      segment_.control(me).posted.value.store(sequence_, std::memory_order_release);
      phase_ = Phase::Decide;
    }
    if (phase_ == Phase::Decide) {
      if (!segment_.allReached(&Control::posted, sequence_, block))
        return false;
      bool inPlace = layout_ != 0;
      for (int m = 0; m < n; ++m)
        inPlace = inPlace && segment_.control(m).layout.value.load(std::memory_order_relaxed) == layout_;
      if (!inPlace) { // through the stages, from the next sequence on (every member decides alike)
        segment_.control(me).reduced.value.store(sequence_, std::memory_order_release);
        segment_.control(me).finished.value.store(sequence_, std::memory_order_release);
        phase_ = Phase::CopyIn;
        continue;
      }
      start_ = 0;
      length_ = bucket_.elements();
      combineInPlace();
      segment_.control(me).reduced.value.store(sequence_, std::memory_order_release);
      phase_ = Phase::InPlaceDone;
    }
    if (phase_ == Phase::InPlaceDone) {
      if (!segment_.allReached(&Control::reduced, sequence_, block)) // every block written here
        return false;
      segment_.control(me).finished.value.store(sequence_, std::memory_order_release);
      done_ = true;
      break;
    }
    if (phase_ == Phase::CopyIn) {
      if (start_ >= bucket_.elements()) {
        done_ = true;
        break;
      }
      // This member's staging area is free once every member has copied the last chunk out.
      if (!segment_.allReached(&Control::finished, segment_.nextSequence() - 1, block))
        return false;
      length_ = std::min(chunk, bucket_.elements() - start_);
      copyIn();
      sequence_ = segment_.takeSequence();
      segment_.control(me).posted.value.store(sequence_, std::memory_order_release);
      phase_ = Phase::Combine;
    }
    if (phase_ == Phase::Combine) {
      if (!segment_.allReached(&Control::posted, sequence_, block))
        return false;
      combineOwnBlock();
      segment_.control(me).reduced.value.store(sequence_, std::memory_order_release);
      phase_ = Phase::CopyOut;
    }
    if (phase_ == Phase::CopyOut) {
      if (!segment_.allReached(&Control::reduced, sequence_, block))
        return false;
      copyOut();
      segment_.control(me).finished.value.store(sequence_, std::memory_order_release);
      start_ += length_;
      phase_ = Phase::CopyIn;
    }
  }
  return true;
}

bool SharedReduceScatter::advance(bool block) {
  const int me = segment_.rank(), n = segment_.size();
  const int64_t piece = std::max<int64_t>(1, kStagingBytes / es_ / n);
  using Control = SharedSegment::Control;
  while (!done_) {
    if (phase_ == Phase::CopyIn) {
      if (start_ >= count_) {
        done_ = true;
        break;
      }
      // This member's staging area is free once every member has combined the last piece.
      if (!segment_.allReached(&Control::finished, segment_.nextSequence() - 1, block))
        return false;
      length_ = std::min(piece, count_ - start_);
      char *staging = segment_.staging(me);
      for (int m = 0; m < n; ++m) // destination m's piece at m * piece
        std::memcpy(staging + m * piece * es_, send_ + (m * count_ + start_) * es_, length_ * es_);
      sequence_ = segment_.takeSequence();
      segment_.control(me).posted.value.store(sequence_, std::memory_order_release);
      segment_.control(me).reduced.value.store(sequence_, std::memory_order_release);
      phase_ = Phase::Combine;
    }
    if (phase_ == Phase::Combine) {
      if (!segment_.allReached(&Control::posted, sequence_, block))
        return false;
      char *out = recv_ + start_ * es_;
      auto value = [&](int m) { return segment_.staging(m) + me * piece * es_; };
      if (n == 1)
        std::memcpy(out, value(0), length_ * es_);
      else
        combine_(out, value(0), value(1), length_);
      for (int m = 2; m < n; ++m)
        combine_(out, out, value(m), length_);
      segment_.control(me).finished.value.store(sequence_, std::memory_order_release);
      start_ += length_;
      phase_ = Phase::CopyIn;
    }
  }
  return true;
}

} // namespace cpc::mpi
