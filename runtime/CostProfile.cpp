//===- CostProfile.cpp ----------------------------------------------------===//
#include "runtime/CostProfile.h"
#include "kernels/Tensor.h"

#include <algorithm>
#include <cmath>
#include <fstream>

namespace cpc {

namespace {
constexpr std::pair<CostClass, const char *> kClassNames[] = {
    {CostClass::Memory, "memory"}, {CostClass::Gemm, "gemm"}, {CostClass::Attention, "attention"},
    {CostClass::Optimizer, "optimizer"}};

/// A positive finite number at `key` of `j`, or a RuntimeError naming it.
double positive(const nlohmann::json &j, const std::string &key, const std::string &where) {
  if (!j.contains(key) || !j[key].is_number() || !std::isfinite(j[key].get<double>()) || j[key].get<double>() <= 0)
    throw RuntimeError(where + ": key '" + key + "' must be a positive number");
  return j[key].get<double>();
}

Throughput throughputFromJson(const nlohmann::json &j, const std::string &where) {
  if (!j.is_array() || j.empty())
    throw RuntimeError(where + ": expects a list of [work, per second] points");
  Throughput t;
  for (const auto &point : j) {
    if (!point.is_array() || point.size() != 2 || !point[0].is_number() || !point[1].is_number() ||
        !(point[0].get<double>() > 0) || !(point[1].get<double>() > 0) || !std::isfinite(point[0].get<double>()) ||
        !std::isfinite(point[1].get<double>()))
      throw RuntimeError(where + ": every point must be [work > 0, per second > 0]");
    if (!t.points.empty() && point[0].get<double>() <= t.points.back().first)
      throw RuntimeError(where + ": the points must ascend in work");
    t.points.push_back({point[0].get<double>(), point[1].get<double>()});
  }
  return t;
}

GemmGrid gemmGridFromJson(const nlohmann::json &j, const std::string &where) {
  GemmGrid g;
  try {
    g.sizes = j.at("sizes").get<std::vector<int64_t>>();
    g.flopsPerSecond = j.at("flops_per_s").get<std::vector<double>>();
  } catch (const nlohmann::json::exception &) {
    throw RuntimeError(where + ": expects {\"sizes\": [...], \"flops_per_s\": [...]}");
  }
  size_t n = g.sizes.size();
  if (n == 0 || g.flopsPerSecond.size() != n * n * n)
    throw RuntimeError(where + ": needs sizes^3 rates (m, n, k over the sizes)");
  for (size_t i = 0; i < n; ++i)
    if (g.sizes[i] < 1 || (i && g.sizes[i] <= g.sizes[i - 1]))
      throw RuntimeError(where + ": the sizes must be positive and ascend");
  for (double r : g.flopsPerSecond)
    if (!(r > 0) || !std::isfinite(r))
      throw RuntimeError(where + ": every rate must be a positive number");
  return g;
}

LinkCost linkFromJson(const nlohmann::json &j, const std::string &where) {
  if (!j.is_object())
    throw RuntimeError(where + ": expects {\"latency_s\", \"bytes_per_s\"}");
  return {positive(j, "latency_s", where), positive(j, "bytes_per_s", where)};
}
} // namespace

const char *costClassName(CostClass c) {
  for (auto [cls, name] : kClassNames)
    if (cls == c)
      return name;
  return "?";
}

std::optional<CostClass> findCostClass(const std::string &name) {
  for (auto [cls, n] : kClassNames)
    if (name == n)
      return cls;
  return std::nullopt;
}

double Throughput::at(double work) const {
  if (points.empty())
    return 1;
  if (work <= points.front().first)
    return points.front().second;
  if (work >= points.back().first)
    return points.back().second;
  auto hi = std::lower_bound(points.begin(), points.end(), work,
                             [](const std::pair<double, double> &p, double w) { return p.first < w; });
  auto lo = hi - 1;
  double t = (std::log(work) - std::log(lo->first)) / (std::log(hi->first) - std::log(lo->first));
  return std::exp(std::log(lo->second) + t * (std::log(hi->second) - std::log(lo->second)));
}

double GemmGrid::at(const GemmDims &g) const {
  size_t n = sizes.size();
  // Per axis: the two grid points around the size and the weight of the upper one (log space).
  auto bracket = [&](int64_t v, size_t &lo, double &t) {
    double x = std::log((double)std::max<int64_t>(v, 1));
    lo = 0;
    t = 0;
    if (n == 1 || x <= std::log((double)sizes.front()))
      return;
    if (x >= std::log((double)sizes.back())) {
      lo = n - 2;
      t = 1;
      return;
    }
    while (lo + 2 < n && x > std::log((double)sizes[lo + 1]))
      ++lo;
    t = (x - std::log((double)sizes[lo])) / (std::log((double)sizes[lo + 1]) - std::log((double)sizes[lo]));
  };
  size_t i, j, k;
  double ti, tj, tk;
  bracket(g.m, i, ti);
  bracket(g.n, j, tj);
  bracket(g.k, k, tk);
  double logRate = 0;
  for (int di = 0; di < 2; ++di)
    for (int dj = 0; dj < 2; ++dj)
      for (int dk = 0; dk < 2; ++dk) {
        double w = (di ? ti : 1 - ti) * (dj ? tj : 1 - tj) * (dk ? tk : 1 - tk);
        if (w == 0)
          continue;
        size_t a = std::min(i + di, n - 1), b = std::min(j + dj, n - 1), c = std::min(k + dk, n - 1);
        logRate += w * std::log(flopsPerSecond[(a * n + b) * n + c]);
      }
  return std::exp(logRate);
}

double CostProfile::gemmSeconds(const GemmDims &g, double bytes, const std::string &op) const {
  if (auto it = ops.find(op + kBatchedSuffix); g.batch > 1 && it != ops.end())
    return g.flops() / it->second.at(2.0 * g.m * g.n * g.k); // by the size of one product
  if (gemmGrid.empty())
    return computeSeconds(CostClass::Gemm, (double)g.flops(), bytes);
  double memorySeconds = computeSeconds(CostClass::Memory, 0, bytes);
  return std::max(g.flops() / gemmGrid.at(g), memorySeconds);
}

double CostProfile::computeSeconds(CostClass c, double flops, double bytes, const std::string &op) const {
  if (auto it = ops.find(op); it != ops.end()) {
    double work = c == CostClass::Attention ? flops : bytes;
    return work > 0 ? work / it->second.at(work) : 0;
  }
  auto rate = [&](CostClass k, double work) {
    auto it = compute.find(k);
    return it == compute.end() ? builtIn().compute.at(k).at(work) : it->second.at(work);
  };
  double memorySeconds = bytes > 0 ? bytes / rate(CostClass::Memory, bytes) : 0;
  if (c == CostClass::Gemm || c == CostClass::Attention)
    return std::max(flops > 0 ? flops / rate(c, flops) : 0, memorySeconds);
  if (c == CostClass::Optimizer)
    return bytes > 0 ? bytes / rate(c, bytes) : 0;
  return memorySeconds;
}

double CostProfile::collectiveSeconds(const std::string &kind, int64_t groupSize, double countedBytes) const {
  return linkOf(kind, groupSize).seconds(countedBytes);
}

LinkCost CostProfile::linkOf(const std::string &kind, int64_t groupSize) const {
  auto it = collectives.find(kind);
  if (it == collectives.end() || it->second.empty())
    return link;
  // The nearest group size measured (the larger on a tie: a bigger ring is no faster).
  const LinkCost *best = nullptr;
  int64_t distance = 0;
  for (const auto &[size, cost] : it->second)
    if (!best || std::llabs(size - groupSize) <= distance) {
      best = &cost;
      distance = std::llabs(size - groupSize);
    }
  return *best;
}

CostProfile CostProfile::builtIn() {
  CostProfile p;
  p.compute[CostClass::Gemm] = {{{1, 40e9}}};
  p.compute[CostClass::Attention] = {{{1, 40e9}}};
  p.compute[CostClass::Memory] = {{{1, 4e9}}};
  p.compute[CostClass::Optimizer] = {{{1, 4e9}}};
  return p;
}

nlohmann::json CostProfile::toJson() const {
  nlohmann::json compute = nlohmann::json::object();
  for (const auto &[cls, t] : this->compute) {
    nlohmann::json points = nlohmann::json::array();
    for (auto [work, rate] : t.points)
      points.push_back({work, rate});
    compute[costClassName(cls)] = points;
  }
  nlohmann::json perOp = nlohmann::json::object();
  for (const auto &[name, t] : ops) {
    nlohmann::json points = nlohmann::json::array();
    for (auto [work, rate] : t.points)
      points.push_back({work, rate});
    perOp[name] = points;
  }
  if (!gemmGrid.empty())
    compute["gemm_grid"] = {{"sizes", gemmGrid.sizes}, {"flops_per_s", gemmGrid.flopsPerSecond}};
  nlohmann::json comm = nlohmann::json::object();
  for (const auto &[kind, sizes] : collectives)
    for (const auto &[size, cost] : sizes)
      comm[kind][std::to_string(size)] = {{"latency_s", cost.latencySeconds}, {"bytes_per_s", cost.bytesPerSecond}};
  return {{"format", "cpc-cost-profile-1"},
          {"machine", machine},
          {"threads", threads},
          {"step_s", stepSeconds},
          {"compute", compute},
          {"ops", perOp},
          {"collectives", comm},
          {"link", {{"latency_s", link.latencySeconds}, {"bytes_per_s", link.bytesPerSecond}}}};
}

CostProfile CostProfile::fromJson(const nlohmann::json &j, const std::string &where) {
  if (!j.is_object() || j.value("format", "") != "cpc-cost-profile-1")
    throw RuntimeError(where + ": not a cpc cost profile (key 'format' must be \"cpc-cost-profile-1\")");
  CostProfile p = builtIn();
  p.source = where;
  p.machine = j.value("machine", "");
  if (j.contains("threads") && (!j["threads"].is_number_integer() || j["threads"].get<int64_t>() < 1))
    throw RuntimeError(where + ": key 'threads' must be a positive integer");
  p.threads = j.value("threads", 1);
  if (j.contains("step_s") && (!j["step_s"].is_number() || !(j["step_s"].get<double>() >= 0) ||
                               !std::isfinite(j["step_s"].get<double>())))
    throw RuntimeError(where + ": key 'step_s' must be a number >= 0");
  p.stepSeconds = j.value("step_s", 0.0);
  if (j.contains("compute")) {
    if (!j["compute"].is_object())
      throw RuntimeError(where + ": key 'compute' must map classes to points");
    for (const auto &[name, points] : j["compute"].items()) {
      if (name == "gemm_grid") {
        p.gemmGrid = gemmGridFromJson(points, where + ": key 'compute.gemm_grid'");
        continue;
      }
      std::optional<CostClass> cls = findCostClass(name);
      if (!cls)
        throw RuntimeError(where + ": key 'compute." + name + "': unknown class (gemm, attention, optimizer, memory)");
      p.compute[*cls] = throughputFromJson(points, where + ": key 'compute." + name + "'");
    }
  }
  if (j.contains("ops")) {
    if (!j["ops"].is_object())
      throw RuntimeError(where + ": key 'ops' must map op names to points");
    for (const auto &[name, points] : j["ops"].items())
      p.ops[name] = throughputFromJson(points, where + ": key 'ops." + name + "'");
  }
  if (j.contains("collectives")) {
    if (!j["collectives"].is_object())
      throw RuntimeError(where + ": key 'collectives' must map kinds to group sizes");
    for (const auto &[kind, sizes] : j["collectives"].items()) {
      if (!sizes.is_object())
        throw RuntimeError(where + ": key 'collectives." + kind + "' must map group sizes to costs");
      for (const auto &[size, cost] : sizes.items()) {
        std::string key = "collectives." + kind + "." + size;
        char *end = nullptr;
        long long n = std::strtoll(size.c_str(), &end, 10);
        if (size.empty() || *end || n < 1 || n > 1 << 20)
          throw RuntimeError(where + ": key '" + key + "': the group size must be a positive integer");
        p.collectives[kind][n] = linkFromJson(cost, where + ": key '" + key + "'");
      }
    }
  }
  if (j.contains("link"))
    p.link = linkFromJson(j["link"], where + ": key 'link'");
  return p;
}

CostProfile CostProfile::load(const std::string &path) {
  std::ifstream in(path);
  if (!in)
    throw RuntimeError(path + ": cannot read the cost profile");
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception &e) {
    throw RuntimeError(path + ": not JSON (" + std::string(e.what()) + ")");
  }
  return fromJson(j, path);
}

} // namespace cpc
