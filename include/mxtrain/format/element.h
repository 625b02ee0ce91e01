// The element formats and scale rules as run-time values, and the per-block scale
// computation of NUMERICS.md §4 (each rule in exactly one function).
#pragma once

#include <algorithm>
#include <cstdint>
#include <string_view>

#include "mxtrain/format/bf16.h"
#include "mxtrain/format/e4m3.h"
#include "mxtrain/format/e5m2.h"
#include "mxtrain/format/e8m0.h"

// Forced inlining for the per-block scale functions: the SIMD kernels call one per block
// of 32, and an out-of-line call there costs a vzeroupper and spills every constant vector
// (measured: ~25% of the rowwise kernel's time).
#define MXTRAIN_BLOCK_INLINE inline __attribute__((always_inline))

namespace mxtrain {

enum class ElementFormat : uint8_t { kE4M3, kE5M2 };
enum class ScaleRule : uint8_t { kRceil, kFloor, kCeil, kEven };

// Lower-case names as the CLI spells them ("e4m3", "rceil", ...).
std::string_view Name(ElementFormat format);
std::string_view Name(ScaleRule rule);
// Parse a name; throws Error naming the value and the accepted ones.
ElementFormat ParseElementFormat(std::string_view name);
ScaleRule ParseScaleRule(std::string_view name);

inline uint8_t EncodeElement(ElementFormat format, float x) {
  return format == ElementFormat::kE4M3 ? EncodeE4M3(x) : EncodeE5M2(x);
}
inline float DecodeElement(ElementFormat format, uint8_t code) {
  return format == ElementFormat::kE4M3 ? DecodeE4M3(code) : DecodeE5M2(code);
}
// emax_elem of NUMERICS.md §1: 8 for E4M3, 15 for E5M2.
MXTRAIN_BLOCK_INLINE constexpr int ElementEmax(ElementFormat format) {
  return format == ElementFormat::kE4M3 ? E4M3::kEmax : E5M2::kEmax;
}
MXTRAIN_BLOCK_INLINE constexpr int ElementMantissaBits(ElementFormat format) {
  return format == ElementFormat::kE4M3 ? 3 : 2;
}

// The four scale rules. Each takes amax as the bit pattern of a finite, non-zero fp32
// magnitude and returns the E8M0 byte; the special blocks (zero, NaN, Inf) are handled once,
// in BlockScale. Inline, because the quantizers call one per block of 32.

namespace internal {
MXTRAIN_BLOCK_INLINE uint8_t ClampScale(int b) {
  return static_cast<uint8_t>(std::clamp(b, 0, int{kE8M0Max}));
}
}  // namespace internal

// rceil's second half, on d's fp32 bits (the d -> b table of NUMERICS.md §8 tests it).
MXTRAIN_BLOCK_INLINE uint8_t RceilScaleFromQuotient(uint32_t d_bits) {
  const uint32_t exp_field = d_bits >> 23;
  const uint32_t mantissa = d_bits & 0x7FFFFFu;
  if (exp_field == 0) return mantissa > 0x400000u ? 1 : 0;
  return static_cast<uint8_t>(std::min<uint32_t>(exp_field + (mantissa != 0 ? 1 : 0), kE8M0Max));
}

// d = fl32(amax * fl32(1/max_elem)), one fp32 multiply; then the exponent of d rounded up.
MXTRAIN_BLOCK_INLINE uint8_t ScaleRceil(uint32_t amax_bits, ElementFormat format) {
  const uint32_t inv_max_bits = format == ElementFormat::kE4M3 ? kE4M3InvMaxBits : kE5M2InvMaxBits;
  const float d = F32FromBits(amax_bits) * F32FromBits(inv_max_bits);
  return RceilScaleFromQuotient(F32Bits(d));
}

// OCP MX v1.0 §6.3: floor(log2 amax) - emax_elem + 127, clamped.
MXTRAIN_BLOCK_INLINE uint8_t ScaleFloor(uint32_t amax_bits, ElementFormat format) {
  return internal::ClampScale(FloorLog2Bits(amax_bits) - ElementEmax(format) + kE8M0Bias);
}

// ceil(log2 amax) - emax_elem + 127, clamped; exact (a power of two is its own ceiling).
MXTRAIN_BLOCK_INLINE uint8_t ScaleCeil(uint32_t amax_bits, ElementFormat format) {
  const int ceil_log2 = FloorLog2Bits(amax_bits) + (IsPowerOfTwoBits(amax_bits) ? 0 : 1);
  return internal::ClampScale(ceil_log2 - ElementEmax(format) + kE8M0Bias);
}

// Round amax's bits to the element's mantissa width, then floor. A carry up to the
// exponent field 255 (2^128) reads as floor(log2) = 128 (FloorLog2Bits).
MXTRAIN_BLOCK_INLINE uint8_t ScaleEven(uint32_t amax_bits, ElementFormat format) {
  const int m = ElementMantissaBits(format);
  const uint32_t rounded = (amax_bits + (1u << (22 - m))) & ~((1u << (23 - m)) - 1u);
  if (rounded == 0) return 0;  // a subnormal amax below half a step rounds to zero
  return ScaleFloor(rounded, format);
}

// The scale of a block whose largest magnitude has fp32 bits amax_bits (sign cleared, NaN
// payloads included): 0 for an all-zero block, 0xFF when any element is NaN or Inf (that
// is, amax_bits >= 0x7F800000), otherwise the rule's byte.
MXTRAIN_BLOCK_INLINE uint8_t BlockScale(ScaleRule rule, ElementFormat format, uint32_t amax_bits) {
  if (amax_bits >= kF32InfBits) return kE8M0NaN;
  if (amax_bits == 0) return 0;
  switch (rule) {
    case ScaleRule::kRceil:
      return ScaleRceil(amax_bits, format);
    case ScaleRule::kFloor:
      return ScaleFloor(amax_bits, format);
    case ScaleRule::kCeil:
      return ScaleCeil(amax_bits, format);
    case ScaleRule::kEven:
      return ScaleEven(amax_bits, format);
  }
  return kE8M0NaN;
}

}  // namespace mxtrain
