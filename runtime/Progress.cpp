//===- Progress.cpp -------------------------------------------------------===//
#include "runtime/Progress.h"
#include "runtime/Communicator.h"
#include "runtime/DataFeed.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <iomanip>
#include <iostream>
#include <sstream>
#include <unistd.h>

namespace cpc::progress {

namespace {
bool progressLineOpen = false;
} // namespace

/// A loss scale for the progress line: a power of two as 2^k, anything else as a number.
std::string formatScale(double scale) {
  int exponent = 0;
  if (scale > 0 && std::frexp(scale, &exponent) == 0.5)
    return "2^" + std::to_string(exponent - 1);
  std::ostringstream os;
  os << scale;
  return os.str();
}

/// A terminal gets one progress line redrawn in place (its own, or the launcher's: mpirun hands
/// the ranks a pseudo-terminal even when its own output is a file); anything else gets a line
/// per step.
bool progressOnTerminal() {
  static const bool terminal = [] {
    if (!launchedByMpi())
      return isatty(STDOUT_FILENO) != 0;
    const char *launcher = std::getenv("CPC_PROGRESS_TTY"); // unset: the user's own mpirun
    return launcher && std::string(launcher) == "1";
  }();
  return terminal;
}
/// "\r[#####-----]  50% " on a terminal, "" otherwise.
std::string progressBar(int64_t done, int64_t total) {
  if (!progressOnTerminal() || total <= 0)
    return "";
  constexpr int kWidth = 20;
  int filled = (int)(kWidth * done / total);
  return "\r\x1b[K[" + std::string(filled, '#') + std::string(kWidth - filled, '-') + "] " +
         std::to_string(100 * done / total) + "% ";
}

/// Ends a step's line: a newline off a terminal, or when `keep`; else the next redraws it.
void endProgressLine(bool keep) {
  progressLineOpen = progressOnTerminal() && !keep;
  std::cout << (progressLineOpen ? "" : "\n") << std::flush;
}

/// Before any other line: the progress line stays as it is.
void closeProgressLine() {
  if (progressLineOpen)
    std::cout << "\n";
  progressLineOpen = false;
}

/// "  ETA 1:02:03": the steps left at the median step time so far ("" when none is left).
std::string eta(std::vector<double> seconds, int64_t left) {
  if (left <= 0 || seconds.empty())
    return "";
  std::nth_element(seconds.begin(), seconds.begin() + seconds.size() / 2, seconds.end());
  int64_t total = (int64_t)std::llround(seconds[seconds.size() / 2] * left);
  char text[48];
  std::snprintf(text, sizeof text, "  ETA %lld:%02lld:%02lld", (long long)(total / 3600), (long long)(total / 60 % 60),
                (long long)(total % 60));
  return text;
}

/// The progress line's data part: epoch, how long the step waited for data, decode rate.
std::string dataNote(const DataFeed *feed, int64_t step) {
  if (!feed)
    return "";
  std::ostringstream os;
  os << "  epoch " << feed->epochOf(step) << "  data wait " << std::setprecision(3) << feed->lastWaitSeconds() * 1e3
     << " ms";
  if (double rate = feed->imagesPerThreadSecond(); rate > 0)
    os << " (" << std::setprecision(4) << rate << " img/s per decoding thread)";
  return os.str();
}

} // namespace cpc::progress
