//===- Trace.cpp ----------------------------------------------------------===//
#include "runtime/Trace.h"
#include "kernels/Tensor.h"
#include "runtime/Communicator.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>

namespace cpc {

double TraceRecorder::nowUs() {
  return std::chrono::duration<double, std::micro>(std::chrono::system_clock::now().time_since_epoch()).count();
}

void TraceRecorder::add(const std::string &name, const char *category, double startUs, double durationUs,
                        nlohmann::json args) {
  if (events_.empty() || startUs < firstStartUs_)
    firstStartUs_ = startUs;
  lastEndUs_ = std::max(lastEndUs_, startUs + durationUs);
  events_.push_back({{"name", name}, {"cat", category}, {"ph", "X"}, {"pid", rank_}, {"tid", 0},
                     {"ts", startUs}, {"dur", durationUs}, {"args", std::move(args)}});
  for (auto &[cat, total] : totals_)
    if (cat == category) {
      total += durationUs;
      return;
    }
  totals_.push_back({category, durationUs});
}

double TraceRecorder::totalUs(const std::string &category) const {
  for (const auto &[cat, total] : totals_)
    if (cat == category)
      return total;
  return 0.0;
}

std::vector<RankTimeShares> writeTrace(const std::string &path, const TraceRecorder &mine, Communicator &comm) {
  const std::string part = path + ".rank" + std::to_string(comm.rank());
  {
    nlohmann::json j = {{"events", mine.events()},
                        {"program_us", mine.totalUs("program")},
                        {"comm_us", mine.totalUs("comm")},
                        {"compute_us", mine.totalUs("compute")},
                        {"span_us", mine.spanUs()}};
    std::ofstream out(part);
    out << j.dump();
    if (!out)
      throw RuntimeError(part + ": cannot write the trace");
  }
  comm.barrier(); // every part is on disk
  if (comm.rank() != 0)
    return {};
  nlohmann::json events = nlohmann::json::array();
  std::vector<RankTimeShares> shares;
  for (int r = 0; r < comm.size(); ++r) {
    const std::string name = path + ".rank" + std::to_string(r);
    std::ifstream in(name);
    nlohmann::json j = nlohmann::json::parse(in, nullptr, false);
    if (j.is_discarded() || !j.contains("events"))
      throw RuntimeError(name + ": rank " + std::to_string(r) + "'s trace is unreadable");
    events.push_back({{"name", "process_name"}, {"ph", "M"}, {"pid", r}, {"args", {{"name", "rank " + std::to_string(r)}}}});
    events.push_back({{"name", "process_sort_index"}, {"ph", "M"}, {"pid", r}, {"args", {{"sort_index", r}}}});
    for (auto &e : j["events"])
      events.push_back(std::move(e));
    double program = j.value("program_us", 0.0), span = j.value("span_us", 0.0);
    shares.push_back({program > 0 ? j.value("comm_us", 0.0) / program : 0.0,
                      span > 0 ? 1.0 - j.value("compute_us", 0.0) / span : 0.0,
                      span > 0 ? j.value("comm_us", 0.0) / span : 0.0});
    std::remove(name.c_str());
  }
  std::ofstream out(path);
  out << nlohmann::json({{"traceEvents", events}, {"displayTimeUnit", "ms"}}).dump();
  if (!out)
    throw RuntimeError(path + ": cannot write the trace");
  return shares;
}

} // namespace cpc
