//===- MemoryProbe.cpp ----------------------------------------------------===//
#include "runtime/MemoryProbe.h"

#include <algorithm>
#include <cstdio>
#include <malloc.h>
#include <cstring>
#include <fstream>
#include <string>

namespace cpc {

int64_t residentBytes(const char *field) {
  std::ifstream status("/proc/self/status");
  std::string line;
  size_t n = std::strlen(field);
  while (std::getline(status, line))
    if (line.compare(0, n, field) == 0)
      return std::stoll(line.substr(n)) * 1024; // "VmRSS:   1234 kB"
  return -1;
}

int64_t residentDataBytes() {
  int64_t all = residentBytes("VmRSS:"), files = residentBytes("RssFile:");
  return all < 0 ? -1 : all - std::max<int64_t>(files, 0);
}

void MemoryProbe::start() {
  // Heap memory freed before (reading the plan) but still resident would be reused by the
  // run's allocations without growing the resident size: give it back first.
  malloc_trim(0);
  restartPeak();
  baseline_ = residentBytes("VmRSS:");
  fileBaseline_ = residentBytes("RssFile:");
}

void MemoryProbe::restartPeak() {
  // Writing 5 resets VmHWM to the current RSS (Linux >= 4.0).
  std::FILE *f = std::fopen("/proc/self/clear_refs", "w");
  reset_ = f && std::fputs("5", f) >= 0;
  if (f)
    reset_ = (std::fclose(f) == 0) && reset_;
}

int64_t MemoryProbe::peakSinceStart() const {
  int64_t peak = residentBytes("VmHWM:");
  if (peak < 0 || baseline_ < 0)
    return 0;
  // Pages of files faulted in since the start: the program's and libraries' code as kernels run
  // for the first time (2.5 MB on GPT-small), not tensors. They stay resident once in.
  int64_t file = residentBytes("RssFile:");
  int64_t code = file < 0 || fileBaseline_ < 0 ? 0 : std::max<int64_t>(file - fileBaseline_, 0);
  return std::max<int64_t>(peak - baseline_ - code, 0);
}

} // namespace cpc
