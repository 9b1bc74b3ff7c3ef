//===- NormalizationMath.h - softmax and LayerNorm arithmetic, host and device ===//
//
// The per-row arithmetic of the CUDA softmax, LayerNorm and their gradients: how a thread folds
// its elements into a partial, how partials combine, and the per-element formulas. Statistics
// accumulate in Acc: f32 for f32 and the 16-bit floats, f64 for f64. The host unit test runs
// these same functions in the order the kernels use (rowGroupReduce below documents it) and
// compares with the CPU kernels, which accumulate in f64. Where f32 sums cannot meet the CPU's
// results within 1e-5 (LayerNorm's mean and variance, sums over rows that cancel) they are f64.
//
#ifndef CPC_KERNELS_CUDA_NORMALIZATIONMATH_H
#define CPC_KERNELS_CUDA_NORMALIZATIONMATH_H

#include "kernels/Tensor.h"
#include "kernels/cuda/HostDevice.h"

#include <math.h>

#include <cstdint>
#include <vector>

namespace cpc::kernels::cuda {

/// A tensor seen as rows along one axis: `rows` = outer * inner rows of `len` elements, element
/// j of a row `inner` apart (1 when the axis is the last).
struct RowShape {
  int64_t rows = 0, len = 0, inner = 1;
};

/// The offset of a row's first element.
CPC_HD int64_t rowBase(const RowShape &s, int64_t row) { return (row / s.inner) * s.len * s.inner + row % s.inner; }

/// The rows of a tensor of `shape` along `axis` (host side).
inline RowShape rowShapeAlong(const std::vector<int64_t> &shape, int64_t axis) {
  RowShape s;
  s.len = shape[axis];
  s.inner = numElements({shape.begin() + axis + 1, shape.end()});
  s.rows = numElements({shape.begin(), shape.begin() + axis}) * s.inner;
  return s;
}

struct SumOp {
  template <typename A> CPC_HD A operator()(A a, A b) const { return a + b; }
};
/// std::max's order: a NaN never replaces the running maximum (the CPU softmax's behaviour).
struct MaxOp {
  template <typename A> CPC_HD A operator()(A a, A b) const { return a < b ? b : a; }
};

CPC_HD float expAcc(float x) { return expf(x); }
CPC_HD double expAcc(double x) { return exp(x); }

/// A row's mean as an unevaluated sum hi + lo: hi is the mean rounded to Acc (what the CPU kernel
/// subtracts in the forward pass), hi + lo holds it to about twice Acc's precision (what the
/// CPU's f64 statistics subtract).
template <typename Acc> struct RowMean {
  Acc hi, lo;
};
/// x minus the mean: x - hi is exact for x near the mean (Sterbenz), so this is nearly exact.
template <typename Acc> CPC_HD Acc deviation(Acc x, const RowMean<Acc> &m) { return (x - m.hi) - m.lo; }
template <typename Acc> CPC_HD double wideDeviation(Acc x, const RowMean<Acc> &m) {
  return (double(x) - double(m.hi)) - double(m.lo);
}

/// A row's mean and 1/sqrt(variance + eps). Both sums are f64 even for f32 data: with |mean| much
/// larger than the spread an f32 sum rounds the mean an ulp away from the CPU's, which moves every
/// output by about ulp(mean) / stddev (1e-4 relative for a mean of 1000 and a spread of 3); and the
/// scale gradient sums g * xhat over rows, where the terms cancel and need xhat to f64 precision.
template <typename Acc> struct RowMoments {
  RowMean<Acc> mean;
  Acc rstd;         // rounded to Acc, as the CPU kernel's per-element arithmetic uses it
  double rstdWide;
};
/// The mean from the row's sum.
template <typename Acc> CPC_HD RowMean<Acc> rowMean(double sum, int64_t n) {
  double mean = sum / double(n);
  Acc hi = Acc(mean);
  return {hi, Acc(mean - double(hi))};
}
/// The moments from the mean and the sum of squared deviations (wideDeviation) of `n` elements.
template <typename Acc> CPC_HD RowMoments<Acc> rowMoments(const RowMean<Acc> &mean, double squares, int64_t n, double eps) {
  double rstd = 1.0 / sqrt(squares / double(n) + eps);
  return {mean, Acc(rstd), rstd};
}

/// LayerNorm's output element, in the CPU kernel's order of operations (it subtracts the mean
/// rounded to the element type).
template <typename Acc> CPC_HD Acc layerNormValue(Acc x, const RowMoments<Acc> &m, Acc scale, Acc bias) {
  return fmath::mulRn((x - m.mean.hi) * m.rstd, scale) + bias;
}

/// softmax_grad's element: y * (g - sum(g * y)).
template <typename Acc> CPC_HD Acc softmaxGradValue(Acc y, Acc g, Acc dot) { return y * (g - dot); }

/// What layer_norm_grad needs of a row: its moments and the means of g*scale and g*scale*xhat,
/// in f64 as the CPU kernel computes them: the input gradient is a difference of three terms
/// that cancel (exactly so for rows of one or two elements), so f32 terms would leave their
/// rounding, magnified by rstd, where the CPU leaves almost nothing.
template <typename Acc> struct LayerNormGradRow {
  RowMoments<Acc> m;
  double meanGs, meanGsXhat;
};

/// An element's g * scale and xhat, in f64.
template <typename Acc> CPC_HD double layerNormGradGs(Acc g, Acc scale) {
  return fmath::mulRn(double(g), double(scale));
}
template <typename Acc> CPC_HD double layerNormGradXhat(Acc x, const RowMoments<Acc> &m) {
  return wideDeviation(x, m.mean) * m.rstdWide;
}

/// layer_norm_grad's input gradient element, computed in f64 and rounded once.
template <typename Acc> CPC_HD Acc layerNormGradInput(Acc x, Acc g, Acc scale, const LayerNormGradRow<Acc> &r) {
  double xhat = layerNormGradXhat(x, r.m);
  return Acc(r.m.rstdWide * (layerNormGradGs(g, scale) - r.meanGs - fmath::mulRn(xhat, r.meanGsXhat)));
}

/// The contribution of one element to the scale gradient (g * xhat; the bias gradient's is g).
/// The column sums of these over rows cancel heavily, so they are f64 (as on the CPU).
template <typename Acc> CPC_HD double layerNormGradScaleTerm(Acc x, Acc g, const LayerNormGradRow<Acc> &r) {
  return double(g) * (wideDeviation(x, r.m.mean) * r.m.rstdWide);
}

/// The order in which a row group combines its threads' partials, as the kernels' shuffles do:
/// each warp folds its 32 lanes by xor-butterfly (offsets 16, 8, 4, 2, 1; a + b is exact-commutative,
/// so every lane ends with the same bits); with more than one warp per row, lane w of every warp
/// takes warp w's result (`identity` past the last warp) and folds again. Host-side, for the tests.
template <typename Acc, typename Op>
Acc rowGroupReduce(const std::vector<Acc> &partials, Op op, Acc identity) {
  auto butterfly = [&](std::vector<Acc> lanes) {
    for (int offset = 16; offset > 0; offset >>= 1) {
      std::vector<Acc> next(32);
      for (int l = 0; l < 32; ++l)
        next[l] = op(lanes[l], lanes[l ^ offset]);
      lanes = next;
    }
    return lanes[0];
  };
  int warps = (int)partials.size() / 32;
  std::vector<Acc> warpResults(32, identity);
  for (int w = 0; w < warps; ++w)
    warpResults[w] = butterfly(std::vector<Acc>(partials.begin() + 32 * w, partials.begin() + 32 * w + 32));
  return warps == 1 ? warpResults[0] : butterfly(warpResults);
}

/// Each of `threadsPerRow` threads folds elements lane, lane + threadsPerRow, ... of a row in
/// order (value(j) gives element j as Acc), then the partials combine as rowGroupReduce does.
template <typename Acc, typename Op, typename Value>
Acc emulateRowReduce(int64_t len, int threadsPerRow, Op op, Acc identity, Value value) {
  std::vector<Acc> partials(threadsPerRow, identity);
  for (int lane = 0; lane < threadsPerRow; ++lane)
    for (int64_t j = lane; j < len; j += threadsPerRow)
      partials[lane] = op(partials[lane], value(j));
  return rowGroupReduce(partials, op, identity);
}

} // namespace cpc::kernels::cuda

#endif
