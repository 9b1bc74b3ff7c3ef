//===- MemoryProbe.cpp ----------------------------------------------------===//
#include "runtime/MemoryProbe.h"

#include <cstdio>
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

void MemoryProbe::start() {
  restartPeak();
  baseline_ = residentBytes("VmRSS:");
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
  return peak < 0 || baseline_ < 0 ? 0 : peak - baseline_;
}

} // namespace cpc
