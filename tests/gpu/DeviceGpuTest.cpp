//===- DeviceGpuTest.cpp - the CUDA device: memory, copies, streams, events -===//
#include "GpuTestUtil.h"

#include <numeric>

namespace cpc::gputest {
namespace {

// Tests that bytes survive host -> device -> device (strided) -> host, and fills zero.
TEST(CudaDevice, CopiesAndFills) {
  CPC_REQUIRE_GPU(device);
  EXPECT_EQ(device->kind(), DeviceKind::Cuda);
  Allocator &memory = device->allocator(MemorySpace::Device);
  std::vector<float> host(64);
  std::iota(host.begin(), host.end(), 1.0f);
  void *a = memory.allocate(host.size() * 4), *b = memory.allocate(host.size() * 4);
  EXPECT_GE(memory.bytesInUse(), 512);
  device->copy(a, MemorySpace::Device, host.data(), MemorySpace::Host, host.size() * 4);
  // Rows of 8 floats: take the first 4 of each into b, packed.
  device->copy2D(b, 16, a, 32, 16, 8);
  std::vector<float> back(32);
  device->copy(back.data(), MemorySpace::Host, b, MemorySpace::Device, back.size() * 4);
  for (int r = 0; r < 8; ++r)
    for (int c = 0; c < 4; ++c)
      EXPECT_EQ(back[r * 4 + c], host[r * 8 + c]);
  device->fillZero(a, 64 * 4);
  device->copy(host.data(), MemorySpace::Host, a, MemorySpace::Device, 64 * 4);
  EXPECT_EQ(std::count(host.begin(), host.end(), 0.0f), 64);
  memory.deallocate(a);
  memory.deallocate(b);
}

// Tests that an event recorded on the compute stream orders the communication stream after it.
TEST(CudaDevice, EventsOrderStreams) {
  CPC_REQUIRE_GPU(device);
  auto event = device->makeEvent();
  event->record(device->computeStream());
  event->waitOn(device->commStream());
  device->commStream().synchronize();
  EXPECT_TRUE(event->done());
}

// Tests that scratch slots grow and keep their memory between calls.
TEST(CudaDevice, ScratchGrows) {
  CPC_REQUIRE_GPU(device);
  void *small = device->scratch(0, 256);
  EXPECT_EQ(device->scratch(0, 128), small);
  EXPECT_NE(device->scratch(0, 1 << 20), nullptr);
}

// Tests that a request beyond the GPU's memory fails with a message, not a crash.
TEST(CudaDevice, OutOfMemoryIsAnError) {
  CPC_REQUIRE_GPU(device);
  EXPECT_THROW(device->allocator(MemorySpace::Device).allocate(size_t(1) << 50), RuntimeError);
}

} // namespace
} // namespace cpc::gputest
