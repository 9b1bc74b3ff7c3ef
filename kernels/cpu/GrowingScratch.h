//===- GrowingScratch.h - a thread's scratch that costs only what it holds ---===//
//
// Kernels keep scratch per thread for the next call, grown as a larger call needs it. From the
// heap, every size it grew through would stay resident (the heap keeps freed blocks, and after
// the plan's large frees it no longer maps blocks of these sizes apart); as a mapping of its own,
// replaced (the old one unmapped first) when it must grow, it costs its largest size, which is
// what the plan's memory prediction counts (kernels::KernelRegistry::scratchBytes, workspace).
//
#ifndef CPC_KERNELS_CPU_GROWINGSCRATCH_H
#define CPC_KERNELS_CPU_GROWINGSCRATCH_H

#include <cstddef>

namespace cpc::kernels {

class GrowingScratch {
public:
  GrowingScratch() = default;
  GrowingScratch(const GrowingScratch &) = delete;
  GrowingScratch &operator=(const GrowingScratch &) = delete;
  ~GrowingScratch() { release(); }

  /// At least `bytes`, zeroed when first mapped (its pages written, so resident from now on);
  /// what it held before is gone when it grows. Throws RuntimeError when memory runs out.
  void *reserve(size_t bytes);

private:
  void release();
  void *data_ = nullptr;
  size_t size_ = 0;
};

} // namespace cpc::kernels

#endif
