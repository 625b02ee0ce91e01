// E5M2: 1 sign, 5 exponent bits (bias 15), 2 mantissa bits; max normal 57344 (0x7B);
// infinities S.11111.00; NaN S.11111.{01,10,11}. NUMERICS.md §1.
#pragma once

#include "mxtrain/format/minifloat.h"

namespace mxtrain {

using E5M2 = MiniFloat<5, 2, /*kHasInf=*/true>;
static_assert(E5M2::kMaxNormalCode == 0x7B);
static_assert(E5M2::kInfCode == 0x7C);
static_assert(E5M2::kEmax == 15);
static_assert(E5M2::Decode(0x7B) == 57344.0f);
static_assert(E5M2::Decode(0x01) == 1.52587890625e-05f);  // 2^-16

constexpr float kE5M2MaxNormal = 57344.0f;
// fl32(1 / 57344): 57344 = 1.75 * 2^15, so 1/57344 = (4/7) * 2^-15, rounded once.
constexpr uint32_t kE5M2InvMaxBits = 0x37924925u;

inline uint8_t EncodeE5M2(float x) { return E5M2::Encode(x); }
inline float DecodeE5M2(uint8_t code) { return E5M2::Decode(code); }

}  // namespace mxtrain
