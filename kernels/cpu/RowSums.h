//===- RowSums.h - double-precision sums along a row, in vector lanes ------===//
//
// A double accumulator summed in element order is one dependent add per element (a 4-cycle
// chain, scalar): it made LayerNorm and softmax rows several times slower than their loads.
// These sums keep kSumLanes independent double accumulators (element j goes to lane j mod
// kSumLanes) and add the lanes in a fixed order at the end, which vectorizes and is as
// deterministic as the serial sum: the result depends only on the row, never on threads.
//
#ifndef CPC_KERNELS_CPU_ROWSUMS_H
#define CPC_KERNELS_CPU_ROWSUMS_H

#include <cstdint>

namespace cpc::kernels {

constexpr int64_t kSumLanes = 8;

/// sum_j f(j) for j in [0, n), f returning double, accumulated in kSumLanes lanes.
template <typename F> inline double laneSum(int64_t n, F f) {
  double lanes[kSumLanes] = {};
  int64_t j = 0;
  for (; j + kSumLanes <= n; j += kSumLanes)
    for (int64_t l = 0; l < kSumLanes; ++l)
      lanes[l] += f(j + l);
  for (int64_t l = 0; j + l < n; ++l)
    lanes[l] += f(j + l);
  double sum = 0;
  for (int64_t l = 0; l < kSumLanes; ++l)
    sum += lanes[l];
  return sum;
}

/// Two such sums in one pass over the row: {sum_j f(j).first, sum_j f(j).second}.
template <typename F> inline void laneSum2(int64_t n, F f, double &first, double &second) {
  double a[kSumLanes] = {}, b[kSumLanes] = {};
  auto add = [&](int64_t j, int64_t l) {
    double u, v;
    f(j, u, v);
    a[l] += u;
    b[l] += v;
  };
  int64_t j = 0;
  for (; j + kSumLanes <= n; j += kSumLanes)
    for (int64_t l = 0; l < kSumLanes; ++l)
      add(j + l, l);
  for (int64_t l = 0; j + l < n; ++l)
    add(j + l, l);
  first = second = 0;
  for (int64_t l = 0; l < kSumLanes; ++l) {
    first += a[l];
    second += b[l];
  }
}

} // namespace cpc::kernels

#endif
