//===- CostProfile.h - what ops and collectives cost on a machine ---------===//
//
// The compiler's and the runtime's one cost model: per class of work a throughput measured at a
// few sizes (GEMMs and attention in FLOP/s by their FLOPs, the optimizer and memory-bound ops in
// bytes/s by the bytes they move), and per collective and group size a latency and a bandwidth
// over the bytes the counting communicator counts (runtime/Communicator.h, traffic::). `cpc
// calibrate` measures a profile on this machine; without one the built-in rates (this project's
// development CPU, rounded) apply.
//
#ifndef CPC_RUNTIME_COSTPROFILE_H
#define CPC_RUNTIME_COSTPROFILE_H

#include <nlohmann/json.hpp>

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace cpc {

/// Which of a profile's throughputs prices a step: FLOP/s (gemm, attention) or bytes/s.
enum class CostClass : uint8_t { Memory, Gemm, Attention, Optimizer };
const char *costClassName(CostClass c);
std::optional<CostClass> findCostClass(const std::string &name);

/// A throughput measured at a few amounts of work: between two points it is interpolated in
/// log-log, beyond the ends it holds the end's rate.
struct Throughput {
  std::vector<std::pair<double, double>> points; // (work: FLOPs or bytes, per second), ascending work
  double at(double work) const;
};

/// A GEMM: `batch` products of [m, k] by [k, n].
struct GemmDims {
  int64_t batch = 1, m = 1, n = 1, k = 1;
  int64_t flops() const { return 2 * batch * m * n * k; }
};

/// GEMM throughput measured on a grid of shapes (every m, n, k of `sizes`), interpolated
/// trilinearly in log space between them and held at the edges: skinny products run slower
/// than square ones of the same FLOPs.
struct GemmGrid {
  std::vector<int64_t> sizes;          // ascending
  std::vector<double> flopsPerSecond;  // [m][n][k], sizes^3 entries
  bool empty() const { return sizes.empty(); }
  double at(const GemmDims &g) const;
};

/// A collective on a group of one size: latency + counted bytes / bandwidth.
struct LinkCost {
  double latencySeconds = 20e-6;
  double bytesPerSecond = 4e9;
  double seconds(double bytes) const { return latencySeconds + bytes / bytesPerSecond; }
};

/// The key of a batched GEMM op's own rate in CostProfile::ops: the op's name and this.
inline constexpr const char *kBatchedSuffix = "[batched]";

struct CostProfile {
  std::string source = "built-in"; // the file it came from
  std::string machine;             // where it was measured
  int threads = 1;                 // kernel threads per rank it was measured with
  std::map<CostClass, Throughput> compute;
  GemmGrid gemmGrid; // when measured, it prices GEMMs by shape (else compute[Gemm] by FLOPs)
  double stepSeconds = 0; // what running a step costs beyond its kernel's work (dispatch)
  // Per op (by its name, opName), measured on the steps of sample plans: the op's rate by its
  // work (FLOPs for attention; bytes otherwise; a batched GEMM's FLOP rate, under its name +
  // kBatchedSuffix, by the FLOPs of one of its products); it prices the op instead of its
  // class's rate.
  std::map<std::string, Throughput> ops;
  // Per collective kind ("all_reduce", "send", ...), per group size. A kind or size not measured
  // takes the nearest size measured for it, else `link`.
  std::map<std::string, std::map<int64_t, LinkCost>> collectives;
  LinkCost link;

  /// Seconds of a step of op `op` (of class `c`) doing `flops` and moving `bytes`: at the op's
  /// own measured rate when the profile has one; else FLOPs at the class's rate for gemm and
  /// attention (never faster than the bytes at memory speed), bytes at its rate for the others.
  double computeSeconds(CostClass c, double flops, double bytes, const std::string &op = "") const;
  /// Seconds of GEMM `g` of op `op` moving `bytes` (its operands and results): a batched one at
  /// its op's measured batched rate when the profile has it, else by the grid.
  double gemmSeconds(const GemmDims &g, double bytes, const std::string &op = "") const;
  /// The link collective `kind` has over `groupSize` ranks: the nearest group size measured for
  /// it, else `link`.
  LinkCost linkOf(const std::string &kind, int64_t groupSize) const;
  /// Seconds of collective `kind` over `groupSize` ranks sending `countedBytes` from a rank.
  double collectiveSeconds(const std::string &kind, int64_t groupSize, double countedBytes) const;

  /// The rates used without a measured profile: 40 GFLOP/s, 4 GB/s, 20 us + 4 GB/s per collective.
  static CostProfile builtIn();
  nlohmann::json toJson() const;
  /// Reads toJson's form; throws RuntimeError naming `where` and the key at fault.
  static CostProfile fromJson(const nlohmann::json &j, const std::string &where);
  /// Reads a profile file; throws RuntimeError naming the file (and the key).
  static CostProfile load(const std::string &path);
};

} // namespace cpc

#endif
