//===- Trace.h - a Chrome/Perfetto trace of what each rank ran ------------===//
//
// cpc-run --trace FILE: the executor records every step it runs (compute or communication) and
// every program run, with wall-clock microseconds (the ranks of one machine share that clock);
// at the end each rank writes its events next to FILE and rank 0 merges them into one trace
// with one track per rank, which chrome://tracing and ui.perfetto.dev open.
//
#ifndef CPC_RUNTIME_TRACE_H
#define CPC_RUNTIME_TRACE_H

#include <nlohmann/json.hpp>

#include <string>
#include <vector>

namespace cpc {

class Communicator;

class TraceRecorder {
public:
  explicit TraceRecorder(int rank) : rank_(rank) {}
  /// Wall-clock microseconds.
  static double nowUs();
  /// A complete event ("X") on this rank's track; category "compute", "comm" or "program".
  void add(const std::string &name, const char *category, double startUs, double durationUs,
           nlohmann::json args = nlohmann::json::object());
  /// Microseconds spent in events of `category`.
  double totalUs(const std::string &category) const;
  /// Microseconds from the start of the first event to the end of the last.
  double spanUs() const { return events_.empty() ? 0.0 : lastEndUs_ - firstStartUs_; }
  const std::vector<nlohmann::json> &events() const { return events_; }

private:
  int rank_;
  std::vector<nlohmann::json> events_;
  std::vector<std::pair<std::string, double>> totals_;
  double firstStartUs_ = 0, lastEndUs_ = 0;
};

/// What the trace says of one rank's time.
struct RankTimeShares {
  double communication = 0; // of the time in programs, the share in collectives and transfers
  double idle = 0;          // of the time from its first event to its last, the share not computing
  double waiting = 0;       // of that time, the share in communication: waiting on other ranks (a
                            // pipeline's bubble) and transfers; idle less this is the runtime's own
};

/// Writes `mine` as PATH.rankN; after a barrier, rank 0 merges every rank's part into PATH (a
/// JSON object with "traceEvents", one process per rank) and removes the parts. Returns, on rank
/// 0, each rank's time shares (empty elsewhere).
std::vector<RankTimeShares> writeTrace(const std::string &path, const TraceRecorder &mine, Communicator &comm);

} // namespace cpc

#endif
