//===- Float16.h - f16 and bf16 storage: conversions to and from f32 -------===//
//
// 16-bit floats are storage types: kernels load them as f32, compute in f32 and round once on
// store (round to nearest even; NaN stays NaN). f16 is the compiler's _Float16 (F16C
// instructions where the file is built for x86-64-v3); bf16 is the top half of an f32.
//
#ifndef CPC_KERNELS_FLOAT16_H
#define CPC_KERNELS_FLOAT16_H

#include "kernels/Tensor.h"

#include <cstdint>
#include <cstring>

namespace cpc {

inline float bf16ToFloat(uint16_t h) {
  uint32_t bits = uint32_t(h) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

inline uint16_t floatToBF16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  uint32_t rounded = (bits + 0x7FFFu + ((bits >> 16) & 1u)) >> 16;
  uint32_t quietNan = (bits >> 16) | 0x40u;
  return uint16_t((bits & 0x7FFFFFFFu) > 0x7F800000u ? quietNan : rounded);
}

inline float halfToFloat(uint16_t h) {
  _Float16 v;
  std::memcpy(&v, &h, 2);
  return float(v);
}

inline uint16_t floatToHalf(float f) {
  _Float16 v = _Float16(f);
  uint16_t h;
  std::memcpy(&h, &v, 2);
  return h;
}

inline bool is16BitFloat(DType t) { return t == DType::F16 || t == DType::BF16; }

/// One 16-bit element (f16 or bf16 by `t`) as f32, and back.
inline float load16(DType t, uint16_t h) { return t == DType::BF16 ? bf16ToFloat(h) : halfToFloat(h); }
inline uint16_t store16(DType t, float f) { return t == DType::BF16 ? floatToBF16(f) : floatToHalf(f); }

/// Bulk conversions (vectorized; in the CPU kernel library).
void widenToFloat(DType from, const void *src, float *dst, int64_t n);
void narrowFromFloat(DType to, const float *src, void *dst, int64_t n);
/// dst = a + b on 16-bit floats of type t, each sum taken in f32 and rounded once (dst may alias).
void add16(DType t, uint16_t *dst, const uint16_t *a, const uint16_t *b, int64_t n);

} // namespace cpc

#endif
