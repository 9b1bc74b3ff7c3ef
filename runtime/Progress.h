//===- Progress.h - cpc-run's progress line: bar, ETA, data, loss scale ---===//
//
// A terminal gets one line redrawn in place per step (with a bar; kept at each epoch's end);
// anything else, a line per step. Under mpirun the ranks write into a pipe: the launcher tells
// them (CPC_PROGRESS_TTY) whether its own output is a terminal.
//
#ifndef CPC_RUNTIME_PROGRESS_H
#define CPC_RUNTIME_PROGRESS_H

#include <cstdint>
#include <string>
#include <vector>

namespace cpc {
class DataFeed;
namespace progress {

/// A loss scale: a power of two as 2^k, anything else as a number.
std::string formatScale(double scale);
/// Whether progress goes to a terminal (this process's stdout, or the launcher's).
bool progressOnTerminal();
/// "\r[#####-----]  50% " on a terminal, "" otherwise.
std::string progressBar(int64_t done, int64_t total);
/// Ends a step's line: a newline off a terminal, or when `keep`; else the next redraws it.
void endProgressLine(bool keep);
/// Before any other line: the progress line stays as it is.
void closeProgressLine();
/// "  ETA 1:02:03": `left` steps at the median of `seconds` ("" when none is left).
std::string eta(std::vector<double> seconds, int64_t left);
/// "  epoch E  data wait X ms (R img/s per decoding thread)" ("" without a feed).
std::string dataNote(const DataFeed *feed, int64_t step);

} // namespace progress
} // namespace cpc

#endif
