//===- MemoryProbe.h - measured peak memory of this process ---------------===//
//
// Measures how much resident memory the process adds while a plan runs: the resident size when
// the probe starts (the loaded plan, libraries, MPI; free heap given back first) is the
// baseline, the kernel's peak-RSS counter is reset there (/proc/self/clear_refs), and the peak
// since then minus the baseline, less the file pages faulted in meanwhile (code), is what the
// executor's tensors (and any scratch the kernels or libraries allocate) took. This is the
// measurement the compiler's predicted peak is compared with.
//
#ifndef CPC_RUNTIME_MEMORYPROBE_H
#define CPC_RUNTIME_MEMORYPROBE_H

#include <cstdint>

namespace cpc {

class MemoryProbe {
public:
  /// Records the baseline and resets the peak counter.
  void start();
  /// Resets the peak counter, keeping the baseline: what ran since start() that is not the plan's
  /// (loading a checkpoint) stays out of the peak.
  void restartPeak();
  /// Peak resident bytes since start() minus the baseline (0 if /proc is unavailable).
  int64_t peakSinceStart() const;
  int64_t baselineBytes() const { return baseline_; }
  /// Whether the peak counter could be reset (otherwise the peak may predate start()).
  bool exact() const { return reset_; }

private:
  int64_t baseline_ = 0, fileBaseline_ = 0;
  bool reset_ = false;
};

/// VmRSS or VmHWM of this process from /proc/self/status, in bytes (-1 when unavailable).
int64_t residentBytes(const char *field = "VmRSS:");
/// The resident bytes that are not pages of files (code): anonymous and shared memory.
int64_t residentDataBytes();

} // namespace cpc

#endif
