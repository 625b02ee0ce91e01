// Bit-level helpers shared by the format codecs: fp32 <-> uint32 without aliasing UB.
#pragma once

#include <bit>
#include <cstdint>

namespace mxtrain {

constexpr uint32_t F32Bits(float x) { return std::bit_cast<uint32_t>(x); }
constexpr float F32FromBits(uint32_t b) { return std::bit_cast<float>(b); }

constexpr uint32_t kF32SignMask = 0x80000000u;
constexpr uint32_t kF32AbsMask = 0x7FFFFFFFu;
constexpr uint32_t kF32InfBits = 0x7F800000u;  // |bits| above this is NaN, equal is Inf
constexpr uint32_t kF32QuietNaNBits = 0x7FC00000u;

// Exact floor(log2 |x|) of a finite, non-zero fp32 given its absolute bit pattern, taken from
// the exponent bits (and, for subnormals, the leading mantissa bit), never from a
// floating-point log2 (NUMERICS.md §4). An exponent field of 255 reads as 128, which the
// "even" rule relies on when rounding carries amax up to 2^128.
inline __attribute__((always_inline)) constexpr int FloorLog2Bits(uint32_t abs_bits) {
  const int exp_field = static_cast<int>(abs_bits >> 23);
  if (exp_field != 0) return exp_field - 127;
  const uint32_t mantissa = abs_bits & 0x7FFFFFu;  // non-zero: x != 0
  return (31 - std::countl_zero(mantissa)) - 149;
}

// Whether a finite, non-zero |x| (as bits) is an exact power of two.
inline __attribute__((always_inline)) constexpr bool IsPowerOfTwoBits(uint32_t abs_bits) {
  const uint32_t exp_field = abs_bits >> 23;
  const uint32_t mantissa = abs_bits & 0x7FFFFFu;
  if (exp_field != 0) return mantissa == 0;
  return std::has_single_bit(mantissa);
}

}  // namespace mxtrain
