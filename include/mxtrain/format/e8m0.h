// E8M0, the MX block scale: byte b in 0..254 means 2^(b - 127); 0xFF is NaN; there is no
// zero (b = 0 is 2^-127). NUMERICS.md §2.
#pragma once

#include <cstdint>
#include <limits>

#include "mxtrain/format/bits.h"

namespace mxtrain {

constexpr uint8_t kE8M0NaN = 0xFF;
constexpr uint8_t kE8M0Max = 254;
constexpr int kE8M0Bias = 127;

// 2^(b - 127) as fp32 (b = 0 is the subnormal 2^-127); NaN for 0xFF.
constexpr float DecodeE8M0(uint8_t b) {
  if (b == kE8M0NaN) return std::numeric_limits<float>::quiet_NaN();
  if (b == 0) return F32FromBits(0x00400000u);
  return F32FromBits(static_cast<uint32_t>(b) << 23);
}

// fl32(2^(127 - b)), the factor that brings a block into the element range before encoding
// (NUMERICS.md §5). Exact for every b in 0..254 (b = 254 gives the subnormal 2^-127).
constexpr float E8M0InverseScale(uint8_t b) {
  if (b == kE8M0Max) return F32FromBits(0x00400000u);
  return F32FromBits(static_cast<uint32_t>(254 - b) << 23);
}

static_assert(DecodeE8M0(127) == 1.0f);
static_assert(E8M0InverseScale(127) == 1.0f);
static_assert(E8M0InverseScale(0) == 1.7014118346046923e38f);  // 2^127

}  // namespace mxtrain
