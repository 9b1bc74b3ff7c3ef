//===- Metrics.cpp - parse cpc-run's --metrics JSON lines into curves ----------===//
#include "runtime/plot/Metrics.h"

#include "kernels/Tensor.h"

#include <nlohmann/json.hpp>

#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>

namespace cpc::plot {

namespace {

// Python's json.dumps writes NaN and +-Infinity bare, which JSON (and nlohmann) rejects; outside
// strings they become null, so metrics written by a Python script plot like cpc-run's.
std::string nullNonFiniteTokens(const std::string &line) {
  std::string out;
  out.reserve(line.size());
  bool inString = false;
  for (size_t i = 0; i < line.size(); ++i) {
    char c = line[i];
    if (inString) {
      out += c;
      if (c == '\\' && i + 1 < line.size())
        out += line[++i];
      else if (c == '"')
        inString = false;
      continue;
    }
    inString = c == '"';
    size_t token = line.compare(i, 3, "NaN") == 0        ? 3
                   : line.compare(i, 8, "Infinity") == 0 ? 8
                   : line.compare(i, 9, "-Infinity") == 0 ? 9
                                                          : 0;
    if (token) {
      out += "null";
      i += token - 1;
    } else {
      out += c;
    }
  }
  return out;
}

// nlohmann's message without its "[json.exception...] parse error at line 1, " prefix (the
// caller names the file's line; nlohmann only ever sees one).
std::string parseErrorDetail(const std::string &what) {
  size_t column = what.find("column");
  if (column != std::string::npos)
    return what.substr(column);
  size_t bracket = what.find("] ");
  return bracket == std::string::npos ? what : what.substr(bracket + 2);
}

std::string shortDump(const nlohmann::json &value) {
  std::string text = value.dump();
  return text.size() > 40 ? text.substr(0, 37) + "..." : text;
}

int64_t stepOf(const nlohmann::json &line, const std::string &where) {
  auto it = line.find("step");
  if (it == line.end())
    throw RuntimeError(where + "no \"step\"");
  if (it->is_number_integer())
    return it->get<int64_t>();
  if (it->is_number_float()) {
    double step = it->get<double>();
    if (std::isfinite(step) && step == std::floor(step) && std::fabs(step) < 9e15)
      return int64_t(step);
  }
  throw RuntimeError(where + "\"step\" is not a whole number: " + shortDump(*it));
}

// The plotted values of one line: NaN for null (a curve skips it), absent keys left out. Beyond
// +-1e300 counts as infinite too: an overflow, and a span the axis arithmetic could not hold.
std::map<std::string, double> plottedValues(const nlohmann::json &line, const std::vector<std::string> &keys,
                                            const std::string &where) {
  std::map<std::string, double> values;
  for (const std::string &key : keys) {
    auto it = line.find(key);
    if (it == line.end())
      continue;
    if (it->is_null())
      values[key] = std::numeric_limits<double>::quiet_NaN();
    else if (it->is_number())
      values[key] = std::fabs(it->get<double>()) <= 1e300 ? it->get<double>() : std::numeric_limits<double>::infinity();
    else
      throw RuntimeError(where + "\"" + key + "\" is not a number: " + shortDump(*it));
  }
  return values;
}

} // namespace

RunMetrics parseMetrics(std::istream &in, const std::string &source, const std::vector<std::string> &plottedKeys) {
  std::map<int64_t, std::map<std::string, double>> byStep; // a later line for a step replaces it
  std::string text;
  for (int lineNumber = 1; std::getline(in, text); ++lineNumber) {
    if (text.find_first_not_of(" \t\r") == std::string::npos)
      continue;
    std::string where = source + ":" + std::to_string(lineNumber) + ": ";
    nlohmann::json line;
    try {
      line = nlohmann::json::parse(nullNonFiniteTokens(text));
    } catch (const nlohmann::json::exception &e) { // a syntax error, or a number too large for a double
      throw RuntimeError(where + "not JSON: " + parseErrorDetail(e.what()));
    }
    if (!line.is_object())
      throw RuntimeError(where + "not a JSON object: " + shortDump(line));
    int64_t step = stepOf(line, where);
    byStep[step] = plottedValues(line, plottedKeys, where);
  }
  if (in.bad())
    throw RuntimeError(source + ": cannot read: " + std::strerror(errno));
  if (byStep.empty())
    throw RuntimeError(source + ": no steps (no line with a \"step\")");
  RunMetrics run;
  run.name = source;
  run.firstStep = byStep.begin()->first;
  run.lastStep = byStep.rbegin()->first;
  run.stepCount = byStep.size();
  for (const auto &[step, values] : byStep)
    for (const auto &[key, value] : values)
      if (std::isfinite(value))
        run.curves[key].push_back({step, value});
  return run;
}

RunMetrics readMetricsFile(const std::string &path, const std::vector<std::string> &plottedKeys) {
  std::error_code error;
  if (std::filesystem::is_directory(path, error))
    throw RuntimeError(path + ": cannot read: is a directory");
  std::ifstream in(path);
  if (!in)
    throw RuntimeError(path + ": cannot read: " + std::strerror(errno));
  RunMetrics run = parseMetrics(in, path, plottedKeys);
  std::string base = std::filesystem::path(path).filename().string();
  run.name = base.empty() ? path : base;
  return run;
}

} // namespace cpc::plot
