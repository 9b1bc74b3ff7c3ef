//===- ElementwiseMathTest.cpp - the elementwise CUDA kernels' arithmetic, on the host ===//
//
// Replays what kernels/cuda/Elementwise.cu does per element (load as the compute type, the
// ElementwiseMath.h functor, round once on store; broadcast offsets from planBroadcast's
// geometry) over whole tensors, and compares with the CPU kernels on the same inputs.
//
#include "kernels/cuda/ElementwiseMath.h"
#include "tests/unit/cuda/CudaTestUtil.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

using namespace cpc;
using namespace cpc::kernels;
using namespace cpc::kernels::cuda;
using namespace cpc::cudatest;

namespace {

//===----------------------------------------------------------------------===//
// The element types an op accepts, as host storage types (CudaTestUtil.h).
//===----------------------------------------------------------------------===//

enum : unsigned { kF = 1, kI = 2, kB = 4, kN = kF | kI, kA = 7 };

/// Calls f(S{}) with the host storage type of `t` when it is of the kinds K (the element types
/// an op accepts: the others are not instantiated).
template <unsigned K = kA, class F> void withStorage(DType t, F &&f) {
  switch (t) {
  case DType::F32: if constexpr ((K & kF) != 0) f(float{}); return;
  case DType::F64: if constexpr ((K & kF) != 0) f(double{}); return;
  case DType::F16: if constexpr ((K & kF) != 0) f(Half{}); return;
  case DType::BF16: if constexpr ((K & kF) != 0) f(BFloat{}); return;
  case DType::I64: if constexpr ((K & kI) != 0) f(int64_t{}); return;
  case DType::I32: if constexpr ((K & kI) != 0) f(int32_t{}); return;
  case DType::I16: if constexpr ((K & kI) != 0) f(int16_t{}); return;
  case DType::I8: if constexpr ((K & kI) != 0) f(int8_t{}); return;
  case DType::U8: if constexpr ((K & kI) != 0) f(uint8_t{}); return;
  case DType::I1: if constexpr ((K & kB) != 0) f(bool{}); return;
  }
}

/// `values` stored as type `t` (each converted as the CPU kernels' cast would, 16-bit rounded).
HostTensor tensorOf(DType t, std::vector<int64_t> shape, const std::vector<double> &values) {
  HostTensor h(t, std::move(shape));
  for (int64_t i = 0; i < h.numel(); ++i)
    h.setValue(i, values[i % values.size()]);
  return h;
}

/// Element-by-element comparison; floats within `ulps` units in the last place of their type
/// (NaN matches NaN), everything else exactly.
void expectSame(const HostTensor &want, const HostTensor &got, const std::string &what, int ulps = 0) {
  ASSERT_EQ(want.size(), got.size()) << what;
  int bad = 0;
  withStorage(want.dtype, [&](auto tag) {
    using S = decltype(tag);
    for (int64_t i = 0; i < want.numel(); ++i) {
      auto w = HostStorage<S>::load(want.load<S>(i)), g = HostStorage<S>::load(got.load<S>(i));
      bool ok;
      if constexpr (std::is_floating_point_v<decltype(w)>) {
        using C = decltype(w);
        double eps = std::is_same_v<S, Half> ? 0x1p-10 : std::is_same_v<S, BFloat> ? 0x1p-7 : std::numeric_limits<C>::epsilon();
        ok = (w != w && g != g) || w == g || std::fabs(double(w) - double(g)) <= ulps * eps * std::fabs(double(w));
      } else {
        ok = w == g;
      }
      if (!ok && bad++ < 5)
        ADD_FAILURE() << what << " element " << i << ": cpu " << double(w) << ", emulated " << double(g);
    }
  });
  EXPECT_EQ(bad, 0) << what;
}

/// The map kernel over a tensor: y[i] = store(op(load(x[i]))).
template <unsigned K, class Op> HostTensor emulateUnary(const HostTensor &in, Op op) {
  HostTensor out(in.dtype, in.shape);
  withStorage<K>(in.dtype, [&](auto tag) {
    using S = decltype(tag);
    for (int64_t i = 0; i < in.numel(); ++i)
      out.store(i, HostStorage<S>::store(op(HostStorage<S>::load(in.load<S>(i)))));
  });
  return out;
}

/// The broadcasting binary kernel: offsets from the geometry (32- or 64-bit indexing).
template <unsigned K, class Op, bool BoolResult = false>
HostTensor emulateBinary(const HostTensor &a, const HostTensor &b, std::vector<int64_t> outShape, Op op, bool narrow) {
  HostTensor out(BoolResult ? DType::I1 : a.dtype, outShape);
  BroadcastGeometry<2> g;
  std::string error;
  EXPECT_TRUE(planBroadcast<2>(outShape, {&a.shape, &b.shape}, g, &error)) << error;
  withStorage<K>(a.dtype, [&](auto tag) {
    using S = decltype(tag);
    {
      for (int64_t i = 0; i < out.numel(); ++i) {
        int64_t off[2];
        if (narrow) {
          uint32_t o32[2];
          g.offsets<uint32_t>(uint32_t(i), o32);
          off[0] = o32[0], off[1] = o32[1];
        } else {
          g.offsets<int64_t>(i, off);
        }
        auto r = op(HostStorage<S>::load(a.load<S>(off[0])), HostStorage<S>::load(b.load<S>(off[1])));
        if constexpr (BoolResult)
          out.store(i, bool(r));
        else
          out.store(i, HostStorage<S>::store(r));
      }
    }
  });
  return out;
}

const DType kFloats[] = {DType::F32, DType::F64, DType::F16, DType::BF16};
const DType kInts[] = {DType::I64, DType::I32, DType::I16, DType::I8, DType::U8};
const DType kAll[] = {DType::F32, DType::F64, DType::F16, DType::BF16, DType::I64,
                      DType::I32, DType::I16, DType::I8,  DType::U8,   DType::I1};

//===----------------------------------------------------------------------===//
// Unary.
//===----------------------------------------------------------------------===//

template <unsigned K, class Op>
void checkUnary(OpKind op, const std::vector<DType> &types, const std::vector<double> &values, Op fn,
                int ulps, const nlohmann::json &attrs = nlohmann::json::object()) {
  for (DType t : types) {
    HostTensor x = tensorOf(t, {3, 7, 11}, values), y(t, x.shape);
    runCpuKernel(op, {&x}, {&y}, attrs);
    expectSame(y, emulateUnary<K>(x, fn), std::string(opName(op)) + " " + dtypeName(t), ulps);
  }
}

// Tests the float unary functors over f32/f64/f16/bf16 against the CPU kernels (the same libm
// functions and the same erf polynomial on the host: within a couple of ulps, mostly exact).
TEST(ElementwiseMath, FloatUnaryOpsMatchCpuKernels) {
  std::vector<DType> floats(std::begin(kFloats), std::end(kFloats));
  auto wide = uniformValues<double>(257, 1, -6, 6), positive = uniformValues<double>(257, 2, 1e-3, 50);
  checkUnary<kF>(OpKind::Exp, floats, wide, ExpOp{}, 1);
  checkUnary<kF>(OpKind::Log, floats, positive, LogOp{}, 1);
  checkUnary<kF>(OpKind::Sqrt, floats, positive, SqrtOp{}, 0);
  checkUnary<kF>(OpKind::Rsqrt, floats, positive, RsqrtOp{}, 0);
  checkUnary<kF>(OpKind::Reciprocal, floats, wide, ReciprocalOp{}, 0);
  checkUnary<kF>(OpKind::Erf, floats, wide, ErfOp{}, 1);
  checkUnary<kF>(OpKind::Tanh, floats, wide, TanhOp{}, 1);
  checkUnary<kF>(OpKind::Sigmoid, floats, wide, SigmoidOp{}, 1);
  checkUnary<kF>(OpKind::Relu, floats, wide, ReluOp{}, 0);
  checkUnary<kF>(OpKind::Gelu, floats, wide, GeluErfOp{}, 1);
  checkUnary<kF>(OpKind::Gelu, floats, wide, GeluTanhOp{}, 1, {{"approximate", "tanh"}});
  checkUnary<kN>(OpKind::Neg, floats, wide, NegOp{}, 0);
  checkUnary<kN>(OpKind::Abs, floats, wide, AbsOp{}, 0);
}

// Tests neg/abs on every integer type (wrapping at the type's range: -(-128) is -128 in i8)
// and not on i1.
TEST(ElementwiseMath, IntegerAndBoolUnaryOpsMatchCpuKernels) {
  std::vector<DType> ints(std::begin(kInts), std::end(kInts));
  std::vector<double> values = {0, 1, -1, 7, -128, 127, 100, -100, 255, 32767, -32768, 123456};
  checkUnary<kN>(OpKind::Neg, ints, values, NegOp{}, 0);
  checkUnary<kN>(OpKind::Abs, ints, values, AbsOp{}, 0);
  checkUnary<kB>(OpKind::Not, {DType::I1}, {0, 1, 1, 0, 1}, NotOp{}, 0);
}

// Tests that NaN passes through relu and the NaN-aware max/min, and that the f32 erf
// polynomial saturates beyond |x| = 4 as the CPU's does.
TEST(ElementwiseMath, SpecialValues) {
  float nan = std::numeric_limits<float>::quiet_NaN();
  EXPECT_TRUE(std::isnan(ReluOp{}(nan)));
  EXPECT_EQ(ReluOp{}(-0.5f), 0.0f);
  EXPECT_TRUE(std::isnan(MaxOp{}(nan, 1.0f)));
  EXPECT_TRUE(std::isnan(MaxOp{}(1.0f, nan)));
  EXPECT_TRUE(std::isnan(MinOp{}(nan, 1.0f)));
  EXPECT_TRUE(std::isnan(MinOp{}(1.0f, nan)));
  EXPECT_EQ(ErfOp{}(9.0f), ErfOp{}(4.0f));
  EXPECT_NEAR(ErfOp{}(0.5f), std::erf(0.5), 5e-7);
  EXPECT_NEAR(fmath::fastExp(3.0f), std::exp(3.0), 1e-6 * std::exp(3.0));
  EXPECT_EQ(DivOp{}(int8_t(-128), int8_t(-1)), int8_t(-128)); // wraps instead of trapping
  EXPECT_EQ(DivOp{}(int32_t(7), int32_t(0)), 0);             // a zero divisor yields 0 on the GPU
  EXPECT_EQ(DivOp{}(int32_t(-7), int32_t(2)), -3);           // truncates toward zero
}

//===----------------------------------------------------------------------===//
// Cast.
//===----------------------------------------------------------------------===//

// Tests every pair of element types: truncation toward zero, wrapping through int64,
// `!= 0` to i1, 16-bit floats through f32 (rounded once), against the CPU kernel.
TEST(ElementwiseMath, CastMatchesCpuKernelForEveryPair) {
  std::vector<double> values = {0, 1, -1, 0.5, -0.5, 1.75, -2.75, 3.99, 100.5, -100.5, 127, 128, 255, 256, 300.7,
                                -300.7, 40000.25, -40000.25, 70000, 3e9, -3e9, 1e12, -1e12, 65504, 1e-3, 0.3333333};
  for (DType from : kAll) {
    for (DType to : kAll) {
      HostTensor x = tensorOf(from, {(int64_t)values.size()}, values), y(to, x.shape);
      runCpuKernel(OpKind::Cast, {&x}, {&y});
      HostTensor emulated(to, x.shape);
      withStorage(from, [&](auto fromTag) {
        withStorage(to, [&](auto toTag) {
          using F = decltype(fromTag);
          using T = decltype(toTag);
          CastOp<typename HostStorage<T>::C> op;
          for (int64_t i = 0; i < x.numel(); ++i)
            emulated.store(i, HostStorage<T>::store(op(HostStorage<F>::load(x.load<F>(i)))));
        });
      });
      expectSame(y, emulated, std::string("cast ") + dtypeName(from) + " -> " + dtypeName(to));
    }
  }
}

// Tests the x86 conversion the CPU kernel gets for NaN, infinities and values beyond int64:
// INT64_MIN, then wrapped to the narrower type.
TEST(ElementwiseMath, CastOfUnrepresentableFloatsIsX86s) {
  std::vector<double> values = {std::nan(""), INFINITY, -INFINITY, 1e19, -1e19, 9.3e18};
  for (DType from : {DType::F32, DType::F64})
    for (DType to : {DType::I64, DType::I32, DType::I8, DType::U8}) {
      HostTensor x = tensorOf(from, {(int64_t)values.size()}, values), y(to, x.shape);
      runCpuKernel(OpKind::Cast, {&x}, {&y});
      HostTensor emulated(to, x.shape);
      withStorage<kF>(from, [&](auto fromTag) {
        withStorage<kI>(to, [&](auto toTag) {
          using F = decltype(fromTag);
          using T = decltype(toTag);
          if constexpr (std::is_floating_point_v<F>)
            for (int64_t i = 0; i < x.numel(); ++i)
              emulated.store(i, CastOp<T>{}(x.load<F>(i)));
        });
      });
      expectSame(y, emulated, std::string("cast ") + dtypeName(from) + " -> " + dtypeName(to));
    }
}

//===----------------------------------------------------------------------===//
// Broadcasting.
//===----------------------------------------------------------------------===//

// Operand k's offset of each output element by numpy's rules, the slow way.
int64_t naiveOffset(const std::vector<int64_t> &out, const std::vector<int64_t> &in, int64_t index) {
  int64_t off = 0, stride = 1;
  size_t lead = out.size() - in.size();
  for (size_t d = out.size(); d-- > 0;) {
    int64_t at = index % out[d];
    index /= out[d];
    if (d >= lead) {
      int64_t dim = in[d - lead];
      off += (dim == 1 ? 0 : at) * stride;
      stride *= dim;
    }
  }
  return off;
}

struct BroadcastCase {
  std::vector<int64_t> out, a, b;
};

const std::vector<BroadcastCase> kBroadcastCases = {
    {{4, 5}, {4, 5}, {4, 5}},             // equal shapes: flat
    {{4, 5}, {4, 5}, {}},                 // scalar: flat
    {{4, 5}, {1}, {4, 5}},                //
    {{2, 3, 4}, {2, 3, 4}, {4}},          // bias
    {{2, 3, 4}, {3, 1}, {2, 1, 4}},       // both broadcast
    {{5, 1, 6}, {5, 1, 6}, {1, 1, 6}},    // size-1 output dim dropped
    {{2, 3, 4, 5}, {2, 1, 4, 1}, {3, 1, 5}},
    {{3, 1, 2, 1, 2, 1, 2, 1, 2, 3}, {3, 1, 2, 1, 1, 1, 2, 1, 2, 3}, {2, 1, 1, 1, 1, 1}},
    {{0, 3}, {0, 3}, {3}},                // empty
};

// Tests planBroadcast's geometry: every output element's operand offsets (in 32- and 64-bit
// index arithmetic) equal numpy's, and equal and scalar shapes collapse to one flat dim.
TEST(ElementwiseMath, BroadcastGeometryMapsOutputIndicesLikeNumpy) {
  for (const BroadcastCase &c : kBroadcastCases) {
    BroadcastGeometry<2> g;
    std::string error;
    ASSERT_TRUE(planBroadcast<2>(c.out, {&c.a, &c.b}, g, &error)) << error;
    for (int64_t i = 0; i < numElements(c.out); ++i) {
      int64_t off[2];
      uint32_t narrow[2];
      g.offsets<int64_t>(i, off);
      g.offsets<uint32_t>(uint32_t(i), narrow);
      ASSERT_EQ(off[0], naiveOffset(c.out, c.a, i)) << shapeString(c.out) << " element " << i;
      ASSERT_EQ(off[1], naiveOffset(c.out, c.b, i)) << shapeString(c.out) << " element " << i;
      ASSERT_EQ(narrow[0], off[0]);
      ASSERT_EQ(narrow[1], off[1]);
      if (g.flat()) {
        ASSERT_EQ(off[0], i * g.strides[0][0]);
        ASSERT_EQ(off[1], i * g.strides[0][1]);
      }
    }
  }
  BroadcastGeometry<2> g;
  std::string error;
  std::vector<int64_t> out = {4, 5}, same = {4, 5}, scalar = {}, bias = {5}, bad = {3}, high = {1, 4, 5};
  ASSERT_TRUE(planBroadcast<2>(out, {&same, &scalar}, g, &error));
  EXPECT_TRUE(g.flat());
  EXPECT_EQ(g.strides[0][0], 1);
  EXPECT_EQ(g.strides[0][1], 0);
  ASSERT_TRUE(planBroadcast<2>(out, {&same, &bias}, g, &error));
  EXPECT_EQ(g.rank, 2);
  EXPECT_FALSE(planBroadcast<2>(out, {&same, &bad}, g, &error));
  EXPECT_NE(error.find("does not broadcast"), std::string::npos);
  EXPECT_FALSE(planBroadcast<2>(out, {&high, &same}, g, &error));
  EXPECT_TRUE(fitsIndex32((int64_t(1) << 31) - 1));
  EXPECT_FALSE(fitsIndex32(int64_t(1) << 31));
}

template <unsigned K, class Op, bool BoolResult = false>
void checkBinary(OpKind op, const std::vector<DType> &types, const std::vector<double> &lhs,
                 const std::vector<double> &rhs, Op fn, int ulps) {
  for (DType t : types)
    for (const BroadcastCase &c : kBroadcastCases) {
      HostTensor a = tensorOf(t, c.a, lhs), b = tensorOf(t, c.b, rhs), y(BoolResult ? DType::I1 : t, c.out);
      runCpuKernel(op, {&a, &b}, {&y});
      std::string what = std::string(opName(op)) + " " + dtypeName(t) + " " + shapeString(c.out);
      expectSame(y, emulateBinary<K, Op, BoolResult>(a, b, c.out, fn, true), what, ulps);
      expectSame(y, emulateBinary<K, Op, BoolResult>(a, b, c.out, fn, false), what, ulps);
    }
}

// Tests the arithmetic binary ops with broadcasting on every type they accept.
TEST(ElementwiseMath, BinaryOpsMatchCpuKernels) {
  std::vector<DType> nums(std::begin(kFloats), std::end(kFloats));
  nums.insert(nums.end(), std::begin(kInts), std::end(kInts));
  std::vector<DType> floats(std::begin(kFloats), std::end(kFloats));
  auto lhs = uniformValues<double>(97, 3, -50, 50), rhs = uniformValues<double>(89, 4, 1, 9); // nonzero divisors
  for (double &v : rhs)
    v = std::floor(v) * (v > 5 ? -1 : 1);
  checkBinary<kN>(OpKind::Add, nums, lhs, rhs, AddOp{}, 0);
  checkBinary<kN>(OpKind::Sub, nums, lhs, rhs, SubOp{}, 0);
  checkBinary<kN>(OpKind::Mul, nums, lhs, rhs, MulOp{}, 0);
  checkBinary<kN>(OpKind::Div, nums, lhs, rhs, DivOp{}, 0);
  auto base = uniformValues<double>(97, 5, 0.1, 4);
  std::vector<double> exps = {2.0, 0.5, -1.5, 3.0, 2.0};
  checkBinary<kF>(OpKind::Pow, floats, base, exps, PowOp{}, 1);
  std::vector<DType> all(std::begin(kAll), std::end(kAll));
  std::vector<double> nanny = {1, std::nan(""), -3, 4, 0, 5};
  checkBinary<kF>(OpKind::Max, floats, nanny, lhs, MaxOp{}, 0);
  checkBinary<kF>(OpKind::Min, floats, lhs, nanny, MinOp{}, 0);
  checkBinary<kA>(OpKind::Max, all, lhs, rhs, MaxOp{}, 0);
  checkBinary<kA>(OpKind::Min, all, lhs, rhs, MinOp{}, 0);
}

// Tests the compare ops (i1 results) on every type, with ties, and and/or on i1.
TEST(ElementwiseMath, CompareAndLogicalOpsMatchCpuKernels) {
  std::vector<DType> all(std::begin(kAll), std::end(kAll));
  std::vector<double> lhs = {1, 2, 3, 4, 5, 6, 7}, rhs = {3, 2, 1, 4, 9};
  checkBinary<kA, EqualOp, true>(OpKind::Equal, all, lhs, rhs, EqualOp{}, 0);
  checkBinary<kA, LessOp, true>(OpKind::Less, all, lhs, rhs, LessOp{}, 0);
  checkBinary<kA, LessEqualOp, true>(OpKind::LessEqual, all, lhs, rhs, LessEqualOp{}, 0);
  checkBinary<kA, GreaterOp, true>(OpKind::Greater, all, lhs, rhs, GreaterOp{}, 0);
  checkBinary<kA, GreaterEqualOp, true>(OpKind::GreaterEqual, all, lhs, rhs, GreaterEqualOp{}, 0);
  std::vector<double> p = {0, 1, 1, 0, 1, 0, 0}, q = {1, 1, 0, 0, 1};
  checkBinary<kB, AndOp, true>(OpKind::And, {DType::I1}, p, q, AndOp{}, 0);
  checkBinary<kB, OrOp, true>(OpKind::Or, {DType::I1}, p, q, OrOp{}, 0);
}

// Tests gelu_grad = grad * gelu'(x) in both forms (the CPU's fastExp and erf polynomial).
TEST(ElementwiseMath, GeluGradMatchesCpuKernel) {
  auto xs = uniformValues<double>(301, 6, -6, 6), gs = uniformValues<double>(301, 7, -2, 2);
  for (bool tanh : {false, true})
    for (DType t : kFloats) {
      HostTensor x = tensorOf(t, {7, 43}, xs), g = tensorOf(t, {7, 43}, gs), y(t, x.shape);
      nlohmann::json attrs = nlohmann::json::object();
      if (tanh)
        attrs["approximate"] = "tanh";
      runCpuKernel(OpKind::GeluGrad, {&x, &g}, {&y}, attrs);
      HostTensor emulated = tanh ? emulateBinary<kF>(x, g, x.shape, GeluTanhGradOp{}, true)
                                 : emulateBinary<kF>(x, g, x.shape, GeluErfGradOp{}, true);
      expectSame(y, emulated, std::string("gelu_grad ") + dtypeName(t) + (tanh ? " tanh" : ""), 2);
    }
}

// Tests where with a broadcasting condition and branches, on every type.
TEST(ElementwiseMath, WhereMatchesCpuKernel) {
  std::vector<int64_t> out = {2, 3, 4}, condShape = {3, 1}, xShape = {2, 3, 4}, yShape = {4};
  BroadcastGeometry<3> g;
  std::string error;
  ASSERT_TRUE(planBroadcast<3>(out, {&condShape, &xShape, &yShape}, g, &error)) << error;
  for (DType t : kAll) {
    HostTensor c = tensorOf(DType::I1, condShape, {1, 0, 1}), x = tensorOf(t, xShape, uniformValues<double>(24, 8, -9, 9));
    HostTensor y = tensorOf(t, yShape, {5, 6, 7, 8}), o(t, out);
    runCpuKernel(OpKind::Where, {&c, &x, &y}, {&o});
    HostTensor emulated(t, out);
    size_t size = dtypeSize(t);
    for (int64_t i = 0; i < emulated.numel(); ++i) {
      int64_t off[3];
      g.offsets<int64_t>(i, off);
      const HostTensor &from = c.load<bool>(off[0]) ? x : y;
      std::memcpy(emulated.data() + i * size, from.data() + off[c.load<bool>(off[0]) ? 1 : 2] * size, size);
    }
    expectSame(o, emulated, std::string("where ") + dtypeName(t));
  }
}

} // namespace
