//===- Random.cpp - random_uniform -----------------------------------------===//
//
// Counter-based: element i is a pure function of (seed, step, position), the position being i
// after the elements of the step's earlier microbatches, so results are deterministic and
// independent of the thread count, of how the loop is split and of the parallel layout.
//
#include "kernels/Checks.h"
#include "kernels/cpu/Kernel.h"

#include <algorithm>
#include <cmath>

namespace cpc::kernels {
namespace {

// splitmix64's finalizer: a bijective mix with full avalanche.
inline uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// Key per (seed, step); each element then is mix(key + (i+1)*golden), i.e. splitmix64's
// stream for that key, read at position i.
inline uint64_t streamKey(uint64_t seed, uint64_t step) {
  return mix64(mix64(seed ^ 0x6A09E667F3BCC908ull) + step * 0x9E3779B97F4A7C15ull + 0x3C6EF372FE94F82Bull);
}

template <typename T> inline T unitFloat(uint64_t bits) {
  if constexpr (sizeof(T) == 4)
    return T(bits >> 40) * T(0x1.0p-24); // 24 bits: exact in f32, < 1
  else
    return T(bits >> 11) * T(0x1.0p-53); // 53 bits: exact in f64, < 1
}

template <typename T> void fillUniform(const KernelContext &ctx, T *y, int64_t n, double low, double high) {
  const uint64_t key = streamKey((uint64_t)ctx.attrs.seed, ctx.step);
  const T lo = T(low), span = T(high - low), hi = T(high);
  // Rounding low + span*u can reach `high`; the largest value below it stands in.
  const T below = std::nextafter(hi, lo);
  const int64_t offset = ctx.randomOffset(n);
  int threads = std::max(1, ctx.threads);
#pragma omp parallel for num_threads(threads) if (n > (1 << 15))
  for (int64_t i = 0; i < n; ++i) {
    T v = lo + span * unitFloat<T>(mix64(key + uint64_t(offset + i + 1) * 0x9E3779B97F4A7C15ull));
    y[i] = (v >= hi && hi > lo) ? below : v;
  }
}

void randomUniformKernel(KernelContext &ctx) {
  checkRandomUniform(ctx);
  const TensorRef &out = ctx.outputs[0];
  double low = ctx.attrs.low, high = ctx.attrs.high;
  switch (out.dtype) {
  case DType::F32: return fillUniform<float>(ctx, out.as<float>(), out.numel(), low, high);
  case DType::F64: return fillUniform<double>(ctx, out.as<double>(), out.numel(), low, high);
  default:
    ctx.fail(std::string("element type ") + dtypeName(out.dtype) + " is not supported (f32 or f64 only)");
  }
}

} // namespace

void registerRandomKernels(KernelRegistry &r) { r.add(OpKind::RandomUniform, randomUniformKernel); }

} // namespace cpc::kernels
