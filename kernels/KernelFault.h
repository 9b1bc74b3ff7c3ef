//===- KernelFault.h - faults a device kernel records for the host ---------===//
//
// Where a CPU kernel fails its step (an index out of range, an integer division by zero), a GPU
// kernel cannot: it runs after the host has moved on, and it cannot throw. It records the fault
// instead, and the host reads the record once the work has run (the executor, at the end of a
// program run, after copies to the host and at the end of each step) and fails the step that
// launched the kernel, in the CPU kernel's words. Only the first fault is kept: later ones (other
// threads, other kernels) lose the claim and write nothing; so where several indices are out of
// range, the one named may be another than the first the CPU kernel would name.
//
// Plain C++ and CPC_HD: nvcc compiles report() into the kernels, the host compiler into the unit
// tests that check it (and the messages) against the CPU kernels.
//
#ifndef CPC_KERNELS_KERNELFAULT_H
#define CPC_KERNELS_KERNELFAULT_H

#include "kernels/cuda/HostDevice.h"

#include <cstdint>
#include <string>

namespace cpc::kernels {

enum class FaultKind : int32_t {
  None = 0,
  IndexOutOfRange = 1,       // `value` outside [-size, size) of dim `dim` (-1: the dim is not named)
  IntegerDivisionByZero = 2, // an integer divisor was zero
};

/// The record a device holds, in memory the host reads while the device writes it (mapped
/// pinned memory). `kind` is written last, after a fence, so a host that sees it set sees the
/// rest.
struct KernelFault {
  int32_t kind = 0; // FaultKind
  int32_t dim = -1;
  int64_t site = 0; // which launch: the tag the host set before it (the executor: program and step)
  int64_t value = 0, size = 0;
};

/// What a kernel that can fault takes as a parameter: the claim word (device memory: the
/// first fault sets it atomically, which device atomics on host memory do not promise) and the
/// record it then fills. Null pointers ignore faults (the unit tests of a kernel's arithmetic, a
/// kernel launched outside a device that collects them).
struct FaultSink {
  int32_t *claim = nullptr;
  KernelFault *record = nullptr;
  int64_t site = 0;

  CPC_HD void report(FaultKind kind, int64_t value = 0, int64_t size = 0, int32_t dim = -1) const {
    if (!claim || !record)
      return;
#ifdef __CUDA_ARCH__
    if (atomicCAS(claim, 0, 1) != 0)
      return;
#else
    int32_t expected = 0;
    if (!__atomic_compare_exchange_n(claim, &expected, 1, false, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
      return;
#endif
    record->dim = dim;
    record->site = site;
    record->value = value;
    record->size = size;
#ifdef __CUDA_ARCH__
    __threadfence_system(); // the fields reach the host before kind does
    *(volatile int32_t *)&record->kind = int32_t(kind);
#else
    __atomic_store_n(&record->kind, int32_t(kind), __ATOMIC_RELEASE);
#endif
  }
};

/// A claim word and record in host memory (the host tests of the kernels' arithmetic).
struct HostFaultRecord {
  int32_t claim = 0;
  KernelFault fault;
  FaultSink sink(int64_t site = 0) { return {&claim, &fault, site}; }
};

/// The CPU kernel's message for `fault` (kernels/cpu/Indexing.cpp, Backward.cpp, Elementwise.cpp).
inline std::string describeFault(const KernelFault &fault) {
  switch (FaultKind(fault.kind)) {
  case FaultKind::None: return "no fault";
  case FaultKind::IndexOutOfRange:
    return "index " + std::to_string(fault.value) + " is out of range for " +
           (fault.dim >= 0 ? "dim " + std::to_string(fault.dim) + " of size " : std::string("a dim of size ")) +
           std::to_string(fault.size);
  case FaultKind::IntegerDivisionByZero: return "integer division by zero";
  }
  return "unknown device fault " + std::to_string(fault.kind);
}

} // namespace cpc::kernels

#endif
