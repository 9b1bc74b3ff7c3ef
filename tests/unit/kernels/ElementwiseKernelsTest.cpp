//===- ElementwiseKernelsTest.cpp - unary, binary, where, cast kernels ----===//
#include "kernels/cpu/Kernel.h"
#include "tests/unit/kernels/KernelTestUtil.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

using namespace cpc;
using namespace cpc::kernels;

namespace {

template <typename T> TensorRef ref(std::vector<T> &v, DType t, std::vector<int64_t> shape) {
  return TensorRef{v.data(), t, std::move(shape)};
}

void run(OpKind op, std::vector<TensorRef> ins, std::vector<TensorRef> outs,
         nlohmann::json attrs = nlohmann::json::object(), int threads = 1) {
  cpc::kernels::testing::run(op, std::move(ins), std::move(outs), attrs, threads);
}

using F = std::vector<float>;
using B = std::vector<uint8_t>; // i1 storage

} // namespace

TEST(ElementwiseKernels, AddSameShape) {
  F a{1, 2, 3, 4}, b{10, 20, 30, 40}, y(4);
  run(OpKind::Add, {ref(a, DType::F32, {2, 2}), ref(b, DType::F32, {2, 2})}, {ref(y, DType::F32, {2, 2})});
  EXPECT_EQ(y, (F{11, 22, 33, 44}));
}

TEST(ElementwiseKernels, AddBroadcastsRowVector) {
  F a{1, 2, 3, 4, 5, 6}, b{10, 20, 30}, y(6);
  run(OpKind::Add, {ref(a, DType::F32, {2, 3}), ref(b, DType::F32, {3})}, {ref(y, DType::F32, {2, 3})});
  EXPECT_EQ(y, (F{11, 22, 33, 14, 25, 36}));
}

TEST(ElementwiseKernels, SubBroadcastsColumnAndRank0) {
  F a{1, 2, 3, 4, 5, 6}, col{1, 2}, y(6);
  run(OpKind::Sub, {ref(a, DType::F32, {2, 3}), ref(col, DType::F32, {2, 1})}, {ref(y, DType::F32, {2, 3})});
  EXPECT_EQ(y, (F{0, 1, 2, 2, 3, 4}));
  F s{10}, z(6);
  run(OpKind::Sub, {ref(s, DType::F32, {}), ref(a, DType::F32, {2, 3})}, {ref(z, DType::F32, {2, 3})});
  EXPECT_EQ(z, (F{9, 8, 7, 6, 5, 4}));
}

TEST(ElementwiseKernels, MulOuterProductBroadcast) {
  // [3,1] x [1,4] -> [3,4]: both operands broadcast.
  F a{1, 2, 3}, b{1, 10, 100, 1000}, y(12);
  run(OpKind::Mul, {ref(a, DType::F32, {3, 1}), ref(b, DType::F32, {1, 4})}, {ref(y, DType::F32, {3, 4})});
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 4; ++j)
      EXPECT_EQ(y[i * 4 + j], a[i] * b[j]);
}

TEST(ElementwiseKernels, BroadcastMiddleDimRank3) {
  // [2,1,3] + [4,1] -> [2,4,3]
  F a(6), b{0, 100, 200, 300}, y(24);
  for (int i = 0; i < 6; ++i)
    a[i] = float(i);
  run(OpKind::Add, {ref(a, DType::F32, {2, 1, 3}), ref(b, DType::F32, {4, 1})}, {ref(y, DType::F32, {2, 4, 3})});
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 4; ++j)
      for (int k = 0; k < 3; ++k)
        EXPECT_EQ(y[(i * 4 + j) * 3 + k], a[i * 3 + k] + b[j]);
}

TEST(ElementwiseKernels, LargeBroadcastParallelMatchesSerial) {
  const int64_t rows = 300, cols = 257;
  F a(rows * cols), b(cols), y1(rows * cols), y4(rows * cols);
  for (size_t i = 0; i < a.size(); ++i)
    a[i] = float(i % 97) * 0.5f;
  for (int64_t j = 0; j < cols; ++j)
    b[j] = float(j);
  run(OpKind::Mul, {ref(a, DType::F32, {rows, cols}), ref(b, DType::F32, {cols})}, {ref(y1, DType::F32, {rows, cols})});
  run(OpKind::Mul, {ref(a, DType::F32, {rows, cols}), ref(b, DType::F32, {cols})}, {ref(y4, DType::F32, {rows, cols})},
      nlohmann::json::object(), 4);
  EXPECT_EQ(y1, y4);
  EXPECT_EQ(y4[5 * cols + 7], a[5 * cols + 7] * 7);
}

TEST(ElementwiseKernels, InPlaceAliasing) {
  F a{1, 2, 3, 4, 5, 6}, b{1, 2, 3};
  run(OpKind::Add, {ref(a, DType::F32, {2, 3}), ref(b, DType::F32, {3})}, {ref(a, DType::F32, {2, 3})});
  EXPECT_EQ(a, (F{2, 4, 6, 5, 7, 9}));
  F c{1, 2}, d{10, 20, 30, 40};
  run(OpKind::Sub, {ref(c, DType::F32, {2, 1}), ref(d, DType::F32, {2, 2})}, {ref(d, DType::F32, {2, 2})});
  EXPECT_EQ(d, (F{-9, -19, -28, -38}));
  F e{-1, 4};
  run(OpKind::Neg, {ref(e, DType::F32, {2})}, {ref(e, DType::F32, {2})});
  EXPECT_EQ(e, (F{1, -4}));
}

TEST(ElementwiseKernels, IntDivisionTruncatesTowardZero) {
  std::vector<int64_t> a{7, -7, 7, -7, std::numeric_limits<int64_t>::min()}, b{2, 2, -2, -2, -1}, y(5);
  run(OpKind::Div, {ref(a, DType::I64, {5}), ref(b, DType::I64, {5})}, {ref(y, DType::I64, {5})});
  EXPECT_EQ(y, (std::vector<int64_t>{3, -3, -3, 3, std::numeric_limits<int64_t>::min()}));
  std::vector<int32_t> c{9, -9}, s{4}, z(2);
  run(OpKind::Div, {ref(c, DType::I32, {2}), ref(s, DType::I32, {})}, {ref(z, DType::I32, {2})});
  EXPECT_EQ(z, (std::vector<int32_t>{2, -2}));
}

TEST(ElementwiseKernels, IntDivisionByZeroFails) {
  std::vector<int64_t> a{1, 2}, b{1, 0}, y(2);
  EXPECT_THROW(run(OpKind::Div, {ref(a, DType::I64, {2}), ref(b, DType::I64, {2})}, {ref(y, DType::I64, {2})}),
               RuntimeError);
  F fa{1}, fb{0}, fy(1);
  run(OpKind::Div, {ref(fa, DType::F32, {1}), ref(fb, DType::F32, {1})}, {ref(fy, DType::F32, {1})});
  EXPECT_TRUE(std::isinf(fy[0]));
}

TEST(ElementwiseKernels, UnsupportedDtypeFails) {
  std::vector<uint16_t> a(2), y(2);
  try { // 16-bit floats are widened, but the f32 kernel still checks its operands
    run(OpKind::Add, {ref(a, DType::F16, {2}), ref(a, DType::BF16, {2})}, {ref(y, DType::F16, {2})});
    run(OpKind::Not, {ref(a, DType::F16, {2})}, {ref(y, DType::F16, {2})});
    FAIL() << "expected RuntimeError";
  } catch (const RuntimeError &e) {
    EXPECT_NE(std::string(e.what()).find("cpc.not: element type f32 is not supported"), std::string::npos)
        << e.what();
  }
  std::vector<int64_t> i(2), o(2);
  EXPECT_THROW(run(OpKind::Exp, {ref(i, DType::I64, {2})}, {ref(o, DType::I64, {2})}), RuntimeError);
}

TEST(ElementwiseKernels, MismatchedBroadcastFails) {
  F a(6), b(4), y(6);
  EXPECT_THROW(run(OpKind::Add, {ref(a, DType::F32, {2, 3}), ref(b, DType::F32, {4})}, {ref(y, DType::F32, {2, 3})}),
               RuntimeError);
}

TEST(ElementwiseKernels, MaxMinPropagateNaN) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  F a{1, nan, 3, nan}, b{2, 1, nan, nan}, mx(4), mn(4);
  run(OpKind::Max, {ref(a, DType::F32, {4}), ref(b, DType::F32, {4})}, {ref(mx, DType::F32, {4})});
  run(OpKind::Min, {ref(a, DType::F32, {4}), ref(b, DType::F32, {4})}, {ref(mn, DType::F32, {4})});
  EXPECT_EQ(mx[0], 2);
  EXPECT_EQ(mn[0], 1);
  for (int i = 1; i < 4; ++i) {
    EXPECT_TRUE(std::isnan(mx[i])) << i;
    EXPECT_TRUE(std::isnan(mn[i])) << i;
  }
}

TEST(ElementwiseKernels, ComparisonsProduceI1) {
  std::vector<int32_t> a{1, 2, 3}, b{2};
  B lt(3), le(3), eq(3), gt(3), ge(3);
  auto in = [&] { return std::vector<TensorRef>{ref(a, DType::I32, {3}), ref(b, DType::I32, {1})}; };
  run(OpKind::Less, in(), {ref(lt, DType::I1, {3})});
  run(OpKind::LessEqual, in(), {ref(le, DType::I1, {3})});
  run(OpKind::Equal, in(), {ref(eq, DType::I1, {3})});
  run(OpKind::Greater, in(), {ref(gt, DType::I1, {3})});
  run(OpKind::GreaterEqual, in(), {ref(ge, DType::I1, {3})});
  EXPECT_EQ(lt, (B{1, 0, 0}));
  EXPECT_EQ(le, (B{1, 1, 0}));
  EXPECT_EQ(eq, (B{0, 1, 0}));
  EXPECT_EQ(gt, (B{0, 0, 1}));
  EXPECT_EQ(ge, (B{0, 1, 1}));
}

TEST(ElementwiseKernels, LogicalOps) {
  B a{0, 0, 1, 1}, b{0, 1, 0, 1}, andY(4), orY(4), notY(4);
  run(OpKind::And, {ref(a, DType::I1, {4}), ref(b, DType::I1, {4})}, {ref(andY, DType::I1, {4})});
  run(OpKind::Or, {ref(a, DType::I1, {4}), ref(b, DType::I1, {4})}, {ref(orY, DType::I1, {4})});
  run(OpKind::Not, {ref(a, DType::I1, {4})}, {ref(notY, DType::I1, {4})});
  EXPECT_EQ(andY, (B{0, 0, 0, 1}));
  EXPECT_EQ(orY, (B{0, 1, 1, 1}));
  EXPECT_EQ(notY, (B{1, 1, 0, 0}));
}

TEST(ElementwiseKernels, WhereBroadcastsThreeWays) {
  B cond{1, 0};                   // [2,1]
  F a{1, 2, 3}, b{-5}, y(6);      // [3], rank 0
  run(OpKind::Where, {ref(cond, DType::I1, {2, 1}), ref(a, DType::F32, {3}), ref(b, DType::F32, {})},
      {ref(y, DType::F32, {2, 3})});
  EXPECT_EQ(y, (F{1, 2, 3, -5, -5, -5}));
  std::vector<int64_t> ia{1, 2, 3, 4}, ib{9, 9, 9, 9}, iy(4);
  B c2{1, 0, 0, 1};
  run(OpKind::Where, {ref(c2, DType::I1, {4}), ref(ia, DType::I64, {4}), ref(ib, DType::I64, {4})},
      {ref(iy, DType::I64, {4})});
  EXPECT_EQ(iy, (std::vector<int64_t>{1, 9, 9, 4}));
}

TEST(ElementwiseKernels, CastFloatToIntTruncatesAndToBool) {
  F a{-2.7f, -0.5f, 0.f, 1.9f, 3.f};
  std::vector<int64_t> i(5);
  run(OpKind::Cast, {ref(a, DType::F32, {5})}, {ref(i, DType::I64, {5})});
  EXPECT_EQ(i, (std::vector<int64_t>{-2, 0, 0, 1, 3}));
  B b(5);
  run(OpKind::Cast, {ref(a, DType::F32, {5})}, {ref(b, DType::I1, {5})});
  EXPECT_EQ(b, (B{1, 1, 0, 1, 1}));
  F back(5);
  run(OpKind::Cast, {ref(b, DType::I1, {5})}, {ref(back, DType::F32, {5})});
  EXPECT_EQ(back, (F{1, 1, 0, 1, 1}));
  std::vector<int32_t> n{-1, 256, 300};
  std::vector<uint8_t> u(3);
  run(OpKind::Cast, {ref(n, DType::I32, {3})}, {ref(u, DType::U8, {3})});
  EXPECT_EQ(u, (std::vector<uint8_t>{255, 0, 44}));
  std::vector<double> d(3);
  run(OpKind::Cast, {ref(u, DType::U8, {3})}, {ref(d, DType::F64, {3})});
  EXPECT_EQ(d, (std::vector<double>{255, 0, 44}));
}

TEST(ElementwiseKernels, UnaryFloatOps) {
  std::vector<double> x{-2, -0.5, 0.25, 3}, y(4);
  auto check = [&](OpKind op, double (*f)(double)) {
    run(op, {ref(x, DType::F64, {4})}, {ref(y, DType::F64, {4})});
    for (int i = 0; i < 4; ++i)
      EXPECT_NEAR(y[i], f(x[i]), 1e-12) << op << " " << x[i];
  };
  check(OpKind::Exp, [](double v) { return std::exp(v); });
  check(OpKind::Erf, [](double v) { return std::erf(v); });
  check(OpKind::Tanh, [](double v) { return std::tanh(v); });
  check(OpKind::Sigmoid, [](double v) { return 1 / (1 + std::exp(-v)); });
  check(OpKind::Relu, [](double v) { return v > 0 ? v : 0; });
  check(OpKind::Abs, [](double v) { return std::fabs(v); });
  check(OpKind::Neg, [](double v) { return -v; });
  check(OpKind::Reciprocal, [](double v) { return 1 / v; });
  std::vector<double> p{0.25, 4}, q(2);
  run(OpKind::Sqrt, {ref(p, DType::F64, {2})}, {ref(q, DType::F64, {2})});
  EXPECT_EQ(q, (std::vector<double>{0.5, 2}));
  run(OpKind::Rsqrt, {ref(p, DType::F64, {2})}, {ref(q, DType::F64, {2})});
  EXPECT_EQ(q, (std::vector<double>{2, 0.5}));
  run(OpKind::Log, {ref(p, DType::F64, {2})}, {ref(q, DType::F64, {2})});
  EXPECT_NEAR(q[1], std::log(4.0), 1e-15);
  std::vector<int8_t> i8{-128, -3, 5}, a8(3);
  run(OpKind::Abs, {ref(i8, DType::I8, {3})}, {ref(a8, DType::I8, {3})});
  EXPECT_EQ(a8, (std::vector<int8_t>{-128, 3, 5})); // wraps like numpy
}

TEST(ElementwiseKernels, GeluBothModesMatchFormula) {
  F x{-3, -1, -0.1f, 0, 0.5f, 2}, exact(6), approx(6);
  run(OpKind::Gelu, {ref(x, DType::F32, {6})}, {ref(exact, DType::F32, {6})});
  run(OpKind::Gelu, {ref(x, DType::F32, {6})}, {ref(approx, DType::F32, {6})}, {{"approximate", "tanh"}});
  for (int i = 0; i < 6; ++i) {
    double v = x[i];
    double e = v * 0.5 * (1 + std::erf(v / std::sqrt(2.0)));
    double a = 0.5 * v * (1 + std::tanh(std::sqrt(2 / M_PI) * (v + 0.044715 * v * v * v)));
    EXPECT_NEAR(exact[i], e, 1e-6) << v;
    EXPECT_NEAR(approx[i], a, 1e-6) << v;
  }
  EXPECT_THROW(run(OpKind::Gelu, {ref(x, DType::F32, {6})}, {ref(approx, DType::F32, {6})},
                   {{"approximate", "cubic"}}),
               RuntimeError);
}

TEST(ElementwiseKernels, PowAndIntegerOps) {
  F a{2, 9, 4}, b{3, 0.5f, -1}, y(3);
  run(OpKind::Pow, {ref(a, DType::F32, {3}), ref(b, DType::F32, {3})}, {ref(y, DType::F32, {3})});
  EXPECT_EQ(y, (F{8, 3, 0.25f}));
  std::vector<uint8_t> u{250, 3}, v{10}, w(2);
  run(OpKind::Add, {ref(u, DType::U8, {2}), ref(v, DType::U8, {1})}, {ref(w, DType::U8, {2})});
  EXPECT_EQ(w, (std::vector<uint8_t>{4, 13}));
  std::vector<int16_t> s{-4, 7}, t{3, -2}, m(2);
  run(OpKind::Max, {ref(s, DType::I16, {2}), ref(t, DType::I16, {2})}, {ref(m, DType::I16, {2})});
  EXPECT_EQ(m, (std::vector<int16_t>{3, 7}));
}

TEST(ElementwiseKernels, RandomBroadcastsMatchNaiveReference) {
  // Every rank-3 pair of shapes drawn from {1, n} per dim (and dropped leading dims),
  // against a direct index computation; sizes big enough to go parallel too.
  const std::vector<int64_t> full{33, 31, 37};
  for (int mask = 0; mask < 64; ++mask)
    for (int drop = 0; drop < 3; ++drop) {
      std::vector<int64_t> sa(3), sb(3);
      for (int d = 0; d < 3; ++d) {
        sa[d] = (mask >> d) & 1 ? full[d] : 1;
        sb[d] = (mask >> (d + 3)) & 1 ? full[d] : 1;
      }
      std::vector<int64_t> out(3);
      for (int d = 0; d < 3; ++d)
        out[d] = std::max(sa[d], sb[d]);
      std::vector<int64_t> sbDropped(sb.begin() + drop, sb.end());
      F a(numElements(sa)), b(numElements(sb)), y(numElements(out));
      for (size_t i = 0; i < a.size(); ++i)
        a[i] = float(i % 101);
      for (size_t i = 0; i < b.size(); ++i)
        b[i] = float(i % 89) * 1000;
      if (drop && numElements(sbDropped) != (int64_t)b.size())
        continue; // dropping a non-1 leading dim changes the shape's meaning
      run(OpKind::Add, {ref(a, DType::F32, sa), ref(b, DType::F32, sbDropped)}, {ref(y, DType::F32, out)},
          nlohmann::json::object(), 3);
      for (int64_t i = 0; i < out[0]; ++i)
        for (int64_t j = 0; j < out[1]; ++j)
          for (int64_t k = 0; k < out[2]; ++k) {
            auto at = [&](const std::vector<int64_t> &s, int64_t i, int64_t j, int64_t k) {
              return ((s[0] == 1 ? 0 : i) * s[1] + (s[1] == 1 ? 0 : j)) * s[2] + (s[2] == 1 ? 0 : k);
            };
            float expect = a[at(sa, i, j, k)] + b[at(sb, i, j, k)];
            ASSERT_EQ(y[(i * out[1] + j) * out[2] + k], expect) << mask << " " << drop;
          }
    }
}
