// bfloat16 as raw uint16 bit patterns: the upper half of an fp32. Widening is exact;
// narrowing rounds to nearest, ties to even, and keeps NaN a (quiet) NaN with its sign.
#pragma once

#include <cstdint>

#include "mxtrain/format/bits.h"

namespace mxtrain {

constexpr float Bf16ToF32(uint16_t h) { return F32FromBits(static_cast<uint32_t>(h) << 16); }

constexpr uint16_t F32ToBf16(float x) {
  const uint32_t bits = F32Bits(x);
  if ((bits & kF32AbsMask) > kF32InfBits) {
    return static_cast<uint16_t>((bits >> 16) | 0x0040u);  // quiet NaN, sign kept
  }
  const uint32_t rounding = 0x7FFFu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>((bits + rounding) >> 16);
}

static_assert(Bf16ToF32(0x3F80) == 1.0f);
static_assert(F32ToBf16(1.0f) == 0x3F80);
static_assert(F32ToBf16(F32FromBits(0x3F808000u)) == 0x3F80);  // tie to even (down)
static_assert(F32ToBf16(F32FromBits(0x3F818000u)) == 0x3F82);  // tie to even (up)

}  // namespace mxtrain
