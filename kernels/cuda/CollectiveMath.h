//===- CollectiveMath.h - the NCCL communicator's element arithmetic ------===//
//
// A max all-reduce that keeps NaN. NCCL's max on floats drops NaNs (fmaxf), where the MPI
// communicator and torch.max let a NaN win: a rank whose partial max is NaN would be outvoted
// by the others and every rank would go on with a finite value. So the communicator maps each
// float to an integer key that orders as the floats do, with every NaN above +inf, reduces the
// keys with NCCL's integer max, and maps the result back (every NaN comes back as one quiet NaN;
// -0 orders below +0).
//
// A float's bits are sign and magnitude; the key is the magnitude for a positive value and
// -1 - magnitude for a negative one (two's complement order), and the largest key for a NaN.
// f32 keys are int32 and f64 keys int64 (the conversion is in place); f16 and bf16 keys are
// int32 (NCCL has no 16-bit integers).
//
#ifndef CPC_KERNELS_CUDA_COLLECTIVEMATH_H
#define CPC_KERNELS_CUDA_COLLECTIVEMATH_H

#include "kernels/cuda/HostDevice.h"

#include <cstdint>

namespace cpc::kernels::cuda {

/// The bit patterns of a float format held in `Bits`.
template <typename Bits> struct FloatFormat {
  Bits sign, infinity, quietNaN;
};
constexpr FloatFormat<uint32_t> kF32Format{0x80000000u, 0x7f800000u, 0x7fc00000u};
constexpr FloatFormat<uint64_t> kF64Format{0x8000000000000000ull, 0x7ff0000000000000ull, 0x7ff8000000000000ull};
constexpr FloatFormat<uint16_t> kF16Format{0x8000u, 0x7c00u, 0x7e00u};
constexpr FloatFormat<uint16_t> kBF16Format{0x8000u, 0x7f80u, 0x7fc0u};

/// The largest key: every NaN's.
template <typename Key> CPC_HD constexpr Key nanKey() { return Key(~uint64_t(0) >> (65 - 8 * sizeof(Key))); }

template <typename Key, typename Bits> CPC_HD Key maxKey(Bits bits, FloatFormat<Bits> f) {
  Bits magnitude = Bits(bits & Bits(~f.sign));
  if (magnitude > f.infinity)
    return nanKey<Key>();
  return (bits & f.sign) ? Key(Key(-1) - Key(magnitude)) : Key(magnitude);
}

template <typename Key, typename Bits> CPC_HD Bits bitsOfMaxKey(Key key, FloatFormat<Bits> f) {
  if (key == nanKey<Key>())
    return f.quietNaN;
  return key < 0 ? Bits(f.sign | Bits(Key(-1) - key)) : Bits(key);
}

} // namespace cpc::kernels::cuda

#endif
