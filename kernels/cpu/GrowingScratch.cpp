//===- GrowingScratch.cpp - a thread's scratch that costs only what it holds -===//
#include "kernels/cpu/GrowingScratch.h"
#include "kernels/Tensor.h"

#include <sys/mman.h>

#include <algorithm>

#include <cstring>
#include <string>

namespace cpc::kernels {

void *GrowingScratch::reserve(size_t bytes) {
  if (bytes <= size_ && data_)
    return data_;
  release();
  size_t size = (std::max<size_t>(bytes, 1) + 4095) / 4096 * 4096;
  void *p = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED)
    throw RuntimeError("out of memory allocating " + std::to_string(size) + " bytes of kernel scratch");
  std::memset(p, 0, size);
  data_ = p;
  size_ = size;
  return data_;
}

void GrowingScratch::release() {
  if (data_)
    munmap(data_, size_);
  data_ = nullptr;
  size_ = 0;
}

} // namespace cpc::kernels
