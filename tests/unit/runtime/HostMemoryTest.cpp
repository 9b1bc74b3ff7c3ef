//===- HostMemoryTest.cpp - host buffers cost what the prediction counts --===//
#include "runtime/Device.h"
#include "runtime/HostMemory.h"
#include "runtime/MemoryProbe.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <sys/mman.h>
#include <unistd.h>
#include <vector>

using namespace cpc;

// Tests the rule both sides use: 256-byte granular, whole pages from 64 kB.
TEST(HostMemoryTest, ResidentBytesFollowTheAllocatorsGranularity) {
  EXPECT_EQ(hostBufferBytes(1), 256);
  EXPECT_EQ(hostBufferBytes(257), 512);
  EXPECT_EQ(hostResidentBytes(1000), 1024 + 256 + 16);
  EXPECT_EQ(hostResidentBytes(kHostMappedBytes), kHostMappedBytes);
  EXPECT_EQ(hostResidentBytes(kHostMappedBytes + 1), kHostMappedBytes + kHostPageBytes);
  EXPECT_EQ(hostResidentBytes(1 << 20), 1 << 20);
}

// Tests that a large host buffer is a zeroed mapping of its own, resident in whole pages, and
// that a small one comes from the heap, zeroed too; both are returned.
TEST(HostMemoryTest, LargeBuffersAreMappingsOfTheirOwn) {
  std::unique_ptr<Device> cpu = makeDevice(DeviceKind::Cpu, 0);
  Allocator &host = cpu->allocator(MemorySpace::Host);
  const size_t large = 3 * kHostMappedBytes + 5;
  auto *big = static_cast<uint8_t *>(host.allocate(large));
  ASSERT_NE(big, nullptr);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(big) % kHostPageBytes, 0u);
  std::vector<unsigned char> pages((hostResidentBytes(large) + kHostPageBytes - 1) / kHostPageBytes);
  ASSERT_EQ(mincore(big, hostResidentBytes(large), pages.data()), 0);
  for (unsigned char page : pages)
    EXPECT_TRUE(page & 1); // written at allocation: resident from the start, as predicted
  for (size_t i = 0; i < large; i += 4093)
    EXPECT_EQ(big[i], 0);
  auto *small = static_cast<uint8_t *>(host.allocate(1000));
  EXPECT_EQ(reinterpret_cast<uintptr_t>(small) % 256, 0u);
  EXPECT_EQ(small[999], 0);
  host.deallocate(big);
  host.deallocate(small);
  EXPECT_EQ(host.peakBytes(), hostBufferBytes(large) + hostBufferBytes(1000));
}

// Tests that the data measure counts anonymous memory and leaves file pages (code) out: reading
// a mapped file grows the resident size, not residentDataBytes.
TEST(HostMemoryTest, ResidentDataBytesLeaveFilePagesOut) {
  const size_t bytes = 8 << 20;
  char path[] = "/tmp/cpc-host-memory-XXXXXX";
  int fd = mkstemp(path);
  ASSERT_GE(fd, 0);
  unlink(path);
  std::vector<char> chunk(1 << 20, 'x');
  for (size_t done = 0; done < bytes; done += chunk.size())
    ASSERT_EQ(write(fd, chunk.data(), chunk.size()), (ssize_t)chunk.size());
  auto *mapped = static_cast<const volatile char *>(mmap(nullptr, bytes, PROT_READ, MAP_PRIVATE, fd, 0));
  ASSERT_NE((const void *)mapped, MAP_FAILED);
  int64_t data = residentDataBytes(), all = residentBytes();
  long sum = 0;
  for (size_t i = 0; i < bytes; i += 4096)
    sum += mapped[i];
  EXPECT_EQ(sum, long('x') * long(bytes / 4096));
  EXPECT_GE(residentBytes() - all, (int64_t)(6 << 20));  // the file's pages are resident
  EXPECT_LT(residentDataBytes() - data, (int64_t)(1 << 20)); // and not counted as data
  std::vector<uint8_t> touched(bytes, 1);                    // anonymous memory is
  EXPECT_GE(residentDataBytes() - data, (int64_t)(7 << 20));
  EXPECT_EQ(touched[bytes - 1], 1);
  munmap(const_cast<char *>(mapped), bytes);
  close(fd);
}
