//===- HostMemory.h - what a host buffer of N bytes costs in resident memory --===//
//
// One rule shared by the CPU allocator (runtime/CpuDevice.cpp) and the compiler's predicted
// peak (compiler/PlanBuilder.cpp), so that the prediction counts what the allocator takes: a
// large buffer is its own mapping, rounded up to whole pages; a small one comes from the heap,
// 256-byte aligned, with the allocator's alignment slack and header beside it.
//
#ifndef CPC_RUNTIME_HOSTMEMORY_H
#define CPC_RUNTIME_HOSTMEMORY_H

#include <algorithm>
#include <cstdint>

namespace cpc {

constexpr int64_t kHostPageBytes = 4096;
/// From this size on a host buffer is a mapping of its own (below it, the heap's).
constexpr int64_t kHostMappedBytes = 64 * 1024;

/// A read fault on a page of a shared mapping maps every page of its aligned window that is
/// already in memory (the kernel's fault_around_bytes, 64 KiB by default): reading a peer's arena
/// makes whole windows of it resident here. Shared mappings start on a window (MpiShared.cpp), so
/// that which windows a read touches follows from the offsets alone.
constexpr int64_t kFaultAroundBytes = 64 * 1024;

/// The bytes the allocator hands out for a buffer of `bytes`: 256-byte granular, at least 256.
inline int64_t hostBufferBytes(int64_t bytes) { return std::max<int64_t>(256, (bytes + 255) / 256 * 256); }

/// The resident bytes a host buffer of `bytes` costs once written.
inline int64_t hostResidentBytes(int64_t bytes) {
  int64_t size = hostBufferBytes(bytes);
  if (size >= kHostMappedBytes)
    return (size + kHostPageBytes - 1) / kHostPageBytes * kHostPageBytes;
  return size + 256 + 16; // aligned_alloc's slack before the block and the heap's chunk header
}

} // namespace cpc

#endif
