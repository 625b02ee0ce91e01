// E4M3 (OCP "E4M3FN"): 1 sign, 4 exponent bits (bias 7), 3 mantissa bits; max normal 448
// (0x7E); no infinities; NaN is S.1111.111. NUMERICS.md §1.
#pragma once

#include "mxtrain/format/minifloat.h"

namespace mxtrain {

using E4M3 = MiniFloat<4, 3, /*kHasInf=*/false>;
static_assert(E4M3::kMaxNormalCode == 0x7E);
static_assert(E4M3::kEmax == 8);
static_assert(E4M3::Decode(0x7E) == 448.0f);
static_assert(E4M3::Decode(0x01) == 0.001953125f);  // 2^-9, the smallest subnormal

constexpr float kE4M3MaxNormal = 448.0f;
// fl32(1 / 448) = 0x3B124925, the rceil multiplier (NUMERICS.md §4).
constexpr uint32_t kE4M3InvMaxBits = 0x3B124925u;

inline uint8_t EncodeE4M3(float x) { return E4M3::Encode(x); }
inline float DecodeE4M3(uint8_t code) { return E4M3::Decode(code); }

}  // namespace mxtrain
