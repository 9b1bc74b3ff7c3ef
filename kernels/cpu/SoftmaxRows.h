//===- SoftmaxRows.h - one contiguous row of softmax and of its VJP ---------===//
//
// What cpc.softmax, cpc.softmax_grad (rows along the last axis) and cpc.attention's score rows
// compute, in one place: the attention kernels pass their scale, the plain ops 1 (x * 1 is x, so
// their results are unchanged). Sums in the double lanes of RowSums.h: thread-independent.
//
#ifndef CPC_KERNELS_CPU_SOFTMAXROWS_H
#define CPC_KERNELS_CPU_SOFTMAXROWS_H

#include "kernels/cpu/FastMath.h"
#include "kernels/cpu/RowSums.h"

#include <algorithm>
#include <cstdint>
#include <limits>

namespace cpc::kernels {

/// y = softmax(scale * x) over `len` elements (y may be x), with the roundings of cpc.mul then
/// cpc.softmax. The largest scaled value is the scaled largest (for a negative scale, smallest)
/// value: rounding is monotonic, so the maximum needs no scaled copy.
template <typename T> void softmaxRow(const T *x, T *y, int64_t len, T scale) {
  T most;
  if (scale >= T(0)) {
    most = -std::numeric_limits<T>::infinity();
    for (int64_t j = 0; j < len; ++j)
      most = std::max(most, x[j]);
  } else {
    most = std::numeric_limits<T>::infinity();
    for (int64_t j = 0; j < len; ++j)
      most = std::min(most, x[j]);
  }
  most *= scale;
  // exp in its own loop so that it vectorizes; the sum stays in double, in lanes.
  for (int64_t j = 0; j < len; ++j)
    y[j] = fastExp(x[j] * scale - most);
  const T inv = T(1.0 / laneSum(len, [&](int64_t j) { return double(y[j]); }));
  for (int64_t j = 0; j < len; ++j)
    y[j] *= inv;
}

/// out = scale * y * (g - sum(g * y)) over `len` elements (out may be g): softmax's VJP from its
/// output y, with the roundings of cpc.softmax_grad then cpc.mul.
template <typename T> void softmaxGradRow(const T *y, const T *g, T *out, int64_t len, T scale) {
  const T dot = T(laneSum(len, [&](int64_t j) { return double(g[j]) * double(y[j]); }));
  for (int64_t j = 0; j < len; ++j)
    out[j] = y[j] * (g[j] - dot) * scale;
}

} // namespace cpc::kernels

#endif
