//===- Chart.h - cpc plot: four panels of training metrics over steps ----------===//
//
// The chart `cpc plot` draws from cpc-run's --metrics files: a legend naming each run (one
// colour per file) above four panels in a 2x2 grid, loss, lr, grad norm and throughput
// (samples_per_s), each a line per run over the steps of all runs. Axes take "nice" ticks (1, 2
// or 5 x 10^k) over the data's range plus a small margin; a panel no run has data for says so.
//
//===----------------------------------------------------------------------------===//
#ifndef CPC_RUNTIME_PLOT_CHART_H
#define CPC_RUNTIME_PLOT_CHART_H

#include "runtime/plot/Canvas.h"
#include "runtime/plot/Metrics.h"

#include <string>
#include <vector>

namespace cpc::plot {

struct MetricPanel {
  std::string key;   // the metrics' JSON key
  std::string title; // what the panel says above it
};

/// The four panels, in reading order (top left, top right, bottom left, bottom right).
const std::vector<MetricPanel> &metricPanels();
std::vector<std::string> plottedKeys();

struct ChartOptions {
  int width = 1200;
  int height = 800;
};
constexpr int kMinChartWidth = 320, kMinChartHeight = 240, kMaxChartSide = 8192;

/// The colour of the index-th run (a palette of 8, repeated after).
Rgb runColour(size_t index);
/// The grey of a panel's "no data".
constexpr Rgb kNoDataColour{150, 150, 150};

/// The tick spacing of 1, 2 or 5 x 10^k that splits [lo, hi] into about `targetCount` steps.
double niceStep(double lo, double hi, int targetCount);
/// The multiples of `step` within [lo, hi] (with a little tolerance for rounding).
std::vector<double> ticksOf(double lo, double hi, double step);
/// Compact labels for one axis's ticks, trailing zeros dropped: 1e-4 and 1.5e-3 when the largest
/// is below 0.01 (or from 1e12), else 0.5 and 12, and from a thousand 1.2k, 500k, 3M, 2G.
std::vector<std::string> tickLabels(const std::vector<double> &ticks, double step);

struct ChartLayout {
  int textScale = 1;              // every text's scale: one more per 600x400 of chart
  std::vector<Point> legendItems; // top-left of each run's entry (its swatch)
  std::vector<Rect> panels;       // metricPanels()' panels, title and tick labels included
};
ChartLayout layoutChart(int width, int height, const std::vector<std::string> &runNames);

/// The chart of `runs` (their legend names are RunMetrics::name).
Canvas renderChart(const std::vector<RunMetrics> &runs, const ChartOptions &options);

/// Reads each metrics file, renders the chart and writes it to `output` as PNG; returns the runs
/// read. Runs whose files share a base name are named by their paths instead.
std::vector<RunMetrics> plotMetricsFiles(const std::vector<std::string> &paths, const std::string &output,
                                         const ChartOptions &options);

} // namespace cpc::plot

#endif
