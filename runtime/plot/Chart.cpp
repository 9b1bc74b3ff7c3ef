//===- Chart.cpp - lay out and draw cpc plot's four metric panels ---------------===//
#include "runtime/plot/Chart.h"

#include "runtime/plot/Font.h"

#include "kernels/Tensor.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <map>

namespace cpc::plot {

namespace {

constexpr Rgb kBackground{255, 255, 255}, kText{40, 40, 40}, kGrid{228, 228, 228}, kFrame{140, 140, 140};
// Distinct from each other, from the greys above and readable on white.
constexpr Rgb kPalette[] = {{31, 100, 180}, {222, 90, 40}, {40, 150, 70}, {150, 70, 170},
                            {205, 155, 0},  {0, 160, 175}, {200, 50, 110}, {95, 95, 95}};
constexpr int kSwatchColumns = 16; // a legend entry's line, before scaling

// The number of decimals that tells apart multiples of `step` (0.2 -> 1, 0.05 -> 2, 5 -> 0).
int decimalsFor(double step) { return std::max(0, -int(std::floor(std::log10(step) + 1e-9))); }

// `text` without the zeros that end its fraction ("1.50" -> "1.5", "2.0" -> "2").
std::string trimFraction(std::string text) {
  if (text.find('.') == std::string::npos)
    return text;
  while (text.back() == '0')
    text.pop_back();
  if (text.back() == '.')
    text.pop_back();
  return text;
}

std::string fixedLabel(double value, int decimals) {
  char buffer[64];
  std::snprintf(buffer, sizeof buffer, "%.*f", decimals, value);
  return trimFraction(buffer);
}

// 1.2e-3 rather than 1.20e-03: the mantissa holds the digits `step` needs, the exponent no padding.
std::string exponentLabel(double value, double step) {
  if (!std::isfinite(value) || !(step > 0))
    return "?";
  int digits = std::max(0, int(std::floor(std::log10(std::fabs(value)))) - int(std::floor(std::log10(step) + 1e-9)));
  char buffer[64];
  std::snprintf(buffer, sizeof buffer, "%.*e", std::min(digits, 6), value);
  std::string text = buffer;
  size_t e = text.find('e');
  std::string mantissa = trimFraction(text.substr(0, e));
  int exponent = std::stoi(text.substr(e + 1));
  return mantissa + "e" + std::to_string(exponent);
}

} // namespace

const std::vector<MetricPanel> &metricPanels() {
  static const std::vector<MetricPanel> panels = {
      {"loss", "loss"}, {"lr", "lr"}, {"grad_norm", "grad norm"}, {"samples_per_s", "throughput (samples/s)"}};
  return panels;
}

std::vector<std::string> plottedKeys() {
  std::vector<std::string> keys;
  for (const MetricPanel &panel : metricPanels())
    keys.push_back(panel.key);
  return keys;
}

Rgb runColour(size_t index) { return kPalette[index % (sizeof kPalette / sizeof kPalette[0])]; }

double niceStep(double lo, double hi, int targetCount) {
  double span = hi - lo;
  if (!(span > 0) || !std::isfinite(span))
    return 1;
  double rough = span / std::max(targetCount, 1);
  double magnitude = std::pow(10.0, std::floor(std::log10(rough)));
  double fraction = rough / magnitude;
  double nice = fraction < 1.5 ? 1 : fraction < 3 ? 2 : fraction < 7 ? 5 : 10;
  double step = nice * magnitude;
  return step > 0 && std::isfinite(step) ? step : span; // a span of a few denormals has no power of ten
}

std::vector<double> ticksOf(double lo, double hi, double step) {
  std::vector<double> ticks;
  if (!(step > 0))
    return ticks;
  // k * step rather than a running sum, so 3.7 + 0.1 + ... does not drift; 1e-9 of a step
  // forgives the rounding of lo / step.
  double first = std::ceil(lo / step - 1e-9), last = std::floor(hi / step + 1e-9);
  for (double k = first; k <= last && ticks.size() < 1000; ++k)
    ticks.push_back(k == 0 ? 0.0 : k * step);
  return ticks;
}

std::vector<std::string> tickLabels(const std::vector<double> &ticks, double step) {
  double largest = 0;
  for (double tick : ticks)
    largest = std::max(largest, std::fabs(tick));
  std::vector<std::string> labels;
  for (double tick : ticks) {
    if (std::fabs(tick) < step * 1e-6)
      labels.push_back("0");
    else if (largest < 1e-2 || largest >= 1e12)
      labels.push_back(exponentLabel(tick, step));
    else if (largest >= 1e3 && std::fabs(tick) >= 1e3) { // each its own unit: 500, 1k, 1.5k, not 0.5k
      double size = std::fabs(tick);
      double unit = size >= 1e9 ? 1e9 : size >= 1e6 ? 1e6 : 1e3;
      const char *suffix = unit == 1e9 ? "G" : unit == 1e6 ? "M" : "k";
      labels.push_back(fixedLabel(tick / unit, decimalsFor(step / unit)) + suffix);
    } else {
      labels.push_back(fixedLabel(tick, decimalsFor(step)));
    }
  }
  return labels;
}

ChartLayout layoutChart(int width, int height, const std::vector<std::string> &runNames) {
  ChartLayout layout;
  int s = layout.textScale = std::max(1, std::min(width / 600, height / 400)); // 2 at the default 1200x800
  int margin = 8 * s, rowHeight = kLineAdvance * s;
  int x = margin, y = margin;
  for (const std::string &name : runNames) { // left to right, wrapping at the right margin
    int itemWidth = (kSwatchColumns + 4) * s + textWidth(name, s);
    if (x > margin && x + itemWidth > width - margin) {
      x = margin;
      y += rowHeight;
    }
    layout.legendItems.push_back({double(x), double(y)});
    x += itemWidth + 14 * s;
  }
  int top = (runNames.empty() ? margin : y + rowHeight) + 6 * s;
  int gap = 12 * s;
  int panelWidth = (width - 2 * margin - gap) / 2;
  int panelHeight = std::max((height - top - margin - gap) / 2, 40 * s); // a long legend may push panels off
  for (int i = 0; i < 4; ++i)
    layout.panels.push_back({margin + (i % 2) * (panelWidth + gap), top + (i / 2) * (panelHeight + gap), panelWidth,
                             panelHeight});
  return layout;
}

namespace {

struct Axis {
  double lo = 0, hi = 1;
  std::vector<double> ticks;
  std::vector<std::string> labels;
};

Axis makeAxis(double lo, double hi, int targetCount, double minStep) {
  Axis axis{lo, hi, {}, {}};
  double step = std::max(niceStep(lo, hi, targetCount), minStep);
  axis.ticks = ticksOf(lo, hi, step);
  axis.labels = tickLabels(axis.ticks, step);
  return axis;
}

int widestLabel(const Axis &axis, int scale) {
  int widest = 0;
  for (const std::string &label : axis.labels)
    widest = std::max(widest, textWidth(label, scale));
  return widest;
}

// Steps, shared by the panels so they line up: every run's first to last step, whole-number ticks.
Axis stepAxis(const std::vector<RunMetrics> &runs, int plotWidth, int scale) {
  int64_t first = std::numeric_limits<int64_t>::max(), last = std::numeric_limits<int64_t>::min();
  for (const RunMetrics &run : runs) {
    first = std::min(first, run.firstStep);
    last = std::max(last, run.lastStep);
  }
  double lo = double(first), hi = double(last);
  if (hi <= lo) { // one step (or steps past 2^53 that round together): centre it
    double pad = std::max(1.0, std::fabs(lo) * 1e-6);
    lo -= pad;
    hi += pad;
  }
  int labelRoom = textWidth(std::to_string(last), scale) + 24 * scale;
  return makeAxis(lo, hi, std::clamp(plotWidth / labelRoom, 2, 10), 1.0);
}

// A key's value axis: the data's range plus 5% either side (a flat curve gets +-5% of its value).
bool valueAxis(const std::vector<RunMetrics> &runs, const std::string &key, int plotHeight, int scale, Axis &axis) {
  double lo = std::numeric_limits<double>::infinity(), hi = -lo;
  for (const RunMetrics &run : runs)
    if (auto it = run.curves.find(key); it != run.curves.end())
      for (const MetricPoint &point : it->second) {
        lo = std::min(lo, point.value);
        hi = std::max(hi, point.value);
      }
  if (lo > hi)
    return false;
  double largest = std::max(std::fabs(lo), std::fabs(hi));
  double pad = hi > lo ? (hi - lo) * 0.05 : largest * 0.05;
  // At least a millionth of the values (what labels can tell apart) and far above the smallest
  // doubles, so the tick step is a normal number; an all-zero curve gets +-0.5.
  pad = largest == 0 ? 0.5 : std::max({pad, largest * 1e-6, 1e-300});
  axis = makeAxis(lo - pad, hi + pad, std::clamp(plotHeight / (28 * scale), 2, 8), 0.0);
  return true;
}

struct PlotFrame {
  Rect area;
  Axis x, y;
  double inset = 3; // keeps the curves' ends off the frame
  double toX(double step) const {
    return area.x + inset + (step - x.lo) / (x.hi - x.lo) * (area.width - 1 - 2 * inset);
  }
  double toY(double value) const { return area.bottom() - 1 - (value - y.lo) / (y.hi - y.lo) * (area.height - 1); }
};

void drawAxes(Canvas &canvas, const PlotFrame &frame, bool hasData, int s) {
  const Rect &plot = frame.area;
  int capHalf = kCapitalRows * s / 2;
  for (size_t i = 0; hasData && i < frame.y.ticks.size(); ++i) {
    int y = int(std::lround(frame.toY(frame.y.ticks[i])));
    canvas.fillRect({plot.x, y, plot.width, 1}, kGrid);
    const std::string &label = frame.y.labels[i];
    drawText(canvas, plot.x - 5 * s - textWidth(label, s), y - capHalf, label, kText, s);
  }
  for (size_t i = 0; i < frame.x.ticks.size(); ++i) {
    int x = int(std::lround(frame.toX(frame.x.ticks[i])));
    if (hasData)
      canvas.fillRect({x, plot.y, 1, plot.height}, kGrid);
    canvas.fillRect({x, plot.bottom(), 1, 3 * s}, kFrame);
    const std::string &label = frame.x.labels[i];
    drawText(canvas, x - textWidth(label, s) / 2, plot.bottom() + 5 * s, label, kText, s);
  }
  canvas.fillRect({plot.x, plot.y, plot.width, 1}, kFrame);
  canvas.fillRect({plot.x, plot.bottom() - 1, plot.width, 1}, kFrame);
  canvas.fillRect({plot.x, plot.y, 1, plot.height}, kFrame);
  canvas.fillRect({plot.right() - 1, plot.y, 1, plot.height}, kFrame);
  drawText(canvas, plot.x + (plot.width - textWidth("step", s)) / 2, plot.bottom() + 16 * s, "step", kText, s);
  if (!hasData)
    drawText(canvas, plot.x + (plot.width - textWidth("no data", s)) / 2, plot.y + (plot.height - kCapitalRows * s) / 2,
             "no data", kNoDataColour, s);
}

void drawCurves(Canvas &canvas, const PlotFrame &frame, const std::vector<RunMetrics> &runs, const std::string &key,
                int s) {
  canvas.setClip({frame.area.x + 1, frame.area.y + 1, frame.area.width - 2, frame.area.height - 2});
  for (size_t r = 0; r < runs.size(); ++r) {
    auto it = runs[r].curves.find(key);
    if (it == runs[r].curves.end())
      continue;
    std::vector<Point> points;
    for (const MetricPoint &point : it->second)
      points.push_back({frame.toX(double(point.step)), frame.toY(point.value)});
    // At least 2 px, so every column of a curve has pixels of the run's very colour; a lone
    // point would be a speck at line width: draw it as a dot.
    canvas.drawPolyline(points, runColour(r), points.size() == 1 ? 4.0 * s : std::max(2.0, 0.5 + s));
  }
  canvas.resetClip();
}

void drawPanel(Canvas &canvas, const Rect &panel, const MetricPanel &metric, const std::vector<RunMetrics> &runs,
               const Axis &steps, int s) {
  drawText(canvas, panel.x + (panel.width - textWidth(metric.title, s)) / 2, panel.y, metric.title, kText, s);
  PlotFrame frame;
  frame.x = steps;
  int top = panel.y + (kCapitalRows + 6) * s;
  int bottom = panel.bottom() - (kCapitalRows * 2 + 11) * s; // x tick labels, then "step"
  bool hasData = valueAxis(runs, metric.key, bottom - top, s, frame.y);
  int left = panel.x + (hasData ? widestLabel(frame.y, s) : 0) + 6 * s;
  int right = panel.right() - std::max(4 * s, steps.labels.empty() ? 0 : textWidth(steps.labels.back(), s) / 2);
  frame.area = {left, top, std::max(right - left, 8), std::max(bottom - top, 8)};
  drawAxes(canvas, frame, hasData, s);
  if (hasData)
    drawCurves(canvas, frame, runs, metric.key, s);
}

void drawLegend(Canvas &canvas, const ChartLayout &layout, const std::vector<RunMetrics> &runs) {
  int s = layout.textScale;
  for (size_t r = 0; r < runs.size(); ++r) {
    int x = int(layout.legendItems[r].x), y = int(layout.legendItems[r].y);
    canvas.fillRect({x, y + 3 * s - s / 2, kSwatchColumns * s, 2 * s}, runColour(r));
    drawText(canvas, x + (kSwatchColumns + 4) * s, y, runs[r].name, kText, s);
  }
}

} // namespace

Canvas renderChart(const std::vector<RunMetrics> &runs, const ChartOptions &options) {
  std::vector<std::string> names;
  for (const RunMetrics &run : runs)
    names.push_back(run.name);
  ChartLayout layout = layoutChart(options.width, options.height, names);
  int s = layout.textScale;
  Canvas canvas(options.width, options.height, kBackground);
  drawLegend(canvas, layout, runs);
  if (runs.empty())
    return canvas;
  Axis steps = stepAxis(runs, layout.panels[0].width - 60 * s, s);
  for (size_t i = 0; i < metricPanels().size(); ++i)
    drawPanel(canvas, layout.panels[i], metricPanels()[i], runs, steps, s);
  return canvas;
}

std::vector<RunMetrics> plotMetricsFiles(const std::vector<std::string> &paths, const std::string &output,
                                         const ChartOptions &options) {
  std::vector<RunMetrics> runs;
  std::map<std::string, int> nameCount;
  for (const std::string &path : paths) {
    runs.push_back(readMetricsFile(path, plottedKeys()));
    ++nameCount[runs.back().name];
  }
  for (size_t i = 0; i < runs.size(); ++i)
    if (nameCount[runs[i].name] > 1) // a/metrics.jsonl and b/metrics.jsonl: tell them apart
      runs[i].name = paths[i];
  writePng(renderChart(runs, options), output);
  return runs;
}

} // namespace cpc::plot
