//===- ReductionKernelsTest.cpp - reduce_* kernels -------------------------===//
#include "kernels/cpu/Kernel.h"
#include "tests/unit/TestUtil.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>

using namespace cpc;
using namespace cpc::kernels;

namespace {

template <typename T> TensorRef ref(std::vector<T> &v, DType t, std::vector<int64_t> shape) {
  return TensorRef{v.data(), t, std::move(shape)};
}

void run(OpKind op, TensorRef in, TensorRef out, std::vector<int64_t> axes, bool keepdims,
         int threads = 1) {
  KernelFn fn = KernelRegistry::cpu().find(op);
  ASSERT_NE(fn, nullptr) << op;
  nlohmann::json attrs = {{"axes", axes}, {"keepdims", keepdims}};
  KernelContext ctx;
  ctx.op = op;
  ctx.inputs = {std::move(in)};
  ctx.outputs = {std::move(out)};
  ctx.setAttrs(attrs);
  ctx.threads = threads;
  fn(ctx);
}

// x[i][j][k] = 100 i + 10 j + k over [2,3,4].
std::vector<double> iota234() {
  std::vector<double> x(24);
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 3; ++j)
      for (int k = 0; k < 4; ++k)
        x[(i * 3 + j) * 4 + k] = 100 * i + 10 * j + k;
  return x;
}

using D = std::vector<double>;

} // namespace

TEST(ReductionKernels, SumFirstAxis) {
  D x = iota234(), y(12);
  run(OpKind::ReduceSum, ref(x, DType::F64, {2, 3, 4}), ref(y, DType::F64, {3, 4}), {0}, false);
  for (int j = 0; j < 3; ++j)
    for (int k = 0; k < 4; ++k)
      EXPECT_EQ(y[j * 4 + k], 100 + 2 * (10 * j + k));
}

TEST(ReductionKernels, SumMiddleAxisKeepdims) {
  D x = iota234(), y(8);
  run(OpKind::ReduceSum, ref(x, DType::F64, {2, 3, 4}), ref(y, DType::F64, {2, 1, 4}), {1}, true);
  for (int i = 0; i < 2; ++i)
    for (int k = 0; k < 4; ++k)
      EXPECT_EQ(y[i * 4 + k], 300 * i + 30 + 3 * k);
}

TEST(ReductionKernels, MaxLastAxis) {
  D x = iota234(), y(6);
  run(OpKind::ReduceMax, ref(x, DType::F64, {2, 3, 4}), ref(y, DType::F64, {2, 3}), {2}, false);
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 3; ++j)
      EXPECT_EQ(y[i * 3 + j], 100 * i + 10 * j + 3);
}

TEST(ReductionKernels, MinNonContiguousAxes) {
  D x = iota234(), y(3), yk(3);
  run(OpKind::ReduceMin, ref(x, DType::F64, {2, 3, 4}), ref(y, DType::F64, {3}), {0, 2}, false);
  EXPECT_EQ(y, (D{0, 10, 20}));
  run(OpKind::ReduceSum, ref(x, DType::F64, {2, 3, 4}), ref(yk, DType::F64, {1, 3, 1}), {0, 2}, true);
  for (int j = 0; j < 3; ++j)
    EXPECT_EQ(yk[j], 4 * 100 + 8 * 10 * j + 2 * 6);
}

TEST(ReductionKernels, MeanMultipleTrailingAxes) {
  D x = iota234(), y(2);
  run(OpKind::ReduceMean, ref(x, DType::F64, {2, 3, 4}), ref(y, DType::F64, {2}), {1, 2}, false);
  EXPECT_DOUBLE_EQ(y[0], 11.5);
  EXPECT_DOUBLE_EQ(y[1], 111.5);
}

TEST(ReductionKernels, AllAxesWithAndWithoutKeepdims) {
  D x = iota234(), y(1), yk(1);
  run(OpKind::ReduceSum, ref(x, DType::F64, {2, 3, 4}), ref(y, DType::F64, {}), {0, 1, 2}, false);
  EXPECT_EQ(y[0], 12 * 100 + 8 * 30 + 6 * 6);
  run(OpKind::ReduceMax, ref(x, DType::F64, {2, 3, 4}), ref(yk, DType::F64, {1, 1, 1}), {0, 1, 2}, true);
  EXPECT_EQ(yk[0], 123);
}

TEST(ReductionKernels, EmptyAxesCopies) {
  D x = iota234(), y(24);
  run(OpKind::ReduceSum, ref(x, DType::F64, {2, 3, 4}), ref(y, DType::F64, {2, 3, 4}), {}, false);
  EXPECT_EQ(y, x);
}

TEST(ReductionKernels, SizeOneDimsAndRank4General) {
  // [2,1,3,2] over axes {1,3}: the size-1 axis is a no-op, leaving a [2,3] sum over pairs.
  D x(12), y(6);
  for (int i = 0; i < 12; ++i)
    x[i] = i;
  run(OpKind::ReduceSum, ref(x, DType::F64, {2, 1, 3, 2}), ref(y, DType::F64, {2, 3}), {1, 3}, false);
  EXPECT_EQ(y, (D{1, 5, 9, 13, 17, 21}));
  // [2,3,2,2] over {0,2}: kept dims 1 and 3 interleave with reduced ones.
  D z(24), w(6);
  for (int i = 0; i < 24; ++i)
    z[i] = i;
  run(OpKind::ReduceSum, ref(z, DType::F64, {2, 3, 2, 2}), ref(w, DType::F64, {3, 2}), {0, 2}, false);
  for (int b = 0; b < 3; ++b)
    for (int d = 0; d < 2; ++d) {
      double expect = 0;
      for (int a = 0; a < 2; ++a)
        for (int c = 0; c < 2; ++c)
          expect += z[((a * 3 + b) * 2 + c) * 2 + d];
      EXPECT_EQ(w[b * 2 + d], expect);
    }
}

TEST(ReductionKernels, IntSumAndProd) {
  std::vector<int32_t> x{1, 2, 3, 4, 5, 6}, s(2), p(3);
  run(OpKind::ReduceSum, ref(x, DType::I32, {2, 3}), ref(s, DType::I32, {2}), {1}, false);
  EXPECT_EQ(s, (std::vector<int32_t>{6, 15}));
  run(OpKind::ReduceProd, ref(x, DType::I32, {2, 3}), ref(p, DType::I32, {3}), {0}, false);
  EXPECT_EQ(p, (std::vector<int32_t>{4, 10, 18}));
}

TEST(ReductionKernels, MaxPropagatesNaN) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  std::vector<float> x{1, nan, 3, 4, 5, 6}, y(2);
  run(OpKind::ReduceMax, ref(x, DType::F32, {2, 3}), ref(y, DType::F32, {2}), {1}, false);
  EXPECT_TRUE(std::isnan(y[0]));
  EXPECT_EQ(y[1], 6);
}

TEST(ReductionKernels, LargeF32SumIsAccurateAndThreadIndependent) {
  // 2^20 copies of 0.1f: a float accumulator would drift far from the exact sum.
  const int64_t n = 1 << 20;
  std::vector<float> x(n, 0.1f), y1(1), y8(1);
  run(OpKind::ReduceSum, ref(x, DType::F32, {n}), ref(y1, DType::F32, {}), {0}, false, 1);
  run(OpKind::ReduceSum, ref(x, DType::F32, {n}), ref(y8, DType::F32, {}), {0}, false, 8);
  EXPECT_NEAR(y1[0], double(0.1f) * n, 1e-2);
  EXPECT_EQ(y1[0], y8[0]);
  // Column sums of a tall matrix, split across threads.
  const int64_t rows = 4096, cols = 40;
  std::vector<float> m(rows * cols), c1(cols), c4(cols);
  for (int64_t i = 0; i < rows * cols; ++i)
    m[i] = float(i % cols);
  run(OpKind::ReduceSum, ref(m, DType::F32, {rows, cols}), ref(c1, DType::F32, {cols}), {0}, false, 1);
  run(OpKind::ReduceSum, ref(m, DType::F32, {rows, cols}), ref(c4, DType::F32, {cols}), {0}, false, 4);
  EXPECT_EQ(c1, c4);
  EXPECT_EQ(c1[7], 7.f * rows);
}

// Tests that sums of contiguous runs (summed in double lanes) give each row's exact sum, for
// short rows of every tail length and for long rows cut into chunks, at any thread count.
TEST(ReductionKernels, RowSumsOfDistinctValuesAreExactAtAnyLength) {
  for (int64_t len : {1, 7, 8, 13, 200003}) {
    const int64_t rows = 3;
    std::vector<float> x(rows * len), y1(rows), y2(rows);
    for (int64_t i = 0; i < rows * len; ++i)
      x[i] = float((i * 7919) % 1000) / 64.f - 7.f; // distinct, exactly representable, both signs
    run(OpKind::ReduceSum, ref(x, DType::F32, {rows, len}), ref(y1, DType::F32, {rows}), {1}, false, 1);
    run(OpKind::ReduceSum, ref(x, DType::F32, {rows, len}), ref(y2, DType::F32, {rows}), {1}, false, 2);
    EXPECT_EQ(y1, y2) << len;
    for (int64_t r = 0; r < rows; ++r) {
      double want = 0;
      for (int64_t j = 0; j < len; ++j)
        want += x[r * len + j];
      EXPECT_EQ(y1[r], float(want)) << "row " << r << " of length " << len;
    }
  }
}

TEST(ReductionKernels, BadShapeOrDtypeFails) {
  D x = iota234(), y(6);
  EXPECT_THROW(run(OpKind::ReduceSum, ref(x, DType::F64, {2, 3, 4}), ref(y, DType::F64, {2, 3}), {1}, false),
               RuntimeError);
  std::vector<int64_t> i(6), o(2);
  EXPECT_THROW(run(OpKind::ReduceMean, ref(i, DType::I64, {2, 3}), ref(o, DType::I64, {2}), {1}, false),
               RuntimeError);
  std::vector<uint16_t> h(6), ho(3);
  EXPECT_THROW(run(OpKind::ReduceSum, ref(h, DType::BF16, {2, 3}), ref(ho, DType::BF16, {3}), {1}, false),
               RuntimeError);
}

TEST(ReductionKernels, EveryAxisSubsetMatchesNaiveReference) {
  const std::vector<int64_t> shape{3, 1, 4, 5};
  D x(60);
  for (int i = 0; i < 60; ++i)
    x[i] = double((i * 37) % 23) - 11;
  for (int mask = 0; mask < 16; ++mask)
    for (bool keep : {false, true}) {
      std::vector<int64_t> axes, outShape;
      for (int d = 0; d < 4; ++d) {
        if (mask >> d & 1)
          axes.push_back(d);
        if (!(mask >> d & 1))
          outShape.push_back(shape[d]);
        else if (keep)
          outShape.push_back(1);
      }
      // Naive: map each input element to its output index.
      std::vector<int64_t> keptDims;
      for (int d = 0; d < 4; ++d)
        if (!(mask >> d & 1))
          keptDims.push_back(d);
      D sum(60, 0), mx(60, -1e300);
      int64_t outN = 1;
      for (int64_t d : keptDims)
        outN *= shape[d];
      for (int64_t flat = 0; flat < 60; ++flat) {
        int64_t idx[4], rem = flat;
        for (int d = 3; d >= 0; --d) {
          idx[d] = rem % shape[d];
          rem /= shape[d];
        }
        int64_t o = 0;
        for (int64_t d : keptDims)
          o = o * shape[d] + idx[d];
        sum[o] += x[flat];
        mx[o] = std::max(mx[o], x[flat]);
      }
      D ys(outN), ym(outN);
      run(OpKind::ReduceSum, ref(x, DType::F64, shape), ref(ys, DType::F64, outShape), axes, keep);
      run(OpKind::ReduceMax, ref(x, DType::F64, shape), ref(ym, DType::F64, outShape), axes, keep, 2);
      for (int64_t o = 0; o < outN; ++o) {
        ASSERT_EQ(ys[o], sum[o]) << mask << " " << keep;
        ASSERT_EQ(ym[o], mx[o]) << mask << " " << keep;
      }
    }
}

namespace {

// Tests that reduce_sum_squares is cpc.mul(x, x) then cpc.reduce_sum bit for bit (each square
// rounded to f32, the same lanes and chunks), for a long full reduction (split into chunks),
// trailing axes, a leading axis (blocks of inner columns) and non-contiguous axes, at 1 and 3
// threads.
TEST(ReductionKernels, SumSquaresEqualsMulThenSum) {
  struct Case {
    std::vector<int64_t> shape, axes;
    bool keepdims;
  };
  for (const Case &c : {Case{{600001}, {0}, false}, Case{{7, 9, 130}, {1, 2}, true}, Case{{40, 33}, {0}, false},
                        Case{{3, 5, 4, 6}, {0, 2}, false}}) {
    int64_t n = numElements(c.shape);
    std::vector<float> x = cpc::test::randomFloats(n, 17, -4, 4), squares(n);
    for (int64_t i = 0; i < n; ++i)
      squares[i] = x[i] * x[i];
    std::vector<int64_t> outShape;
    for (int64_t d = 0; d < (int64_t)c.shape.size(); ++d) {
      bool reduced = std::find(c.axes.begin(), c.axes.end(), d) != c.axes.end();
      if (!reduced || c.keepdims)
        outShape.push_back(reduced ? 1 : c.shape[d]);
    }
    std::vector<float> expected(numElements(outShape)), got(expected.size());
    run(OpKind::ReduceSum, ref(squares, DType::F32, c.shape), ref(expected, DType::F32, outShape), c.axes, c.keepdims);
    for (int threads : {1, 3}) {
      run(OpKind::ReduceSumSquares, ref(x, DType::F32, c.shape), ref(got, DType::F32, outShape), c.axes, c.keepdims, threads);
      EXPECT_EQ(got, expected) << shapeString(c.shape) << " threads " << threads;
    }
  }
}

} // namespace
