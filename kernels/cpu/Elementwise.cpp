//===- Elementwise.cpp - unary, binary, where and cast kernels -------------===//
//
// Every kernel is one template instantiated per element type through `dispatch`. Binary
// ops and where share one broadcast driver: operand strides are collapsed so that equal
// shapes and scalar operands become a single contiguous row (the fast paths), and general
// broadcasts walk rows of the innermost collapsed dim. Outputs may alias a same-shaped
// input: every element is read before its own position is written and nothing else is.
//
#include "kernels/Checks.h"
#include "kernels/Float16.h"
#include "kernels/cpu/FastMath.h"
#include "kernels/cpu/Dispatch.h"
#include "kernels/cpu/Kernel.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>

namespace cpc::kernels {
namespace {

// Splits [0, n) into one contiguous range per thread; small loops stay serial.
template <typename F> void parallelRanges(const KernelContext &ctx, int64_t n, F &&body) {
  int threads = std::max(1, ctx.threads);
  int64_t chunks = n > kParallelMin ? threads : 1;
#pragma omp parallel for num_threads(threads) if (chunks > 1)
  for (int64_t c = 0; c < chunks; ++c)
    body(n * c / chunks, n * (c + 1) / chunks);
}

//===----------------------------------------------------------------------===//
// Unary.
//===----------------------------------------------------------------------===//

struct Neg { template <class T> T operator()(T x) const { return T(-x); } };
struct Abs {
  template <class T> T operator()(T x) const {
    if constexpr (std::is_floating_point_v<T>) return std::abs(x);
    else if constexpr (std::is_signed_v<T>) return x < 0 ? T(-x) : x;
    else return x;
  }
};
struct Exp { template <class T> T operator()(T x) const { return std::exp(x); } };
struct Log { template <class T> T operator()(T x) const { return std::log(x); } };
struct Sqrt { template <class T> T operator()(T x) const { return std::sqrt(x); } };
struct Rsqrt { template <class T> T operator()(T x) const { return T(1) / std::sqrt(x); } };
struct Reciprocal { template <class T> T operator()(T x) const { return T(1) / x; } };
struct Erf { template <class T> T operator()(T x) const { return fastErf(x); } };
struct Sin { template <class T> T operator()(T x) const { return std::sin(x); } };
struct Cos { template <class T> T operator()(T x) const { return std::cos(x); } };
struct Tanh { template <class T> T operator()(T x) const { return std::tanh(x); } };
struct Sigmoid { template <class T> T operator()(T x) const { return T(1) / (T(1) + std::exp(-x)); } };
// Written so that NaN passes through, as max(x, 0) does in numpy.
struct Relu { template <class T> T operator()(T x) const { return x < T(0) ? T(0) : x; } };
struct Not { bool operator()(bool x) const { return !x; } };
struct GeluErf {
  template <class T> T operator()(T x) const {
    return x * T(0.5) * (T(1) + fastErf(x * T(0.70710678118654752440)));
  }
};
struct GeluTanh {
  template <class T> T operator()(T x) const {
    const T k = T(0.79788456080286535588); // sqrt(2/pi)
    return T(0.5) * x * (T(1) + std::tanh(k * (x + T(0.044715) * x * x * x)));
  }
};

template <typename T, typename R, typename Op>
void mapUnary(const KernelContext &ctx, const TensorRef &in, const TensorRef &out, Op op) {
  const T *x = in.as<T>();
  R *y = out.as<R>();
  parallelRanges(ctx, in.numel(), [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i)
      y[i] = op(x[i]);
  });
}

template <unsigned K, typename Op> void unaryKernel(KernelContext &ctx) {
  checkArity(ctx, 1, 1);
  const TensorRef &in = ctx.inputs[0];
  dispatch<K>(ctx, in.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    checkOutput(ctx, in.dtype, &in.shape);
    mapUnary<T, T>(ctx, in, ctx.outputs[0], Op{});
  });
}

void geluKernel(KernelContext &ctx) {
  if (ctx.attrs.approximate == GeluApproximation::Tanh)
    unaryKernel<kFloat, GeluTanh>(ctx);
  else
    unaryKernel<kFloat, GeluErf>(ctx);
}

/// Float to int64 as x86's cvttsd2si does (and numpy with it): truncation toward zero, and
/// INT64_MIN for NaN and values outside the range (a plain conversion of those is undefined).
template <class From> int64_t truncateToInt64(From x) {
  constexpr From limit = From(9223372036854775808.0); // 2^63
  return x >= -limit && x < limit ? static_cast<int64_t>(x) : INT64_MIN;
}

// Float to integer truncates toward zero; to narrower ints it goes through int64 so that
// out-of-range values wrap (as numpy does on x86) instead of being undefined.
template <typename To> struct CastTo {
  template <class From> To operator()(From x) const {
    if constexpr (std::is_same_v<To, bool>) return x != From(0);
    else if constexpr (std::is_floating_point_v<From> && std::is_integral_v<To>)
      return To(truncateToInt64(x));
    else return static_cast<To>(x);
  }
};

void castKernel(KernelContext &ctx);

// f32 <-> f16/bf16 converts directly (the per-step parameter casts of mixed precision); a cast
// between a 16-bit float and any other type goes through f32.
void castKernel16(KernelContext &ctx) {
  checkCast(ctx);
  const TensorRef &in = ctx.inputs[0], &out = ctx.outputs[0];
  if (in.dtype == DType::F32 && is16BitFloat(out.dtype)) {
    if (in.data == out.data) // narrowing front to back on one thread never overwrites unread input
      return narrowFromFloat(out.dtype, in.as<float>(), out.data, in.numel());
    parallelRanges(ctx, in.numel(), [&](int64_t begin, int64_t end) {
      narrowFromFloat(out.dtype, in.as<float>() + begin, out.as<uint16_t>() + begin, end - begin);
    });
  } else if (is16BitFloat(in.dtype) && out.dtype == DType::F32) {
    if (in.data == out.data)
      ctx.fail("cannot cast to a wider element type in place");
    parallelRanges(ctx, in.numel(), [&](int64_t begin, int64_t end) {
      widenToFloat(in.dtype, in.as<uint16_t>() + begin, out.as<float>() + begin, end - begin);
    });
  } else if (is16BitFloat(in.dtype) || is16BitFloat(out.dtype)) {
    runWidened(castKernel, ctx);
  } else {
    castKernel(ctx);
  }
}

void castKernel(KernelContext &ctx) {
  checkCast(ctx);
  const TensorRef &in = ctx.inputs[0], &out = ctx.outputs[0];
  if (in.dtype == out.dtype) {
    if (in.data != out.data)
      std::memmove(out.data, in.data, in.bytes());
    return;
  }
  dispatch<kAny>(ctx, in.dtype, [&](auto from) {
    dispatch<kAny>(ctx, out.dtype, [&](auto to) {
      using F = typename decltype(from)::type;
      using T = typename decltype(to)::type;
      if (in.data == out.data && sizeof(T) != sizeof(F)) {
        // In place, a widening cast would overwrite unread input; a narrowing one is safe
        // only front to back on one thread.
        if (sizeof(T) > sizeof(F))
          ctx.fail("cannot cast in place to a wider element type");
        KernelContext serial = ctx;
        serial.threads = 1;
        mapUnary<F, T>(serial, in, out, CastTo<T>{});
        return;
      }
      mapUnary<F, T>(ctx, in, out, CastTo<T>{});
    });
  });
}

//===----------------------------------------------------------------------===//
// Broadcasting driver.
//===----------------------------------------------------------------------===//

// The collapsed dims and operand strides are checkBroadcastOperands' (kernels/Checks.h).

// Calls row(outOffset, operandOffsets, length) over runs along the innermost dim. Each
// thread takes a contiguous element range and steps a multi-index through it.
template <size_t N, typename RowFn>
void forEachRow(const KernelContext &ctx, const BroadcastPlan<N> &p, RowFn &&row) {
  int64_t rank = (int64_t)p.shape.size(), inner = p.shape.back();
  const auto &innerStride = p.strides.back();
  parallelRanges(ctx, numElements(p.shape), [&](int64_t begin, int64_t end) {
    if (begin >= end)
      return;
    std::vector<int64_t> idx(rank);
    std::array<int64_t, N> off{};
    for (int64_t d = rank - 1, rem = begin; d >= 0; --d) {
      idx[d] = rem % p.shape[d];
      rem /= p.shape[d];
      for (size_t k = 0; k < N; ++k)
        off[k] += idx[d] * p.strides[d][k];
    }
    for (int64_t e = begin; e < end;) {
      int64_t len = std::min(inner - idx[rank - 1], end - e);
      row(e, off, len);
      e += len;
      idx[rank - 1] += len;
      for (size_t k = 0; k < N; ++k)
        off[k] += len * innerStride[k];
      for (int64_t d = rank - 1; d > 0 && idx[d] == p.shape[d]; --d) {
        idx[d] = 0;
        ++idx[d - 1];
        for (size_t k = 0; k < N; ++k)
          off[k] += p.strides[d - 1][k] - p.shape[d] * p.strides[d][k];
      }
    }
  });
}

// One run of a binary op, specialized on which operands advance so each loop vectorizes.
template <typename T, typename R, typename Op>
inline void binaryRow(const T *a, bool aStep, const T *b, bool bStep, R *o, int64_t n, Op op) {
  if (aStep && bStep) {
    for (int64_t j = 0; j < n; ++j)
      o[j] = op(a[j], b[j]);
  } else if (aStep) {
    const T y = *b;
    for (int64_t j = 0; j < n; ++j)
      o[j] = op(a[j], y);
  } else if (bStep) {
    const T x = *a;
    for (int64_t j = 0; j < n; ++j)
      o[j] = op(x, b[j]);
  } else {
    const R v = op(*a, *b);
    std::fill(o, o + n, v);
  }
}

template <typename T, typename R, typename Op> void runBinary(KernelContext &ctx, Op op) {
  const TensorRef &lhs = ctx.inputs[0], &rhs = ctx.inputs[1], &out = ctx.outputs[0];
  if (out.numel() == 0)
    return;
  BroadcastPlan<2> plan = checkBroadcastOperands<2>(ctx, {&lhs.shape, &rhs.shape});
  const T *a = lhs.as<T>(), *b = rhs.as<T>();
  R *o = out.as<R>();
  const auto &step = plan.strides.back();
  forEachRow(ctx, plan, [&](int64_t e, const std::array<int64_t, 2> &off, int64_t n) {
    binaryRow(a + off[0], step[0] != 0, b + off[1], step[1] != 0, o + e, n, op);
  });
}

struct Add { template <class T> T operator()(T a, T b) const { return T(a + b); } };
struct Sub { template <class T> T operator()(T a, T b) const { return T(a - b); } };
struct Mul { template <class T> T operator()(T a, T b) const { return T(a * b); } };
struct Div {
  template <class T> T operator()(T a, T b) const {
    // MIN / -1 traps on x86; negate through unsigned to wrap like numpy instead.
    if constexpr (std::is_integral_v<T> && std::is_signed_v<T>)
      if (b == T(-1))
        return T(0 - static_cast<std::make_unsigned_t<T>>(a));
    return T(a / b);
  }
};
// Squares (the norm_pix variance, the MSE) are most of the pows in training graphs: skip powf.
struct Pow { template <class T> T operator()(T a, T b) const { return b == T(2) ? a * a : std::pow(a, b); } };
// A NaN in either operand wins, like numpy.maximum / numpy.minimum.
struct Max { template <class T> T operator()(T a, T b) const { return (a > b || a != a) ? a : b; } };
struct Min { template <class T> T operator()(T a, T b) const { return (a < b || a != a) ? a : b; } };
struct Equal { template <class T> bool operator()(T a, T b) const { return a == b; } };
struct Less { template <class T> bool operator()(T a, T b) const { return a < b; } };
struct LessEqual { template <class T> bool operator()(T a, T b) const { return a <= b; } };
struct Greater { template <class T> bool operator()(T a, T b) const { return a > b; } };
struct GreaterEqual { template <class T> bool operator()(T a, T b) const { return a >= b; } };
struct And { bool operator()(bool a, bool b) const { return a && b; } };
struct Or { bool operator()(bool a, bool b) const { return a || b; } };

template <unsigned K, typename Op, bool BoolResult = false> void binaryKernel(KernelContext &ctx) {
  checkBinary(ctx);
  const TensorRef &lhs = ctx.inputs[0], &rhs = ctx.inputs[1];
  dispatch<K>(ctx, lhs.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    using R = std::conditional_t<BoolResult, bool, T>;
    checkOutput(ctx, BoolResult ? DType::I1 : lhs.dtype, nullptr);
    if constexpr (std::is_same_v<Op, Div> && std::is_integral_v<T>) {
      // Checked up front: a kernel cannot throw from inside a parallel region.
      const T *b = rhs.as<T>();
      if (std::any_of(b, b + rhs.numel(), [](T v) { return v == T(0); }))
        ctx.fail("integer division by zero");
    }
    runBinary<T, R>(ctx, Op{});
  });
}

void whereKernel(KernelContext &ctx) {
  checkWhere(ctx);
  const TensorRef &cond = ctx.inputs[0], &x = ctx.inputs[1], &y = ctx.inputs[2];
  const TensorRef &out = ctx.outputs[0];
  dispatch<kAny>(ctx, x.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    checkOutput(ctx, x.dtype, nullptr);
    if (out.numel() == 0)
      return;
    BroadcastPlan<3> plan = checkBroadcastOperands<3>(ctx, {&cond.shape, &x.shape, &y.shape});
    const bool *c = cond.as<bool>();
    const T *a = x.as<T>(), *b = y.as<T>();
    T *o = out.as<T>();
    const auto &s = plan.strides.back();
    forEachRow(ctx, plan, [&](int64_t e, const std::array<int64_t, 3> &off, int64_t n) {
      const bool *cr = c + off[0];
      const T *ar = a + off[1], *br = b + off[2];
      T *orow = o + e;
      for (int64_t j = 0; j < n; ++j)
        orow[j] = cr[j * s[0]] ? ar[j * s[1]] : br[j * s[2]];
    });
  });
}

} // namespace

void registerElementwiseKernels(KernelRegistry &r) {
  r.add(OpKind::Neg, unaryKernel<kNum, Neg>, Storage16::Elementwise);
  r.add(OpKind::Abs, unaryKernel<kNum, Abs>, Storage16::Elementwise);
  r.add(OpKind::Exp, unaryKernel<kFloat, Exp>, Storage16::Elementwise);
  r.add(OpKind::Log, unaryKernel<kFloat, Log>, Storage16::Elementwise);
  r.add(OpKind::Sqrt, unaryKernel<kFloat, Sqrt>, Storage16::Elementwise);
  r.add(OpKind::Rsqrt, unaryKernel<kFloat, Rsqrt>, Storage16::Elementwise);
  r.add(OpKind::Reciprocal, unaryKernel<kFloat, Reciprocal>, Storage16::Elementwise);
  r.add(OpKind::Erf, unaryKernel<kFloat, Erf>, Storage16::Elementwise);
  r.add(OpKind::Tanh, unaryKernel<kFloat, Tanh>, Storage16::Elementwise);
  r.add(OpKind::Sin, unaryKernel<kFloat, Sin>, Storage16::Elementwise);
  r.add(OpKind::Cos, unaryKernel<kFloat, Cos>, Storage16::Elementwise);
  r.add(OpKind::Sigmoid, unaryKernel<kFloat, Sigmoid>, Storage16::Elementwise);
  r.add(OpKind::Relu, unaryKernel<kFloat, Relu>, Storage16::Elementwise);
  r.add(OpKind::Not, unaryKernel<kBool, Not>, Storage16::Elementwise);
  r.add(OpKind::Gelu, geluKernel, Storage16::Elementwise);
  r.add(OpKind::Cast, castKernel16, Storage16::Native);
  r.add(OpKind::Add, binaryKernel<kNum, Add>, Storage16::Elementwise);
  r.add(OpKind::Sub, binaryKernel<kNum, Sub>, Storage16::Elementwise);
  r.add(OpKind::Mul, binaryKernel<kNum, Mul>, Storage16::Elementwise);
  r.add(OpKind::Div, binaryKernel<kNum, Div>, Storage16::Elementwise);
  r.add(OpKind::Pow, binaryKernel<kFloat, Pow>, Storage16::Elementwise);
  r.add(OpKind::Max, binaryKernel<kAny, Max>, Storage16::Elementwise);
  r.add(OpKind::Min, binaryKernel<kAny, Min>, Storage16::Elementwise);
  r.add(OpKind::Equal, binaryKernel<kAny, Equal, true>, Storage16::Elementwise);
  r.add(OpKind::Less, binaryKernel<kAny, Less, true>, Storage16::Elementwise);
  r.add(OpKind::LessEqual, binaryKernel<kAny, LessEqual, true>, Storage16::Elementwise);
  r.add(OpKind::Greater, binaryKernel<kAny, Greater, true>, Storage16::Elementwise);
  r.add(OpKind::GreaterEqual, binaryKernel<kAny, GreaterEqual, true>, Storage16::Elementwise);
  r.add(OpKind::And, binaryKernel<kBool, And, true>, Storage16::Elementwise);
  r.add(OpKind::Or, binaryKernel<kBool, Or, true>, Storage16::Elementwise);
  r.add(OpKind::Where, whereKernel, Storage16::Elementwise);
}

} // namespace cpc::kernels
