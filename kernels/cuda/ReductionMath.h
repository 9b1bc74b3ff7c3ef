//===- ReductionMath.h - the reductions' arithmetic and geometry, GPU and host ===//
//
// reduce_{sum,mean,prod,max,min} as the CPU kernel (kernels/cpu/Reduction.cpp) defines them:
// sums and products of floats accumulate in double and of integers in int64, max/min propagate
// NaN; f16/bf16 compute in f32 (the result is rounded to f32 and then to 16 bits, as the CPU
// kernel's widening does). The input is collapsed as the CPU kernel collapses it, into
// [kept dims..., reduced dims..., inner], so output j = (o, i) reduces
// x[keptOffset(o) + i + reducedOffset(r)] over r.
//
// The CUDA kernel gives each output a column of threadsY threads that stride over (a slice of)
// its reduced range (accumulateRange), merges their partials by a pairwise tree (mergeTree),
// and merges the slices' partials in slice order; tests/unit/cuda/ReductionMathTest.cpp replays
// exactly that decomposition on the host.
//
#ifndef CPC_KERNELS_CUDA_REDUCTIONMATH_H
#define CPC_KERNELS_CUDA_REDUCTIONMATH_H

#include "kernels/cuda/ElementwiseMath.h"
#include "kernels/cuda/HostDevice.h"
#include "support/ShapeMath.h"

#include <cstdint>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

namespace cpc::kernels::cuda {

//===----------------------------------------------------------------------===//
// The combinations, on the compute type C (float for f16/bf16).
//===----------------------------------------------------------------------===//

template <class C> using WideAcc = std::conditional_t<std::is_floating_point_v<C>, double, int64_t>;

/// Integer sums and products wrap (two's complement, as numpy and the CPU kernels) instead of
/// overflowing, which C++ leaves undefined.
template <class Acc> CPC_HD Acc wrapAdd(Acc a, Acc b) {
  if constexpr (std::is_integral_v<Acc>)
    return Acc((unsigned long long)a + (unsigned long long)b);
  else
    return a + b;
}
template <class Acc> CPC_HD Acc wrapMul(Acc a, Acc b) {
  if constexpr (std::is_integral_v<Acc>)
    return Acc((unsigned long long)a * (unsigned long long)b);
  else
    return a * b;
}

template <class C> struct SumReduce {
  using Acc = WideAcc<C>;
  static CPC_HD Acc init() { return Acc(0); }
  static CPC_HD Acc add(Acc a, C x) { return wrapAdd(a, Acc(x)); }
  static CPC_HD Acc merge(Acc a, Acc b) { return wrapAdd(a, b); }
  static CPC_HD C finish(Acc a, int64_t) { return C(a); }
};
/// reduce_sum_squares: each square rounded to C (f32 for 16-bit storage), as cpc.mul computes it.
template <class C> struct SumSquaresReduce : SumReduce<C> {
  using Acc = WideAcc<C>;
  // The square rounded on its own (mulRn): nvcc would otherwise fuse an f64 square and sum.
  static CPC_HD Acc add(Acc a, C x) { return a + Acc(fmath::mulRn(x, x)); }
};
template <class C> struct MeanReduce : SumReduce<C> {
  static CPC_HD C finish(double a, int64_t n) { return C(a / double(n)); }
};
template <class C> struct ProdReduce {
  using Acc = WideAcc<C>;
  static CPC_HD Acc init() { return Acc(1); }
  static CPC_HD Acc add(Acc a, C x) { return wrapMul(a, Acc(x)); }
  static CPC_HD Acc merge(Acc a, Acc b) { return wrapMul(a, b); }
  static CPC_HD C finish(Acc a, int64_t) { return C(a); }
};
// A NaN operand wins (numpy.max); merging two partials is adding one to the other.
template <class C> struct MaxReduce {
  using Acc = C;
  static CPC_HD Acc init() {
    if constexpr (std::is_floating_point_v<C>) return -std::numeric_limits<C>::infinity();
    else return std::numeric_limits<C>::lowest();
  }
  static CPC_HD Acc add(Acc a, C x) { return (x > a || x != x) ? x : a; }
  static CPC_HD Acc merge(Acc a, Acc b) { return add(a, b); }
  static CPC_HD C finish(Acc a, int64_t) { return a; }
};
template <class C> struct MinReduce {
  using Acc = C;
  static CPC_HD Acc init() {
    if constexpr (std::is_floating_point_v<C>) return std::numeric_limits<C>::infinity();
    else return std::numeric_limits<C>::max();
  }
  static CPC_HD Acc add(Acc a, C x) { return (x < a || x != x) ? x : a; }
  static CPC_HD Acc merge(Acc a, Acc b) { return add(a, b); }
  static CPC_HD C finish(Acc a, int64_t) { return a; }
};

//===----------------------------------------------------------------------===//
// Geometry.
//===----------------------------------------------------------------------===//

constexpr int kMaxReduceRuns = 8;

/// The collapsed input: `outer` kept positions (row-major over keptSize), `reduced` positions
/// (row-major over reducedSize), `inner` contiguous kept elements. Passed to kernels by value.
struct ReduceGeometry {
  int keptRank = 0, reducedRank = 0;
  int64_t keptSize[kMaxReduceRuns] = {}, keptStride[kMaxReduceRuns] = {};
  int64_t reducedSize[kMaxReduceRuns] = {}, reducedStride[kMaxReduceRuns] = {};
  int64_t outer = 1, inner = 1, reduced = 1;

  int64_t outputs() const { return outer * inner; }

  /// Input offset of output j's first reduced element.
  CPC_HD int64_t baseOffset(int64_t j) const {
    int64_t o = j / inner, off = j - o * inner;
    for (int d = keptRank - 1; d >= 0; --d) {
      int64_t q = o / keptSize[d];
      off += (o - q * keptSize[d]) * keptStride[d];
      o = q;
    }
    return off;
  }
  /// Offset of reduced position r from an output's base.
  CPC_HD int64_t reducedOffset(int64_t r) const {
    int64_t off = 0;
    for (int d = reducedRank - 1; d >= 0; --d) {
      int64_t q = r / reducedSize[d];
      off += (r - q * reducedSize[d]) * reducedStride[d];
      r = q;
    }
    return off;
  }
};

/// Checks `axes` and the output shape as the CPU kernel does (negative axes count from the end;
/// after that they must be sorted, unique and in range) and collapses the input: size-1 dims
/// dropped, adjacent dims of the same kind merged, a trailing kept run taken as `inner`. False
/// with `error` set on bad axes, a wrong output shape or too many runs.
inline bool planReduction(const std::vector<int64_t> &shape, std::vector<int64_t> axes, bool keepdims,
                          const std::vector<int64_t> &outShape, ReduceGeometry &g, std::string *error) {
  int64_t rank = (int64_t)shape.size();
  for (int64_t &axis : axes)
    axis = axis < 0 ? axis + rank : axis;
  shapes::Inferred expected = shapes::reduce(shape, axes, keepdims); // the dialect's rule
  if (!expected.ok() || expected.shape != outShape) {
    *error = !expected.ok() ? expected.error
                            : "output shape " + shapes::str(outShape) + ", expected " + shapes::str(expected.shape);
    return false;
  }
  std::vector<bool> isReduced(rank, false);
  for (int64_t axis : axes)
    isReduced[axis] = true;
  std::vector<int64_t> strides(rank);
  for (int64_t d = rank - 1, stride = 1; d >= 0; --d) {
    strides[d] = stride;
    stride *= shape[d];
  }
  struct Run {
    int64_t size, stride;
    bool reduced;
  };
  std::vector<Run> runs;
  for (int64_t d = 0; d < rank; ++d) {
    if (shape[d] == 1)
      continue;
    if (!runs.empty() && runs.back().reduced == isReduced[d]) {
      runs.back().size *= shape[d];
      runs.back().stride = strides[d];
    } else {
      runs.push_back({shape[d], strides[d], (bool)isReduced[d]});
    }
  }
  g = ReduceGeometry{};
  if (!runs.empty() && !runs.back().reduced) {
    g.inner = runs.back().size;
    runs.pop_back();
  }
  for (const Run &run : runs) {
    int &count = run.reduced ? g.reducedRank : g.keptRank;
    if (count == kMaxReduceRuns) {
      *error = "the input's reduced and kept dims form more than " + std::to_string(kMaxReduceRuns) + " runs each";
      return false;
    }
    (run.reduced ? g.reducedSize : g.keptSize)[count] = run.size;
    (run.reduced ? g.reducedStride : g.keptStride)[count] = run.stride;
    ++count;
    (run.reduced ? g.reduced : g.outer) *= run.size;
  }
  return true;
}

//===----------------------------------------------------------------------===//
// One thread's work, and the merge of a column's partials.
//===----------------------------------------------------------------------===//

/// Op's accumulation of value(base + reducedOffset(r)) for r = begin, begin + step, ... < end.
template <class Op, class Value>
CPC_HD typename Op::Acc accumulateRange(const ReduceGeometry &g, int64_t base, int64_t begin, int64_t end,
                                        int64_t step, const Value &value) {
  typename Op::Acc a = Op::init();
  if (g.reducedRank <= 1) { // one run (or none): a stride, no division
    int64_t stride = g.reducedRank ? g.reducedStride[0] : 0;
    for (int64_t r = begin; r < end; r += step)
      a = Op::add(a, value(base + r * stride));
  } else {
    for (int64_t r = begin; r < end; r += step)
      a = Op::add(a, value(base + g.reducedOffset(r)));
  }
  return a;
}

/// Merges partials[0..count) (count a power of two) pairwise into partials[0], as the kernel's
/// shared-memory tree does: at each level p[t] = merge(p[t], p[t + half]).
template <class Op> void mergeTree(typename Op::Acc *partials, int count) {
  for (int half = count / 2; half > 0; half /= 2)
    for (int t = 0; t < half; ++t)
      partials[t] = Op::merge(partials[t], partials[t + half]);
}

} // namespace cpc::kernels::cuda

#endif
