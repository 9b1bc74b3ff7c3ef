//===- Random.h - counter-based random numbers keyed by (seed, epoch, index) ---===//
//
// Every draw of the data pipeline is a pure function of the key (seed, epoch, index, stream) and
// a counter, so a sample's augmentation and an epoch's order do not depend on which thread, rank
// or batch position produces them: resuming at any step on any layout sees the same data.
//
//===----------------------------------------------------------------------------===//
#ifndef CPC_RUNTIME_DATA_RANDOM_H
#define CPC_RUNTIME_DATA_RANDOM_H

#include <cstdint>

namespace cpc::data {

/// SplitMix64's finaliser: a bijective 64-bit mix with good avalanche.
inline uint64_t mix64(uint64_t x) {
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

/// Separate key spaces, so a sample's augmentation never reuses an epoch order's numbers.
enum class RngStream : uint64_t { Augment = 1, Order = 2, Noise = 3 };

/// A SplitMix64 sequence whose start is a hash of (seed, epoch, index, stream).
class CounterRng {
public:
  CounterRng(uint64_t seed, uint64_t epoch, uint64_t index, RngStream stream) {
    constexpr uint64_t golden = 0x9E3779B97F4A7C15ull;
    state_ = mix64(mix64(mix64(mix64(seed + golden) ^ (epoch + 2 * golden)) ^ (index + 3 * golden)) ^
                   (uint64_t(stream) * golden));
  }

  uint64_t next() {
    state_ += 0x9E3779B97F4A7C15ull;
    return mix64(state_);
  }
  /// Uniform in [0, 1) with 53 random bits.
  double uniform() { return double(next() >> 11) * 0x1.0p-53; }
  double uniform(double lo, double hi) { return lo + (hi - lo) * uniform(); }
  /// Uniform integer in [lo, hi) (hi > lo), unbiased (Lemire's multiply-and-reject).
  int64_t randint(int64_t lo, int64_t hi) {
    uint64_t range = uint64_t(hi - lo);
    unsigned __int128 m = (unsigned __int128)next() * range;
    uint64_t low = uint64_t(m);
    if (low < range) {
      uint64_t threshold = (0 - range) % range;
      while (low < threshold) {
        m = (unsigned __int128)next() * range;
        low = uint64_t(m);
      }
    }
    return lo + int64_t(m >> 64);
  }

private:
  uint64_t state_;
};

} // namespace cpc::data

#endif
