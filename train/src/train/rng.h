// Internal: the training code's random numbers. splitmix64 and Box-Muller written out, so
// that a seed gives the same values with every compiler and standard library (the
// distributions of <random> are implementation-defined).
#pragma once

#include <cmath>
#include <cstdint>

namespace mxtrain::internal {

inline uint64_t SplitMix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// A stream of 64-bit values from (seed, stream): the same pair, the same values.
class Rng {
 public:
  explicit Rng(uint64_t seed, uint64_t stream = 0)
      : state_(SplitMix64(seed ^ SplitMix64(stream + 0x632BE59BD9B4E019ull))) {}
  uint64_t Next() {
    state_ += 0x9E3779B97F4A7C15ull;
    uint64_t z = state_;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  // Uniform in [0, n) (n > 0; the modulo bias is below 2^-40 for the n used here).
  uint64_t Below(uint64_t n) { return Next() % n; }
  // Uniform in (0, 1).
  double Uniform() { return (static_cast<double>(Next() >> 11) + 0.5) * 0x1.0p-53; }
  double Normal() {
    const double u1 = Uniform(), u2 = Uniform();
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
  }

 private:
  uint64_t state_;
};

}  // namespace mxtrain::internal
