//===- CpuDevice.cpp - the host as a Device --------------------------------===//
#include "runtime/Device.h"
#include "runtime/HostMemory.h"

#include <sys/mman.h>

#include <cstdlib>
#include <cstring>
#include <vector>

namespace cpc {

namespace {

class HostAllocator final : public Allocator {
public:
  MemorySpace space() const override { return MemorySpace::Host; }
  /// Large buffers are mappings of their own, whole pages (glibc would put them on the heap or
  /// map them depending on its moving mmap threshold): what they cost is then what the compiler
  /// predicts (HostMemory.h). Every page is written now, so a buffer is resident from the start.
  void *allocate(size_t bytes) override {
    size_t size = (size_t)hostBufferBytes((int64_t)bytes);
    void *ptr = nullptr;
    if ((int64_t)size >= kHostMappedBytes) {
      ptr = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
      ptr = ptr == MAP_FAILED ? nullptr : ptr;
    } else {
      ptr = std::aligned_alloc(256, size);
    }
    if (!ptr)
      throw RuntimeError("out of memory allocating " + std::to_string(size) + " bytes of host memory");
    std::memset(ptr, 0, size);
    sizes_.emplace_back(ptr, size);
    counted((int64_t)size);
    return ptr;
  }
  void deallocate(void *ptr) override {
    for (auto it = sizes_.begin(); it != sizes_.end(); ++it)
      if (it->first == ptr) {
        counted(-(int64_t)it->second);
        if ((int64_t)it->second >= kHostMappedBytes)
          munmap(ptr, it->second);
        else
          std::free(ptr);
        sizes_.erase(it);
        return;
      }
    std::free(ptr);
  }

private:
  std::vector<std::pair<void *, size_t>> sizes_;
};

/// Work on the host is done when it is called: there is nothing to wait for.
class HostStream final : public Stream {
public:
  void synchronize() override {}
  void *native() const override { return nullptr; }
};
class HostEvent final : public Event {
public:
  void record(Stream &) override {}
  void waitOn(Stream &) override {}
  void synchronize() override {}
  bool done() override { return true; }
};

class CpuDevice final : public Device {
public:
  DeviceKind kind() const override { return DeviceKind::Cpu; }
  int index() const override { return 0; }
  std::string name() const override { return "cpu"; }
  Allocator &allocator(MemorySpace space) override {
    if (space != MemorySpace::Host)
      throw RuntimeError("the CPU device has no device memory");
    return host_;
  }
  Stream &computeStream() override { return stream_; }
  Stream &commStream() override { return stream_; }
  std::unique_ptr<Event> makeEvent() override { return std::make_unique<HostEvent>(); }
  void copy(void *dst, MemorySpace, const void *src, MemorySpace, size_t bytes) override {
    if (bytes && dst != src)
      std::memmove(dst, src, bytes);
  }
  void copy2D(void *dst, size_t dstPitch, const void *src, size_t srcPitch, size_t width, size_t height) override {
    for (size_t r = 0; r < height; ++r)
      std::memcpy(static_cast<uint8_t *>(dst) + r * dstPitch, static_cast<const uint8_t *>(src) + r * srcPitch, width);
  }
  void fillZero(void *dst, size_t bytes) override { std::memset(dst, 0, bytes); }
  void synchronize() override {}
  void *scratch(int slot, size_t bytes) override { return tensorScratch(nullptr, slot, bytes); }

private:
  HostAllocator host_;
  HostStream stream_;
};

} // namespace

std::unique_ptr<Device> makeCpuDevice() { return std::make_unique<CpuDevice>(); }

void copyTensorBytes(Device *device, void *dst, const void *src, size_t bytes) {
  if (device) {
    device->copy(dst, device->tensorSpace(), src, device->tensorSpace(), bytes);
    return;
  }
  if (bytes && dst != src)
    std::memmove(dst, src, bytes);
}

void copyTensorRows(Device *device, void *dst, size_t dstPitch, const void *src, size_t srcPitch, size_t width,
                    size_t height) {
  if (device) {
    device->copy2D(dst, dstPitch, src, srcPitch, width, height);
    return;
  }
  for (size_t r = 0; r < height; ++r)
    std::memcpy(static_cast<uint8_t *>(dst) + r * dstPitch, static_cast<const uint8_t *>(src) + r * srcPitch, width);
}

void zeroTensorBytes(Device *device, void *dst, size_t bytes) {
  if (device)
    device->fillZero(dst, bytes);
  else
    std::memset(dst, 0, bytes);
}

void *tensorScratch(Device *device, int slot, size_t bytes) {
  if (device && device->kind() != DeviceKind::Cpu)
    return device->scratch(slot, bytes);
  if (slot < 0 || slot >= Device::kScratchSlots)
    throw RuntimeError("scratch slot " + std::to_string(slot) + " does not exist");
  thread_local std::vector<uint8_t> buffers[Device::kScratchSlots];
  if (buffers[slot].size() < bytes)
    buffers[slot].resize(bytes);
  return buffers[slot].data();
}

} // namespace cpc
