// Internal: the scale rules of NUMERICS.md §4 as a table on amax's fp32 exponent, for the
// vector kernels. Each rule keeps its one definition, BlockScale (format/element.h); the
// table is derived from it and checked against it, so it can never say otherwise.
//
// Every rule maps the amax values of one binade (one exponent field E, mantissas 0 ..
// 2^23 - 1) to at most two consecutive bytes, monotonically: entry[E] holds the lower byte
// in bits 23..30 and, in bits 0..22, the largest mantissa that still gets it (0x7FFFFF when
// the whole binade does). Zero, NaN and Inf are entries too (E = 0 gives 0, E = 255 0xFF).
//
// The dual kernel narrows an fp32 strip to 16 bits with round-to-odd (the low 16 bits OR-ed
// into bit 16; the exponent never changes) and takes the amax of the narrowed values. In a
// binade whose threshold's low 16 bits are all zero with bit 16 clear, or all one with bit
// 16 set, a narrowed amax compares as the full one does and keeps its byte: `narrow_exact`
// marks those binades. Every binade of the affine range is one (Build() checks it); the
// others (rceil's tiny amax, where the quotient amax / max_elem is subnormal) take the
// exact fp32 amax again.
#pragma once

#include <cstdint>

#include "mxtrain/format/element.h"

namespace mxtrain::internal {

struct ScaleTable {
  uint32_t entry[256];
  // The binades [affine_lo, affine_hi] where entry[E] == (E << 23) + affine_delta (mod 2^32):
  // every rule is a fixed offset from amax's exponent, with one mantissa threshold, away
  // from zero, subnormal amax and the clamps at the ends. The vector kernels compute those
  // entries with an add instead of a gather (a 16-lane gather is ~20 cycles on Zen 4) and
  // gather only when a lane lies outside. Derived from entry[] itself, so never different.
  uint32_t affine_lo;
  uint32_t affine_hi;
  uint32_t affine_delta;
  // Bit E: an amax of exponent field E narrowed to odd gets the byte of the full amax.
  uint32_t narrow_exact[8];
};

inline bool NarrowExact(const ScaleTable& t, uint32_t exponent_field) {
  return (t.narrow_exact[exponent_field / 32] >> (exponent_field % 32)) & 1u;
}

// The table of one rule and element format, built on first use from BlockScale; throws
// Error if the rule ever stops having the two-byte, monotone shape above.
const ScaleTable& ScaleTableFor(ScaleRule rule, ElementFormat format);

// The scalar form of the lookup the kernels vectorize (for tests).
inline uint8_t ScaleFromTable(const ScaleTable& t, uint32_t amax_bits) {
  const uint32_t e = t.entry[amax_bits >> 23];
  return static_cast<uint8_t>((e >> 23) + ((amax_bits & 0x7FFFFFu) > (e & 0x7FFFFFu) ? 1 : 0));
}

}  // namespace mxtrain::internal
