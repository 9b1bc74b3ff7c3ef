//===- ElementwiseMath.h - per-element arithmetic of the elementwise CUDA kernels ===//
//
// The functors of the unary, binary, compare, where, cast and gelu(_grad) kernels, written once
// for the GPU and the host (CPC_HD) so that tests/unit/cuda/ElementwiseMathTest.cpp checks them
// against the CPU kernels (kernels/cpu/Elementwise.cpp, Backward.cpp) without a GPU. They take
// and return the compute type: f16/bf16 are loaded as f32 by the kernels and rounded once on
// store, as the CPU kernels' widening does. Also the broadcast geometry: output index ->
// operand offsets, the dims collapsed exactly as the CPU driver collapses them.
//
#ifndef CPC_KERNELS_CUDA_ELEMENTWISEMATH_H
#define CPC_KERNELS_CUDA_ELEMENTWISEMATH_H

#include "kernels/Checks.h"
#include "kernels/KernelFault.h"
#include "kernels/cpu/FastMath.h"
#include "kernels/cuda/HostDevice.h"
#include "kernels/cuda/Launch.h"

#include <array>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

namespace cpc::kernels::cuda {

//===----------------------------------------------------------------------===//
// Math functions by overload (the C names exist on the device and on the host).
//===----------------------------------------------------------------------===//

namespace fmath {
CPC_HD float exp(float x) { return ::expf(x); }
CPC_HD double exp(double x) { return ::exp(x); }
CPC_HD float log(float x) { return ::logf(x); }
CPC_HD double log(double x) { return ::log(x); }
CPC_HD float sqrt(float x) { return ::sqrtf(x); }
CPC_HD double sqrt(double x) { return ::sqrt(x); }
CPC_HD float tanh(float x) { return ::tanhf(x); }
CPC_HD double tanh(double x) { return ::tanh(x); }
CPC_HD float sin(float x) { return ::sinf(x); }
CPC_HD double sin(double x) { return ::sin(x); }
CPC_HD float cos(float x) { return ::cosf(x); }
CPC_HD double cos(double x) { return ::cos(x); }
CPC_HD float pow(float a, float b) { return ::powf(a, b); }
CPC_HD double pow(double a, double b) { return ::pow(a, b); }
CPC_HD float abs(float x) { return ::fabsf(x); }
CPC_HD double abs(double x) { return ::fabs(x); }

// mulRn, addRn, subRn, divRn, sqrtRn: HostDevice.h.

/// The CPU kernels' f32 erf and exp (kernels/cpu/FastMath.h, one definition for both devices),
/// so that erf, GELU and its gradient agree with them to rounding; f64 uses the library's.
CPC_HD float erf(float x) { return fastErf(x); }
CPC_HD double erf(double x) { return ::erf(x); }

CPC_HD float fastExp(float x) { return ::cpc::kernels::fastExp(x); }
CPC_HD double fastExp(double x) { return ::exp(x); }
} // namespace fmath

//===----------------------------------------------------------------------===//
// Unary.
//===----------------------------------------------------------------------===//

struct NegOp { template <class T> CPC_HD T operator()(T x) const { return T(-x); } };
struct AbsOp {
  template <class T> CPC_HD T operator()(T x) const {
    if constexpr (std::is_floating_point_v<T>) return fmath::abs(x);
    else if constexpr (std::is_signed_v<T>) return x < 0 ? T(-x) : x;
    else return x;
  }
};
struct ExpOp { template <class T> CPC_HD T operator()(T x) const { return fmath::exp(x); } };
struct LogOp { template <class T> CPC_HD T operator()(T x) const { return fmath::log(x); } };
struct SqrtOp { template <class T> CPC_HD T operator()(T x) const { return fmath::sqrt(x); } };
struct RsqrtOp { template <class T> CPC_HD T operator()(T x) const { return T(1) / fmath::sqrt(x); } };
struct ReciprocalOp { template <class T> CPC_HD T operator()(T x) const { return T(1) / x; } };
struct ErfOp { template <class T> CPC_HD T operator()(T x) const { return fmath::erf(x); } };
struct SinOp { template <class T> CPC_HD T operator()(T x) const { return fmath::sin(x); } };
struct CosOp { template <class T> CPC_HD T operator()(T x) const { return fmath::cos(x); } };
struct TanhOp { template <class T> CPC_HD T operator()(T x) const { return fmath::tanh(x); } };
struct SigmoidOp { template <class T> CPC_HD T operator()(T x) const { return T(1) / (T(1) + fmath::exp(-x)); } };
// x < 0 ? 0 : x, so that NaN passes through as in the CPU kernel.
struct ReluOp { template <class T> CPC_HD T operator()(T x) const { return x < T(0) ? T(0) : x; } };
struct NotOp { CPC_HD bool operator()(bool x) const { return !x; } };
struct GeluErfOp {
  template <class T> CPC_HD T operator()(T x) const {
    return x * T(0.5) * (T(1) + fmath::erf(x * T(0.70710678118654752440)));
  }
};
struct GeluTanhOp {
  template <class T> CPC_HD T operator()(T x) const {
    const T k = T(0.79788456080286535588); // sqrt(2/pi)
    return T(0.5) * x * (T(1) + fmath::tanh(k * (x + T(0.044715) * x * x * x)));
  }
};

// gelu_grad(x, g) = g * gelu'(x), as kernels/cpu/Backward.cpp writes the derivatives.
struct GeluErfGradOp {
  template <class T> CPC_HD T operator()(T x, T g) const {
    const T invSqrt2 = T(0.70710678118654752440), invSqrt2Pi = T(0.39894228040143267794);
    T cdf = T(0.5) * (T(1) + fmath::erf(x * invSqrt2));
    return g * (cdf + x * invSqrt2Pi * fmath::fastExp(T(-0.5) * x * x));
  }
};
struct GeluTanhGradOp {
  template <class T> CPC_HD T operator()(T x, T g) const {
    const T k = T(0.79788456080286535588), c = T(0.044715);
    T x2 = x * x, t = fmath::tanh(k * (x + c * x2 * x));
    return g * (T(0.5) * (T(1) + t) + T(0.5) * x * (T(1) - t * t) * k * (T(1) + T(3) * c * x2));
  }
};

//===----------------------------------------------------------------------===//
// Cast.
//===----------------------------------------------------------------------===//

/// Float to int64 as x86's cvtts*2si does (the CPU kernel's behaviour): truncation toward zero,
/// and the "integer indefinite" INT64_MIN for NaN and out-of-range values (CUDA would saturate).
template <class F> CPC_HD int64_t truncToInt64(F x) {
  const F limit = F(9223372036854775808.0); // 2^63
  if (!(x >= -limit && x < limit))
    return INT64_MIN;
  return static_cast<int64_t>(x);
}

/// The CPU kernel's cast of one value: to bool is `!= 0`; float to an integer truncates toward
/// zero, through int64 to the narrower ints so that out-of-range values wrap; the rest is C++'s
/// conversion. 16-bit floats take part as f32 (To or From is then float), as in the CPU kernel.
template <class To> struct CastOp {
  template <class From> CPC_HD To operator()(From x) const {
    if constexpr (std::is_same_v<To, bool>) return x != From(0);
    else if constexpr (std::is_floating_point_v<From> && std::is_integral_v<To>) return To(truncToInt64(x));
    else return static_cast<To>(x);
  }
};

//===----------------------------------------------------------------------===//
// Binary, compare, logical.
//===----------------------------------------------------------------------===//

struct AddOp { template <class T> CPC_HD T operator()(T a, T b) const { return T(a + b); } };
struct SubOp { template <class T> CPC_HD T operator()(T a, T b) const { return T(a - b); } };
struct MulOp { template <class T> CPC_HD T operator()(T a, T b) const { return T(a * b); } };
struct DivOp {
  FaultSink fault; // where an integer division by zero is reported
  template <class T> CPC_HD T operator()(T a, T b) const {
    if constexpr (std::is_integral_v<T>) {
      // The CPU kernel rejects a zero divisor up front; a kernel records the fault for the host
      // (which then fails the step) and yields 0.
      if (b == T(0)) {
        fault.report(FaultKind::IntegerDivisionByZero);
        return T(0);
      }
      // MIN / -1 overflows: negate through unsigned, which wraps as the CPU kernel does.
      if constexpr (std::is_signed_v<T>)
        if (b == T(-1))
          return T(0 - static_cast<std::make_unsigned_t<T>>(a));
    }
    return T(a / b);
  }
};
struct PowOp { template <class T> CPC_HD T operator()(T a, T b) const { return b == T(2) ? a * a : fmath::pow(a, b); } };
// NaN in either operand wins, as in the CPU kernel (numpy.maximum / minimum).
struct MaxOp { template <class T> CPC_HD T operator()(T a, T b) const { return (a > b || a != a) ? a : b; } };
struct MinOp { template <class T> CPC_HD T operator()(T a, T b) const { return (a < b || a != a) ? a : b; } };
struct EqualOp { template <class T> CPC_HD bool operator()(T a, T b) const { return a == b; } };
struct LessOp { template <class T> CPC_HD bool operator()(T a, T b) const { return a < b; } };
struct LessEqualOp { template <class T> CPC_HD bool operator()(T a, T b) const { return a <= b; } };
struct GreaterOp { template <class T> CPC_HD bool operator()(T a, T b) const { return a > b; } };
struct GreaterEqualOp { template <class T> CPC_HD bool operator()(T a, T b) const { return a >= b; } };
struct AndOp { CPC_HD bool operator()(bool a, bool b) const { return a && b; } };
struct OrOp { CPC_HD bool operator()(bool a, bool b) const { return a || b; } };

//===----------------------------------------------------------------------===//
// Broadcasting.
//===----------------------------------------------------------------------===//

constexpr int kMaxBroadcastRank = 8;

/// The output's dims after collapsing, with each of N operands' element strides (0 where it
/// broadcasts): passed to a kernel by value.
template <int N> struct BroadcastGeometry {
  int rank = 0;
  int64_t shape[kMaxBroadcastRank] = {};
  int64_t strides[kMaxBroadcastRank][N] = {};

  /// A single dim: operand offsets are index * stride, no division.
  bool flat() const { return rank == 1; }
  /// The N operands' offsets of output element `index`, in one pass over the dims; I is
  /// int64_t, or uint32_t when every index fits (32-bit divisions are several times cheaper on
  /// the GPU).
  template <class I> CPC_HD void offsets(I index, I (&off)[N]) const {
    for (int k = 0; k < N; ++k)
      off[k] = 0;
    for (int d = rank - 1; d > 0; --d) {
      I dim = I(shape[d]), q = index / dim, at = index - q * dim;
      for (int k = 0; k < N; ++k)
        off[k] += at * I(strides[d][k]);
      index = q;
    }
    for (int k = 0; k < N; ++k)
      off[k] += index * I(strides[0][k]);
  }
};

/// The geometry of N operands broadcast to `out`, collapsed as the CPU kernels collapse it
/// (collapseBroadcast, kernels/Checks.h). False with `error` set when an operand does not
/// broadcast (the CPU kernels' message) or more than kMaxBroadcastRank dims remain.
template <int N>
bool planBroadcast(const std::vector<int64_t> &out, const std::array<const std::vector<int64_t> *, N> &ins,
                   BroadcastGeometry<N> &geometry, std::string *error) {
  BroadcastPlan<N> plan;
  if (!collapseBroadcast<N>(out, ins, plan, error))
    return false;
  if (plan.shape.size() > (size_t)kMaxBroadcastRank) {
    *error = "broadcast of " + shapeString(out) + " has " + std::to_string(plan.shape.size()) +
             " dims after collapsing, more than the " + std::to_string(kMaxBroadcastRank) + " supported";
    return false;
  }
  geometry = BroadcastGeometry<N>{};
  geometry.rank = (int)plan.shape.size();
  for (size_t d = 0; d < plan.shape.size(); ++d) {
    geometry.shape[d] = plan.shape[d];
    for (int k = 0; k < N; ++k)
      geometry.strides[d][k] = plan.strides[d][k];
  }
  return true;
}

} // namespace cpc::kernels::cuda

#endif
