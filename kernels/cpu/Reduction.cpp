//===- Reduction.cpp - reduce_{sum,mean,max,min,prod,sum_squares} ----------===//
//
// The input's dims are collapsed (size-1 dims dropped, adjacent kept/reduced dims merged)
// and viewed as [outer kept..., reduced..., inner] where `inner` is the last dim when it is
// kept. Output element (o, i) then reduces x[keptOffset(o) + reducedOffset(r) + i] over r:
//  - inner == 1: each output reduces one run (contiguous when the axes are trailing);
//  - inner > 1: blocks of inner elements accumulate side by side, which vectorizes.
// Reduced offsets are a stride when the axes collapse to one dim (contiguous axes) and a
// precomputed table otherwise. Every output accumulates in the same order whatever the
// thread count, so results do not depend on ctx.threads.
//
#include "kernels/cpu/Dispatch.h"
#include "kernels/cpu/Kernel.h"
#include "kernels/cpu/RowSums.h"
#include "support/ShapeMath.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>

namespace cpc::kernels {
namespace {

// Sums and products accumulate floats in double and integers in int64.
template <typename T>
using Wide = std::conditional_t<std::is_floating_point_v<T>, double, int64_t>;

/// a + b and a * b that wrap for integers (two's complement, as numpy), instead of overflowing.
template <typename Acc> Acc wrappingAdd(Acc a, Acc b) {
  if constexpr (std::is_integral_v<Acc>)
    return Acc(uint64_t(a) + uint64_t(b));
  else
    return a + b;
}
template <typename Acc> Acc wrappingMul(Acc a, Acc b) {
  if constexpr (std::is_integral_v<Acc>)
    return Acc(uint64_t(a) * uint64_t(b));
  else
    return a * b;
}

template <typename T> struct Sum {
  using Acc = Wide<T>;
  static constexpr bool kLanes = std::is_floating_point_v<T>; // a contiguous run sums in lanes
  static Acc init() { return 0; }
  static Acc term(T x) { return Acc(x); } // what an element adds
  static Acc add(Acc a, T x) { return wrappingAdd(a, term(x)); }
  static Acc merge(Acc a, Acc b) { return wrappingAdd(a, b); }
  static T finish(Acc a, int64_t) { return T(a); }
};
// reduce_sum_squares: each square rounded to T first, as cpc.mul computes it (floats only).
template <typename T> struct SumSquares : Sum<T> {
  static double term(T x) { return double(T(x * x)); }
  static double add(double a, T x) { return a + term(x); }
};
template <typename T> struct Mean : Sum<T> {
  static T finish(double a, int64_t n) { return T(a / double(n)); }
};
template <typename T> struct Prod {
  static constexpr bool kLanes = false;
  using Acc = Wide<T>;
  static Acc init() { return 1; }
  static Acc add(Acc a, T x) { return wrappingMul(a, Acc(x)); }
  static Acc merge(Acc a, Acc b) { return wrappingMul(a, b); }
  static T finish(Acc a, int64_t) { return T(a); }
};
// NaN propagates, as in numpy.max.
template <typename T> struct Max {
  static constexpr bool kLanes = false;
  using Acc = T;
  static Acc init() {
    if constexpr (std::is_floating_point_v<T>) return -std::numeric_limits<T>::infinity();
    else return std::numeric_limits<T>::lowest();
  }
  static Acc add(Acc a, T x) { return (x > a || x != x) ? x : a; }
  static Acc merge(Acc a, Acc b) { return add(a, b); }
  static T finish(Acc a, int64_t) { return a; }
};
template <typename T> struct Min {
  static constexpr bool kLanes = false;
  using Acc = T;
  static Acc init() {
    if constexpr (std::is_floating_point_v<T>) return std::numeric_limits<T>::infinity();
    else return std::numeric_limits<T>::max();
  }
  static Acc add(Acc a, T x) { return (x < a || x != x) ? x : a; }
  static Acc merge(Acc a, Acc b) { return add(a, b); }
  static T finish(Acc a, int64_t) { return a; }
};

struct Dim {
  int64_t size, stride;
};

// Offsets of a list of dims, enumerated in row-major order.
std::vector<int64_t> offsetTable(const std::vector<Dim> &dims) {
  std::vector<int64_t> table{0};
  for (const Dim &d : dims) {
    std::vector<int64_t> next;
    next.reserve(table.size() * d.size);
    for (int64_t base : table)
      for (int64_t j = 0; j < d.size; ++j)
        next.push_back(base + j * d.stride);
    table.swap(next);
  }
  return table;
}

int64_t offsetOf(const std::vector<Dim> &dims, int64_t index) {
  int64_t off = 0;
  for (size_t d = dims.size(); d-- > 0;) {
    off += (index % dims[d].size) * dims[d].stride;
    index /= dims[d].size;
  }
  return off;
}

struct StridedOffsets {
  int64_t stride;
  int64_t operator()(int64_t r) const { return r * stride; }
};
struct TableOffsets {
  const int64_t *table;
  int64_t operator()(int64_t r) const { return table[r]; }
};

constexpr int64_t kChunk = 1 << 15; // long single reductions split into chunks of this size

/// Op over base[roff(r)] for r in [begin, end). A contiguous run of a float sum goes through
/// kSumLanes double lanes (RowSums.h): vectorized instead of one dependent add per element, and
/// as independent of the thread count; every other run accumulates in order.
template <typename T, typename Op, typename ROff>
typename Op::Acc reduceRun(const T *base, int64_t begin, int64_t end, ROff roff) {
  if constexpr (Op::kLanes && std::is_same_v<ROff, StridedOffsets>)
    if (roff.stride == 1)
      return laneSum(end - begin, [&](int64_t j) { return Op::term(base[begin + j]); });
  typename Op::Acc a = Op::init();
  for (int64_t r = begin; r < end; ++r)
    a = Op::add(a, base[roff(r)]);
  return a;
}

template <typename T, typename Op, typename ROff>
void reduceBlocks(const KernelContext &ctx, const T *x, T *y, const std::vector<Dim> &kept,
                  int64_t outer, int64_t inner, int64_t reduced, ROff roff) {
  using Acc = typename Op::Acc;
  int threads = std::max(1, ctx.threads);
  int64_t total = outer * inner * reduced;
  if (inner == 1 && outer < 16 && reduced > 4 * kChunk) {
    // Few long reductions: split each into fixed chunks (fixed, so results do not depend on
    // the thread count) and merge the partials in order.
    int64_t chunks = (reduced + kChunk - 1) / kChunk;
    std::vector<Acc> partial(chunks);
    for (int64_t o = 0; o < outer; ++o) {
      const T *base = x + offsetOf(kept, o);
#pragma omp parallel for num_threads(threads)
      for (int64_t c = 0; c < chunks; ++c)
        partial[c] = reduceRun<T, Op>(base, c * kChunk, std::min(reduced, (c + 1) * kChunk), roff);
      Acc a = partial[0];
      for (int64_t c = 1; c < chunks; ++c)
        a = Op::merge(a, partial[c]);
      y[o] = Op::finish(a, reduced);
    }
    return;
  }
  if (inner == 1) {
#pragma omp parallel for num_threads(threads) if (total > kParallelMin)
    for (int64_t o = 0; o < outer; ++o) {
      y[o] = Op::finish(reduceRun<T, Op>(x + offsetOf(kept, o), 0, reduced, roff), reduced);
    }
    return;
  }
  // Inner blocks small enough to give every thread work, at most kBlock wide (stack).
  constexpr int64_t kBlock = 256;
  int64_t block = columnBlock(inner, outer, threads, kBlock);
  int64_t blocks = (inner + block - 1) / block;
#pragma omp parallel for num_threads(threads) if (total > kParallelMin)
  for (int64_t task = 0; task < outer * blocks; ++task) {
    int64_t o = task / blocks, i0 = (task % blocks) * block, n = std::min(block, inner - i0);
    const T *base = x + offsetOf(kept, o) + i0;
    Acc acc[kBlock];
    for (int64_t i = 0; i < n; ++i)
      acc[i] = Op::init();
    for (int64_t r = 0; r < reduced; ++r) {
      const T *row = base + roff(r);
      for (int64_t i = 0; i < n; ++i)
        acc[i] = Op::add(acc[i], row[i]);
    }
    T *out = y + o * inner + i0;
    for (int64_t i = 0; i < n; ++i)
      out[i] = Op::finish(acc[i], reduced);
  }
}

template <template <class> class Op, unsigned K> void reduceKernel(KernelContext &ctx) {
  if (ctx.inputs.size() != 1 || ctx.outputs.size() != 1)
    ctx.fail("expected 1 input and 1 output");
  const TensorRef &in = ctx.inputs[0], &out = ctx.outputs[0];
  std::vector<int64_t> axes = ctx.attrs.axes;
  bool keepdims = ctx.attrs.keepdims;
  if (out.dtype != in.dtype)
    ctx.fail(std::string("output element type ") + dtypeName(out.dtype) + " differs from input " +
             dtypeName(in.dtype));

  int64_t rank = in.rank();
  shapes::Inferred expected = shapes::reduce(in.shape, axes, keepdims); // the dialect's rule
  if (!expected.ok())
    ctx.fail(expected.error);
  if (expected.shape != out.shape)
    ctx.fail("output shape " + shapeString(out.shape) + ", expected " + shapeString(expected.shape));
  std::vector<bool> isReduced(rank, false);
  for (int64_t axis : axes)
    isReduced[axis] = true;

  // Collapse into alternating runs of kept and reduced dims.
  std::vector<Dim> kept, reducedDims;
  std::vector<bool> runReduced;
  std::vector<Dim> runs;
  int64_t stride = 1;
  std::vector<int64_t> strides(rank);
  for (int64_t d = rank - 1; d >= 0; --d) {
    strides[d] = stride;
    stride *= in.shape[d];
  }
  for (int64_t d = 0; d < rank; ++d) {
    if (in.shape[d] == 1)
      continue;
    if (!runs.empty() && runReduced.back() == isReduced[d]) {
      runs.back().size *= in.shape[d];
      runs.back().stride = strides[d];
    } else {
      runs.push_back({in.shape[d], strides[d]});
      runReduced.push_back(isReduced[d]);
    }
  }
  int64_t inner = 1;
  if (!runs.empty() && !runReduced.back()) {
    inner = runs.back().size;
    runs.pop_back();
    runReduced.pop_back();
  }
  for (size_t i = 0; i < runs.size(); ++i)
    (runReduced[i] ? reducedDims : kept).push_back(runs[i]);
  int64_t outer = 1, reduced = 1;
  for (const Dim &d : kept)
    outer *= d.size;
  for (const Dim &d : reducedDims)
    reduced *= d.size;
  if (outer * inner == 0)
    return;

  dispatch<K>(ctx, in.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T *x = in.as<T>();
    T *y = out.as<T>();
    if (reducedDims.size() <= 1) {
      int64_t rs = reducedDims.empty() ? 0 : reducedDims[0].stride;
      reduceBlocks<T, Op<T>>(ctx, x, y, kept, outer, inner, reduced, StridedOffsets{rs});
    } else {
      std::vector<int64_t> table = offsetTable(reducedDims);
      reduceBlocks<T, Op<T>>(ctx, x, y, kept, outer, inner, reduced, TableOffsets{table.data()});
    }
  });
}

} // namespace

void registerReductionKernels(KernelRegistry &r) {
  r.add(OpKind::ReduceSum, reduceKernel<Sum, kNum>);
  r.add(OpKind::ReduceSumSquares, reduceKernel<SumSquares, kFloat>);
  r.add(OpKind::ReduceMean, reduceKernel<Mean, kFloat>);
  r.add(OpKind::ReduceMax, reduceKernel<Max, kAny>);
  r.add(OpKind::ReduceMin, reduceKernel<Min, kAny>);
  r.add(OpKind::ReduceProd, reduceKernel<Prod, kNum>);
}

} // namespace cpc::kernels
