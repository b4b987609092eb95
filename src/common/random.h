#pragma once
// Deterministic random streams that are identical on every platform, compiler
// and LibTorch version: ranks derive the same permutations, and per-sample
// streams make data augmentation independent of thread count.

#include <cstdint>

namespace dtrain {

/// Mixes values into one 64-bit seed (order matters): mix_seed(seed, epoch, index).
inline uint64_t mix_seed(uint64_t a, uint64_t b) {
  uint64_t x = a ^ (b + 0x9e3779b97f4a7c15ULL + (a << 6) + (a >> 2));
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ULL;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebULL;
  x ^= x >> 31;
  return x;
}
inline uint64_t mix_seed(uint64_t a, uint64_t b, uint64_t c) { return mix_seed(mix_seed(a, b), c); }

/// SplitMix64 (Steele et al.): small, fast, statistically sound for shuffling
/// and augmentation parameters.
class SplitMix64 {
 public:
  explicit SplitMix64(uint64_t seed) : state_(seed) {}

  uint64_t next() {
    uint64_t z = (state_ += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  }

  /// Uniform in [0, bound) without modulo bias (Lemire's method). bound > 0.
  uint64_t below(uint64_t bound) {
    __uint128_t m = static_cast<__uint128_t>(next()) * bound;
    uint64_t low = static_cast<uint64_t>(m);
    if (low < bound) {
      uint64_t threshold = -bound % bound;
      while (low < threshold) {
        m = static_cast<__uint128_t>(next()) * bound;
        low = static_cast<uint64_t>(m);
      }
    }
    return static_cast<uint64_t>(m >> 64);
  }

  /// Uniform in [0, 1).
  double uniform() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }
  /// Uniform in [lo, hi).
  double uniform(double lo, double hi) { return lo + (hi - lo) * uniform(); }

 private:
  uint64_t state_;
};

}  // namespace dtrain
