//===- Dispatch.h - calling a kernel template for a runtime element type ---===//
#ifndef CPC_KERNELS_CPU_DISPATCH_H
#define CPC_KERNELS_CPU_DISPATCH_H

#include "kernels/cpu/Kernel.h"

#include <cstdint>
#include <string>

namespace cpc::kernels {

template <typename T> struct Tag { using type = T; };

/// Which element kinds a kernel accepts; the others are never instantiated.
enum : unsigned { kFloat = 1, kInt = 2, kBool = 4, kNum = kFloat | kInt, kAny = 7 };

/// Calls f(Tag<T>{}) for the C++ type of `t` when kinds `K` allow it, else fails clearly.
/// i1 is one byte holding 0 or 1, which is exactly bool's representation.
template <unsigned K, typename F> void dispatch(const KernelContext &ctx, DType t, F &&f) {
  switch (t) {
  case DType::F32: if constexpr ((K & kFloat) != 0) return f(Tag<float>{}); break;
  case DType::F64: if constexpr ((K & kFloat) != 0) return f(Tag<double>{}); break;
  case DType::I64: if constexpr ((K & kInt) != 0) return f(Tag<int64_t>{}); break;
  case DType::I32: if constexpr ((K & kInt) != 0) return f(Tag<int32_t>{}); break;
  case DType::I16: if constexpr ((K & kInt) != 0) return f(Tag<int16_t>{}); break;
  case DType::I8: if constexpr ((K & kInt) != 0) return f(Tag<int8_t>{}); break;
  case DType::U8: if constexpr ((K & kInt) != 0) return f(Tag<uint8_t>{}); break;
  case DType::I1: if constexpr ((K & kBool) != 0) return f(Tag<bool>{}); break;
  default: break;
  }
  if (t == DType::F16 || t == DType::BF16)
    ctx.fail(std::string(dtypeName(t)) + " is not supported by the CPU kernels");
  ctx.fail(std::string("element type ") + dtypeName(t) + " is not supported by this op");
}

/// Calls f(float{}) or f(double{}) for the float-only kernels, else fails clearly.
template <typename F> void dispatchFloat(const KernelContext &ctx, DType t, F &&f) {
  if (t == DType::F32)
    return f(float{});
  if (t == DType::F64)
    return f(double{});
  if (t == DType::F16 || t == DType::BF16)
    ctx.fail(std::string(dtypeName(t)) + " is not supported by the CPU kernels");
  ctx.fail(std::string("element type ") + dtypeName(t) + " is not supported (f32 or f64 only)");
}

} // namespace cpc::kernels

#endif
