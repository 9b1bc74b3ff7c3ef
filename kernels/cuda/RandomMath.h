//===- RandomMath.h - random_uniform's counter-based generator, GPU and host ===//
//
// The generator of kernels/cpu/Random.cpp, bit for bit: each element is a pure function of
// (seed, step, position) (docs/random.md): splitmix64's stream for a key mixed from seed and
// step, read at the element's position, scaled to [0, 1) and then to [low, high). The scaling is
// a separately rounded multiply and add (no FMA, as on the CPU), so the GPU's values equal the
// CPU's exactly. f16/bf16 outputs are the f32 values rounded once, as the CPU kernel's widening
// does.
//
#ifndef CPC_KERNELS_CUDA_RANDOMMATH_H
#define CPC_KERNELS_CUDA_RANDOMMATH_H

#include "kernels/cuda/ElementwiseMath.h"
#include "kernels/cuda/HostDevice.h"

#include <cmath>
#include <cstdint>

namespace cpc::kernels::cuda {

/// splitmix64's finalizer: a bijective mix with full avalanche.
CPC_HD uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

constexpr uint64_t kGolden = 0x9E3779B97F4A7C15ull;

/// The stream of (seed, step).
CPC_HD uint64_t streamKey(uint64_t seed, uint64_t step) {
  return mix64(mix64(seed ^ 0x6A09E667F3BCC908ull) + step * kGolden + 0x3C6EF372FE94F82Bull);
}

/// The stream's 64 bits at position i.
CPC_HD uint64_t streamBits(uint64_t key, int64_t i) { return mix64(key + uint64_t(i + 1) * kGolden); }

/// The top 24 (f32) or 53 (f64) bits as a value in [0, 1), exactly.
template <class T> CPC_HD T unitFloat(uint64_t bits) {
  if constexpr (sizeof(T) == 4)
    return T(bits >> 40) * T(0x1.0p-24);
  else
    return T(bits >> 11) * T(0x1.0p-53);
}

/// [low, high) in T: low + span * u, and `below` (the largest value under high) where rounding
/// reaches high.
template <class T> struct UniformRange {
  T lo, span, hi, below;
};

/// The range for the op's attributes (computed on the host, as the CPU kernel computes it).
template <class T> UniformRange<T> uniformRange(double low, double high) {
  UniformRange<T> r;
  r.lo = T(low);
  r.span = T(high - low);
  r.hi = T(high);
  r.below = std::nextafter(r.hi, r.lo);
  return r;
}

/// Element i of the stream `key`.
template <class T> CPC_HD T uniformAt(const UniformRange<T> &r, uint64_t key, int64_t i) {
  T v = fmath::addRn(r.lo, fmath::mulRn(r.span, unitFloat<T>(streamBits(key, i))));
  return (v >= r.hi && r.hi > r.lo) ? r.below : v;
}

} // namespace cpc::kernels::cuda

#endif
