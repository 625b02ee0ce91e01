// Seeded test inputs for the quantizers: random blocks at magnitudes across the whole fp32
// range plus the edge cases NUMERICS.md cares about (subnormals, ties, amax a few ulp
// around 2^k and 448 * 2^k, NaN and Inf blocks, signed zeros). Every test prints its seed.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <iterator>
#include <random>
#include <string>
#include <vector>

#include "mxtrain/format/bf16.h"
#include "mxtrain/format/bits.h"
#include "mxtrain/format/element.h"
#include "mxtrain/tensor.h"

namespace mxtrain::testing_util {

// Every scale rule and element format, for the tests that sweep them all.
constexpr ScaleRule kRules[] = {ScaleRule::kRceil, ScaleRule::kFloor, ScaleRule::kCeil,
                                ScaleRule::kEven};
constexpr ElementFormat kFormats[] = {ElementFormat::kE4M3, ElementFormat::kE5M2};

// fp32 values for a [rows, cols] tensor: every 32-element run (in whichever direction it is
// blocked) mixes the edge kinds, so each row and column block meets several of them.
inline std::vector<float> EdgeMix(int64_t count, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<float> v(static_cast<size_t>(count));
  std::uniform_int_distribution<int> kind_dist(0, 15);
  std::uniform_int_distribution<int> exp_dist(-149, 127);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_int_distribution<uint32_t> bits_dist;
  int region_exp = 0;
  for (int64_t i = 0; i < count; ++i) {
    if (i % 7 == 0) region_exp = exp_dist(rng);  // magnitude changes every few elements
    const int kind = kind_dist(rng);
    const float sign = (bits_dist(rng) & 1) ? -1.0f : 1.0f;
    float x;
    switch (kind) {
      case 0:
        x = sign * 0.0f;
        break;
      case 1:
        x = F32FromBits(bits_dist(rng) & 0x807FFFFFu);
        break;   // fp32 subnormal
      case 2: {  // 448 * 2^k or 2^k a few ulp away
        const int k = exp_dist(rng) / 2;
        const float base = (bits_dist(rng) & 1) ? 448.0f : 1.0f;
        const int ulps = static_cast<int>(bits_dist(rng) % 7) - 3;
        x = F32FromBits(
            static_cast<uint32_t>(static_cast<int64_t>(F32Bits(std::ldexp(base, k))) + ulps));
        x = std::isfinite(x) ? sign * x : sign;
        break;
      }
      case 3: {  // a tie between two E4M3 codes at the block's likely scale
        const float tie = (17.0f + 2.0f * static_cast<float>(bits_dist(rng) % 8)) / 16.0f;
        x = sign * std::ldexp(tie, static_cast<int>(bits_dist(rng) % 20) - 10);
        break;
      }
      case 4:
        x = F32FromBits(bits_dist(rng));
        if (!std::isfinite(x)) x = 1.0f;
        break;
      default:
        x = sign * std::ldexp(std::fabs(normal(rng)) + 0.01f, region_exp);
        break;
    }
    if (!std::isfinite(x)) x = sign * 3.0e38f;
    v[static_cast<size_t>(i)] = x;
  }
  // Sprinkle NaN and Inf (rarely, so most blocks stay finite).
  std::uniform_int_distribution<int64_t> pos(0, count > 0 ? count - 1 : 0);
  for (int64_t j = 0; j < count / 300; ++j) {
    v[static_cast<size_t>(pos(rng))] = (j % 3 == 0) ? -INFINITY : (j % 3 == 1) ? INFINITY : NAN;
  }
  return v;
}

inline std::string ReadBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

inline void WriteBytes(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary) << bytes;
}

inline Tensor MakeF32(const Shape& shape, const std::vector<float>& values) {
  Tensor t = Tensor::Empty(DType::kF32, shape);
  // memcpy with a null pointer is undefined even for zero bytes (an empty tensor).
  if (t.NumBytes() > 0) std::memcpy(t.raw(), values.data(), t.NumBytes());
  return t;
}

// The same values rounded to bf16 (then exact in fp32).
inline Tensor MakeBf16(const Shape& shape, const std::vector<float>& values) {
  Tensor t = Tensor::Empty(DType::kBF16, shape);
  for (size_t i = 0; i < values.size(); ++i) t.data<uint16_t>()[i] = F32ToBf16(values[i]);
  return t;
}

inline bool BytesEqual(const Tensor& a, const Tensor& b) {
  return a.shape() == b.shape() && a.dtype() == b.dtype() &&
         std::memcmp(a.raw(), b.raw(), a.NumBytes()) == 0;
}

// Index of the first differing byte, or -1.
inline int64_t FirstDifference(const Tensor& a, const Tensor& b) {
  const auto* pa = static_cast<const uint8_t*>(a.raw());
  const auto* pb = static_cast<const uint8_t*>(b.raw());
  for (size_t i = 0; i < std::min(a.NumBytes(), b.NumBytes()); ++i) {
    if (pa[i] != pb[i]) return static_cast<int64_t>(i);
  }
  return a.NumBytes() == b.NumBytes() ? -1
                                      : static_cast<int64_t>(std::min(a.NumBytes(), b.NumBytes()));
}

}  // namespace mxtrain::testing_util
