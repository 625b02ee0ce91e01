// The scalar reference codec shared by the 8-bit element formats (e4m3.h, e5m2.h).
//
// Encoding follows NUMERICS.md §1 and reads like it: round to nearest, ties to the even
// code; a finite magnitude that rounds above max normal saturates to max normal; subnormals
// and the sign of zero are kept; NaN encodes as 0x7F. The arithmetic is integer-only, so it
// is independent of the floating-point tricks the SIMD encoders use, and it is the oracle
// they are tested against.
#pragma once

#include <cstdint>
#include <limits>

#include "mxtrain/format/bits.h"

namespace mxtrain {

// An OCP 8-bit float: 1 sign bit, kExpBits exponent bits (bias kBias), kManBits mantissa
// bits. kHasInf: the all-ones exponent with a zero mantissa is Inf (E5M2) rather than a
// finite value (E4M3, whose only non-finite codes are S.1111.111).
template <int kExpBits, int kManBits, bool kHasInf>
struct MiniFloat {
  static constexpr int kBias = (1 << (kExpBits - 1)) - 1;
  static constexpr uint8_t kMaxNormalCode =
      kHasInf ? ((((1 << kExpBits) - 2) << kManBits) | ((1 << kManBits) - 1))
              : (((1 << kExpBits) - 1) << kManBits) | ((1 << kManBits) - 2);
  static constexpr uint8_t kNaNCode = 0x7F;
  static constexpr uint8_t kInfCode =
      kHasInf ? static_cast<uint8_t>(0x7F & ~((1 << kManBits) - 1)) : 0;
  // Exponent of the largest power of two below max normal (emax_elem of NUMERICS.md §1).
  static constexpr int kEmax = (kMaxNormalCode >> kManBits) - kBias;
  static constexpr int kMinNormalExp = 1 - kBias;
  // Exponent of the smallest subnormal: 2^kMinSubnormalExp is one code step below 2^-bias+1.
  static constexpr int kMinSubnormalExp = kMinNormalExp - kManBits;

  static constexpr bool IsNaN(uint8_t code) {
    const uint8_t mag = code & 0x7F;
    if constexpr (kHasInf) return mag > kInfCode;
    return mag == 0x7F;
  }
  static constexpr bool IsInf(uint8_t code) { return kHasInf && (code & 0x7F) == kInfCode; }

  // The value of a code; NaN codes give NaN, E5M2's Inf codes give +-Inf.
  static constexpr float Decode(uint8_t code) {
    const bool negative = (code & 0x80) != 0;
    const int exp_field = (code >> kManBits) & ((1 << kExpBits) - 1);
    const int mantissa = code & ((1 << kManBits) - 1);
    float magnitude;
    if (IsNaN(code)) {
      return std::numeric_limits<float>::quiet_NaN();
    } else if (IsInf(code)) {
      magnitude = std::numeric_limits<float>::infinity();
    } else if (exp_field == 0) {  // subnormal: mantissa * 2^kMinSubnormalExp
      magnitude = static_cast<float>(mantissa) * Pow2(kMinSubnormalExp);
    } else {
      magnitude =
          static_cast<float>((1 << kManBits) | mantissa) * Pow2(exp_field - kBias - kManBits);
    }
    return negative ? -magnitude : magnitude;
  }

  // Round-to-nearest-even, saturating encoder (NUMERICS.md §1). Inf: E5M2 keeps it (its
  // own code), E4M3 has none and saturates to max normal; NaN gives kNaNCode.
  static constexpr uint8_t Encode(float x) {
    const uint32_t bits = F32Bits(x);
    const uint8_t sign = static_cast<uint8_t>((bits >> 24) & 0x80);
    const uint32_t abs_bits = bits & kF32AbsMask;
    if (abs_bits > kF32InfBits) return kNaNCode;
    if (abs_bits == kF32InfBits) {
      if constexpr (kHasInf) return sign | kInfCode;
      return sign | kMaxNormalCode;
    }
    if (abs_bits == 0) return sign;
    // |x| = significand * 2^(exponent), significand an integer with the implicit bit.
    int exponent;
    uint32_t significand;
    const int exp_field = static_cast<int>(abs_bits >> 23);
    if (exp_field == 0) {
      significand = abs_bits;
      exponent = -149;
    } else {
      significand = (abs_bits & 0x7FFFFFu) | 0x800000u;
      exponent = exp_field - 150;
    }
    // The code's quantum (value of one mantissa step) at this magnitude.
    const int floor_log2 = FloorLog2Bits(abs_bits);
    const int quantum_exp = (floor_log2 < kMinNormalExp ? kMinNormalExp : floor_log2) - kManBits;
    // steps = round_half_even(|x| / 2^quantum_exp) = significand * 2^(exponent - quantum_exp).
    const int shift = quantum_exp - exponent;  // >= 0 for every fp32 we can meet here
    uint64_t steps;
    if (shift <= 0) {
      steps = static_cast<uint64_t>(significand) << -shift;
    } else if (shift >= 40) {
      steps = 0;  // far below half the smallest subnormal
    } else {
      const uint64_t s = significand;
      const uint64_t floor_steps = s >> shift;
      const uint64_t remainder = s & ((uint64_t{1} << shift) - 1);
      const uint64_t half = uint64_t{1} << (shift - 1);
      steps =
          floor_steps + ((remainder > half || (remainder == half && (floor_steps & 1))) ? 1 : 0);
    }
    // Assemble: in the subnormal range steps is the code itself (steps == 2^kManBits is the
    // smallest normal, also correct); in the normal range steps in [2^m, 2^(m+1)] and a carry
    // to 2^(m+1) moves to the next binade, which the addition below does by itself.
    uint32_t code;
    if (floor_log2 < kMinNormalExp) {
      code = static_cast<uint32_t>(steps);
    } else {
      const uint32_t biased = static_cast<uint32_t>(floor_log2 + kBias);
      code = (biased << kManBits) + static_cast<uint32_t>(steps - (uint64_t{1} << kManBits));
    }
    if (floor_log2 > kEmax + 1 || code > kMaxNormalCode) code = kMaxNormalCode;  // saturate
    return static_cast<uint8_t>(sign | code);
  }

  static constexpr float Pow2(int e) {
    float r = 1.0f;
    if (e >= 0) {
      for (int i = 0; i < e; ++i) r *= 2.0f;
    } else {
      for (int i = 0; i < -e; ++i) r *= 0.5f;
    }
    return r;
  }
};

}  // namespace mxtrain
