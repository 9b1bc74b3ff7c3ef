//===- Metrics.h - cpc-run's --metrics JSON lines, as curves over steps --------===//
//
// One JSON object per line with at least "step"; each plotted key becomes a curve of (step,
// value) points. A key a run never writes gives that run no curve. null (how nlohmann writes a
// NaN, e.g. the loss of an fp16 step skipped on overflow), NaN, infinities and values beyond
// +-1e300 are left out of the curve; any other value that is not a number is an error naming the file and line. A step
// written twice (a resumed run appending to the same file) keeps its later line.
//
//===----------------------------------------------------------------------------===//
#ifndef CPC_RUNTIME_PLOT_METRICS_H
#define CPC_RUNTIME_PLOT_METRICS_H

#include <cstdint>
#include <istream>
#include <map>
#include <string>
#include <vector>

namespace cpc::plot {

struct MetricPoint {
  int64_t step = 0;
  double value = 0;
};

struct RunMetrics {
  std::string name;      // the legend's name: the file's base name
  int64_t firstStep = 0; // over every line, plotted keys or not
  int64_t lastStep = 0;
  size_t stepCount = 0;                                   // distinct steps
  std::map<std::string, std::vector<MetricPoint>> curves; // by key: finite values by step
};

/// Reads the metric lines of `in`; `source` names it in errors ("FILE:LINE: ..."). Only the keys
/// in `plottedKeys` become curves and have their values checked. cpc::RuntimeError on a line
/// that is not a JSON object, lacks a whole-number "step", or has a plotted value that is not a
/// number, and when no line has a step.
RunMetrics parseMetrics(std::istream &in, const std::string &source, const std::vector<std::string> &plottedKeys);

/// parseMetrics of the file at `path`, named by its base name.
RunMetrics readMetricsFile(const std::string &path, const std::vector<std::string> &plottedKeys);

} // namespace cpc::plot

#endif
