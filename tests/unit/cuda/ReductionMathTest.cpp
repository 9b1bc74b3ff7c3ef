//===- ReductionMathTest.cpp - the reduction CUDA kernels' arithmetic, on the host ===//
//
// Replays kernels/cuda/Reduction.cu's decomposition exactly (ReductionLaunch's blocks: each
// output's threadsY threads stride over a slice of its range with accumulateRange, the tree of
// mergeTree, slices merged in order, the 16-bit result rounded through f32) and compares it
// with the CPU kernel (kernels/cpu/Reduction.cpp) on real shapes; also checks the launch
// shapes and that every (output, position) pair is visited exactly once.
//
#include "kernels/cuda/ReductionLaunch.h"
#include "kernels/cuda/ReductionMath.h"
#include "tests/unit/cuda/CudaTestUtil.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

using namespace cpc;
using namespace cpc::kernels;
using namespace cpc::kernels::cuda;
using namespace cpc::cudatest;

namespace {

struct Case {
  std::vector<int64_t> shape, axes;
  bool keepdims;
};

std::vector<int64_t> outShapeOf(const Case &c) {
  std::vector<int64_t> out;
  int64_t rank = (int64_t)c.shape.size();
  for (int64_t d = 0; d < rank; ++d) {
    bool reduced = false;
    for (int64_t a : c.axes)
      reduced |= (a < 0 ? a + rank : a) == d;
    if (!reduced)
      out.push_back(c.shape[d]);
    else if (c.keepdims)
      out.push_back(1);
  }
  return out;
}

const std::vector<Case> kCases = {
    {{64, 300}, {1}, false},            // rows: inner == 1
    {{300, 64}, {0}, false},            // columns: inner > 1
    {{2, 3, 4}, {1}, true},             // middle axis, keepdims
    {{2, 3, 4}, {0, 2}, false},         // kept dim between reduced ones
    {{2, 1, 3, 2}, {1, 3}, false},      // size-1 reduced dim dropped
    {{4, 5, 6, 7}, {0, 2}, false},      // two reduced runs: offsets by division
    {{3, 4, 5}, {0, 1, 2}, false},      // everything
    {{3, 4, 5}, {}, false},             // nothing: a copy
    {{3, 0, 5}, {1}, false},            // empty reduced range
    {{6, 7}, {-1}, true},               // negative axis
    {{1, 1 << 16}, {1}, false},         // one long row: sliced
    {{1 << 12, 96}, {0}, false},        // long columns: sliced
    {{8, 2, 3000}, {0, 2}, false},      // two runs, sliced
};

/// A plain array (std::vector<bool> has no data()).
template <class T> struct Array {
  std::unique_ptr<T[]> items;
  size_t count = 0;
  explicit Array(size_t n) : items(new T[n]()), count(n) {}
  T *data() { return items.get(); }
  size_t size() const { return count; }
  T &operator[](size_t i) { return items[i]; }
  const T &operator[](size_t i) const { return items[i]; }
};

//===----------------------------------------------------------------------===//
// The replay.
//===----------------------------------------------------------------------===//

/// The kernel's result for output j, as the launch `l` computes it: per slice, per thread
/// column, the tree, then slices in order. C is the compute type.
template <class Op, class Value>
auto replayOutput(const ReduceGeometry &g, const ReductionLaunch &l, int64_t j, const Value &value) {
  using Acc = typename Op::Acc;
  Acc total = Op::init();
  Array<Acc> partials(l.threadsY);
  for (int64_t s = 0; s < l.splits; ++s) {
    int64_t begin = s * l.chunk, end = std::min(g.reduced, begin + l.chunk);
    for (int ty = 0; ty < l.threadsY; ++ty)
      partials[ty] = accumulateRange<Op>(g, g.baseOffset(j), begin + ty, end, l.threadsY, value);
    mergeTree<Op>(partials.data(), l.threadsY);
    total = s == 0 ? partials[0] : Op::merge(total, partials[0]);
  }
  return Op::finish(total, g.reduced);
}

template <class S> DType dtypeOf() {
  if constexpr (std::is_same_v<S, float>) return DType::F32;
  else if constexpr (std::is_same_v<S, double>) return DType::F64;
  else if constexpr (std::is_same_v<S, Half>) return DType::F16;
  else if constexpr (std::is_same_v<S, BFloat>) return DType::BF16;
  else if constexpr (std::is_same_v<S, int64_t>) return DType::I64;
  else if constexpr (std::is_same_v<S, int32_t>) return DType::I32;
  else if constexpr (std::is_same_v<S, int8_t>) return DType::I8;
  else if constexpr (std::is_same_v<S, uint8_t>) return DType::U8;
  else return DType::I1;
}

template <class S> Array<S> valuesOf(int64_t n, unsigned seed) {
  std::mt19937 gen(seed);
  Array<S> v(n);
  for (size_t i = 0; i < v.size(); ++i) {
    S &x = v[i];
    if constexpr (std::is_same_v<S, bool>)
      x = gen() % 3 == 0;
    else if constexpr (std::is_integral_v<S>)
      x = S(int64_t(gen() % 200) - 100); // wraps in u8; sums wrap in i8
    else {
      float f = std::uniform_real_distribution<float>(0.5f, 1.5f)(gen) * (gen() % 2 ? 1 : -1);
      x = HostStorage<S>::store(typename HostStorage<S>::C(f));
    }
  }
  return v;
}

double asDouble(float f) { return f; }
double asDouble(double f) { return f; }

/// The CPU kernel's result and the replayed kernel's, compared: floats within `rtol` (NaN
/// matches NaN), everything else exactly.
template <template <class> class OpT, class S>
void check(OpKind op, const Case &c, int multiprocessors, double rtol) {
  using C = typename HostStorage<S>::C;
  using Op = OpT<C>;
  std::vector<int64_t> outShape = outShapeOf(c);
  Array<S> x = valuesOf<S>(numElements(c.shape), 11), want(numElements(outShape)), got(want.size());
  // The CPU kernel takes the axes normalized (it rejects negative ones).
  std::vector<int64_t> axes = c.axes;
  for (int64_t &a : axes)
    a = a < 0 ? a + (int64_t)c.shape.size() : a;
  KernelContext ctx;
  ctx.op = op;
  ctx.inputs = {TensorRef{x.data(), dtypeOf<S>(), c.shape}};
  ctx.outputs = {TensorRef{want.data(), dtypeOf<S>(), outShape}};
  ctx.setAttrs({{"axes", axes}, {"keepdims", c.keepdims}});
  ctx.threads = 2;
  KernelRegistry::cpu().find(op)(ctx);

  ReduceGeometry g;
  std::string error;
  ASSERT_TRUE(planReduction(c.shape, c.axes, c.keepdims, outShape, g, &error)) << error;
  ASSERT_EQ(g.outputs(), (int64_t)want.size());
  ReductionLaunch l = reductionLaunch(g.outputs(), g.inner, g.reduced, multiprocessors);
  auto value = [&](int64_t offset) { return HostStorage<S>::load(x[offset]); };
  for (int64_t j = 0; j < g.outputs(); ++j)
    got[j] = HostStorage<S>::store(replayOutput<Op>(g, l, j, value));

  std::string what = std::string(opName(op)) + " " + dtypeName(dtypeOf<S>()) + " " + shapeString(c.shape) + " splits " +
                     std::to_string(l.splits);
  int bad = 0;
  for (size_t j = 0; j < want.size(); ++j) {
    C w = HostStorage<S>::load(want[j]), h = HostStorage<S>::load(got[j]);
    bool ok;
    if constexpr (std::is_floating_point_v<C>)
      ok = (w != w && h != h) || w == h || std::fabs(asDouble(w) - asDouble(h)) <= rtol * std::fabs(asDouble(w)) + 1e-30;
    else
      ok = w == h;
    if (!ok && bad++ < 5)
      ADD_FAILURE() << what << " output " << j << ": cpu " << double(w) << ", replayed " << double(h);
  }
  EXPECT_EQ(bad, 0) << what;
}

// Tests sum, sum of squares, mean, prod, max and min on the shapes above, with the launches of a large GPU
// (132 SMs: many slices) and a small one, against the CPU kernel: f32 within 1e-6 (both
// accumulate in double), integers and max/min exactly.
TEST(ReductionMath, ReplayedKernelMatchesCpuKernel) {
  for (int sms : {132, 4}) {
    for (const Case &c : kCases) {
      check<SumReduce, float>(OpKind::ReduceSum, c, sms, 1e-6);
      check<SumReduce, double>(OpKind::ReduceSum, c, sms, 1e-12);
      check<SumReduce, int32_t>(OpKind::ReduceSum, c, sms, 0);
      check<SumReduce, int8_t>(OpKind::ReduceSum, c, sms, 0);
      check<SumReduce, uint8_t>(OpKind::ReduceSum, c, sms, 0);
      check<SumSquaresReduce, float>(OpKind::ReduceSumSquares, c, sms, 1e-6);
      check<SumSquaresReduce, double>(OpKind::ReduceSumSquares, c, sms, 1e-12);
      check<MeanReduce, float>(OpKind::ReduceMean, c, sms, 1e-6);
      check<MeanReduce, double>(OpKind::ReduceMean, c, sms, 1e-12);
      check<MaxReduce, float>(OpKind::ReduceMax, c, sms, 0);
      check<MaxReduce, int64_t>(OpKind::ReduceMax, c, sms, 0);
      check<MaxReduce, bool>(OpKind::ReduceMax, c, sms, 0);
      check<MinReduce, double>(OpKind::ReduceMin, c, sms, 0);
      check<MinReduce, uint8_t>(OpKind::ReduceMin, c, sms, 0);
      check<MinReduce, bool>(OpKind::ReduceMin, c, sms, 0);
      if (numElements(c.shape) <= 4096) { // products of many values leave the float range
        check<ProdReduce, float>(OpKind::ReduceProd, c, sms, 1e-6);
        check<ProdReduce, int64_t>(OpKind::ReduceProd, c, sms, 0);
      }
    }
  }
}

// Tests 16-bit floats: f32 arithmetic (sums in double), the result rounded to f32 and then to
// 16 bits, as the CPU kernel's widening does; exact but for the rare sum whose f32 rounding
// differs, one 16-bit ulp.
TEST(ReductionMath, SixteenBitFloatsRoundThroughF32) {
  for (const Case &c : kCases) {
    check<SumReduce, Half>(OpKind::ReduceSum, c, 132, 0x1p-10);
    check<MeanReduce, BFloat>(OpKind::ReduceMean, c, 132, 0x1p-7);
    check<MaxReduce, Half>(OpKind::ReduceMax, c, 132, 0);
    check<MinReduce, BFloat>(OpKind::ReduceMin, c, 132, 0);
  }
}

// Tests that NaN wins max and min whatever thread or slice holds it.
TEST(ReductionMath, NanPropagatesThroughTheTree) {
  Case c{{1, 1 << 15}, {1}, false};
  ReduceGeometry g;
  std::string error;
  ASSERT_TRUE(planReduction(c.shape, c.axes, false, {1}, g, &error));
  ReductionLaunch l = reductionLaunch(1, g.inner, g.reduced, 132);
  ASSERT_GT(l.splits, 1);
  for (int64_t at : {int64_t(0), int64_t(77), int64_t(1 << 14), int64_t((1 << 15) - 1)}) {
    std::vector<float> x(1 << 15, 1.0f);
    x[at] = std::nanf("");
    auto value = [&](int64_t o) { return x[o]; };
    EXPECT_TRUE(std::isnan(replayOutput<MaxReduce<float>>(g, l, 0, value))) << at;
    EXPECT_TRUE(std::isnan(replayOutput<MinReduce<float>>(g, l, 0, value))) << at;
  }
}

// Tests the launch: 256-thread blocks of powers of two, slices within grid limits, and every
// (output, reduced position) visited exactly once by (slice, thread row).
TEST(ReductionMath, LaunchCoversEveryPositionOnce) {
  struct Shape {
    int64_t outputs, inner, reduced;
  };
  for (Shape s : {Shape{1, 1, 1}, Shape{1, 1, 1 << 20}, Shape{7, 1, 5}, Shape{1000, 1, 3}, Shape{96, 96, 4096},
                  Shape{4, 4, 100000}, Shape{1 << 20, 1 << 20, 2}, Shape{3, 1, 0}, Shape{50, 50, 1}}) {
    for (int sms : {1, 8, 132}) {
      ReductionLaunch l = reductionLaunch(s.outputs, s.inner, s.reduced, sms);
      std::string what = std::to_string(s.outputs) + "x" + std::to_string(s.reduced) + " on " + std::to_string(sms);
      EXPECT_EQ(l.threadsX * l.threadsY, kReduceBlockThreads) << what;
      EXPECT_EQ(l.threadsY & (l.threadsY - 1), 0) << what;
      EXPECT_GE(l.blocks, 1) << what;
      EXPECT_LE(l.blocks, l.tiles) << what;
      EXPECT_GE(l.tiles * l.threadsX, s.outputs) << what;
      EXPECT_LE(l.splits, kMaxGridY) << what;
      EXPECT_GE(l.splits * l.chunk, s.reduced) << what;
      EXPECT_LT((l.splits - 1) * l.chunk, std::max<int64_t>(s.reduced, 1)) << what;
      if (s.inner > 1) {
        EXPECT_GE(l.threadsX, std::min<int64_t>(s.inner, kWarpSize)) << what; // coalesced along inner
      } else {
        EXPECT_GE(l.threadsY, std::min<int64_t>(ceilPow2(s.reduced), kWarpSize)) << what; // along the row
      }
      // Lanes map one to one onto (column, row); a warp's lanes walk consecutive addresses.
      std::vector<int> roles(kReduceBlockThreads, 0);
      for (int lane = 0; lane < kReduceBlockThreads; ++lane) {
        int column = l.columnOf(lane), row = l.rowOf(lane);
        ASSERT_TRUE(column >= 0 && column < l.threadsX && row >= 0 && row < l.threadsY) << what;
        ++roles[row * l.threadsX + column];
      }
      for (int count : roles)
        ASSERT_EQ(count, 1) << what;
      if (s.inner == 1 && l.threadsY >= kWarpSize) {
        EXPECT_EQ(l.rowOf(1), l.rowOf(0) + 1) << what;
      }
      if (s.inner > 1) {
        EXPECT_EQ(l.columnOf(1), l.columnOf(0) + 1) << what;
      }
      if (s.reduced <= 100000) {
        std::vector<int> visits(s.reduced, 0);
        for (int64_t slice = 0; slice < l.splits; ++slice)
          for (int ty = 0; ty < l.threadsY; ++ty)
            for (int64_t r = slice * l.chunk + ty; r < std::min(s.reduced, (slice + 1) * l.chunk); r += l.threadsY)
              ++visits[r];
        for (int64_t r = 0; r < s.reduced; ++r)
          ASSERT_EQ(visits[r], 1) << what << " position " << r;
      }
    }
  }
  // A single long row fills a large GPU by slicing; a wide output needs no slices.
  EXPECT_GT(reductionLaunch(1, 1, 1 << 24, 132).splits, 100);
  EXPECT_EQ(reductionLaunch(1 << 20, 1, 512, 132).splits, 1);
}

// Tests the geometry's checks: unsorted, repeated or out-of-range axes and a wrong output shape.
TEST(ReductionMath, PlanRejectsBadAxesAndShapes) {
  ReduceGeometry g;
  std::string error;
  EXPECT_FALSE(planReduction({2, 3}, {1, 0}, false, {}, g, &error));
  EXPECT_FALSE(planReduction({2, 3}, {1, 1}, false, {2}, g, &error));
  EXPECT_FALSE(planReduction({2, 3}, {2}, false, {2}, g, &error));
  EXPECT_FALSE(planReduction({2, 3}, {-3}, false, {2}, g, &error));
  EXPECT_FALSE(planReduction({2, 3}, {1}, false, {2, 1}, g, &error));
  EXPECT_NE(error.find("output shape"), std::string::npos);
  ASSERT_TRUE(planReduction({2, 3, 4}, {0, 2}, false, {3}, g, &error));
  EXPECT_EQ(g.outer, 3);
  EXPECT_EQ(g.inner, 1);
  EXPECT_EQ(g.reduced, 8);
  EXPECT_EQ(g.reducedRank, 2);
}

} // namespace
