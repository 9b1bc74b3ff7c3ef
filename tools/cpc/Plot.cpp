//===- Plot.cpp - cpc plot: its flags (the work is runtime/plot) ----------------===//
#include "tools/cpc/Commands.h"
#include "runtime/plot/Chart.h"

#include <iostream>
#include <string>
#include <vector>

namespace cpc::tools {

namespace {
const char *kPlotUsage = R"(Usage: cpc plot METRICS.jsonl [MORE.jsonl ...] -o OUT.png [--width W] [--height H]

Draws cpc-run --metrics files as a PNG of four panels over the steps: loss, lr, grad norm and
throughput (samples_per_s), one coloured line per file, with a legend naming each file. A key a
file does not have gives it no line in that panel; a panel no file has data for says "no data".
Steps with a NaN or infinite value (fp16 steps skipped on overflow) are left out of the line.

Options:
  -o FILE        The PNG file to write (required)
  --width W      Image width in pixels (default 1200)
  --height H     Image height in pixels (default 800)
)";

int sizeValue(const std::string &flag, const std::string &text, int lowest) {
  size_t used = 0;
  long value = -1;
  try {
    value = std::stol(text, &used);
  } catch (const std::exception &) {
    used = 0;
  }
  if (used != text.size() || value < lowest || value > plot::kMaxChartSide)
    throw UsageError("plot: " + flag + " needs a whole number of pixels from " + std::to_string(lowest) + " to " +
                     std::to_string(plot::kMaxChartSide) + ", not '" + text + "'");
  return int(value);
}
} // namespace

int runPlot(int argc, char **argv) {
  std::vector<std::string> inputs;
  std::string output;
  plot::ChartOptions options;
  for (int i = 2; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--help" || arg == "-h") {
      std::cout << kPlotUsage;
      return 0;
    }
    bool takesValue = arg == "-o" || arg == "--output" || arg == "--width" || arg == "--height";
    if (takesValue && i + 1 >= argc)
      throw UsageError("plot: " + arg + " needs a value");
    if (arg == "-o" || arg == "--output")
      output = argv[++i];
    else if (arg == "--width")
      options.width = sizeValue(arg, argv[++i], plot::kMinChartWidth);
    else if (arg == "--height")
      options.height = sizeValue(arg, argv[++i], plot::kMinChartHeight);
    else if (!arg.empty() && arg[0] == '-')
      throw UsageError("plot: unknown option '" + arg + "' (see cpc plot --help)");
    else
      inputs.push_back(arg);
  }
  if (inputs.empty())
    throw UsageError("plot needs at least one metrics file (see cpc plot --help)");
  if (output.empty())
    throw UsageError("plot needs -o OUT.png (see cpc plot --help)");
  std::vector<plot::RunMetrics> runs = plot::plotMetricsFiles(inputs, output, options);
  std::cout << "wrote " << output << " (" << options.width << "x" << options.height << "):";
  for (size_t i = 0; i < runs.size(); ++i)
    std::cout << (i ? "," : "") << " " << runs[i].name << " (" << runs[i].stepCount << " steps)";
  std::cout << "\n";
  return 0;
}

} // namespace cpc::tools
