//===- DeviceBytes.h - raw element bytes on the host and on a device --------===//
//
// For the communicator tests, which move untyped buffers: tests/gpu/NcclCommunicatorTest.cpp
// (gtest) and tests/gpu/nccl_ranks.cpp (an MPI program without gtest).
//
#ifndef CPC_TESTS_GPU_DEVICEBYTES_H
#define CPC_TESTS_GPU_DEVICEBYTES_H

#include "kernels/Float16.h"
#include "runtime/Device.h"

#include <algorithm>
#include <cstdint>
#include <vector>

namespace cpc::gputest {

using Bytes = std::vector<uint8_t>;

/// `count` elements of `type` (f32, f64, f16, bf16, i64 or i32; other types stay zero), element
/// i holding value(i): keep the values small integers so that every type holds them exactly.
template <typename ValueAt> Bytes elementBytes(DType type, int64_t count, ValueAt &&value) {
  Bytes out(count * dtypeSize(type));
  for (int64_t i = 0; i < count; ++i) {
    double v = value(i);
    uint8_t *p = out.data() + i * dtypeSize(type);
    switch (type) {
    case DType::F32: *reinterpret_cast<float *>(p) = float(v); break;
    case DType::F64: *reinterpret_cast<double *>(p) = v; break;
    case DType::F16: case DType::BF16: *reinterpret_cast<uint16_t *>(p) = store16(type, float(v)); break;
    case DType::I64: *reinterpret_cast<int64_t *>(p) = int64_t(v); break;
    case DType::I32: *reinterpret_cast<int32_t *>(p) = int32_t(v); break;
    default: break;
    }
  }
  return out;
}

/// Device memory holding a copy of host bytes; download() waits for the compute stream, after
/// which every collective queued before is done (the compute stream waited for it).
struct DeviceBytes {
  Device *device;
  size_t bytes;
  void *ptr;
  DeviceBytes(Device *d, const Bytes &host)
      : device(d), bytes(host.size()),
        ptr(d->allocator(MemorySpace::Device).allocate(std::max<size_t>(1, host.size()))) {
    device->copy(ptr, MemorySpace::Device, host.data(), MemorySpace::Host, bytes);
  }
  DeviceBytes(const DeviceBytes &) = delete;
  DeviceBytes &operator=(const DeviceBytes &) = delete;
  ~DeviceBytes() { device->allocator(MemorySpace::Device).deallocate(ptr); }
  Bytes download() const {
    Bytes host(bytes);
    device->copy(host.data(), MemorySpace::Host, ptr, MemorySpace::Device, bytes);
    return host;
  }
};

} // namespace cpc::gputest

#endif
