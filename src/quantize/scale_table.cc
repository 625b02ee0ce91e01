#include "quantize/scale_table.h"

#include "mxtrain/error.h"

namespace mxtrain::internal {
namespace {

ScaleTable Build(ScaleRule rule, ElementFormat format) {
  ScaleTable t{};
  for (uint32_t e = 0; e < 256; ++e) {
    const uint32_t first = e << 23;
    const uint32_t last = first | 0x7FFFFFu;
    const uint8_t lo = BlockScale(rule, format, first);
    const uint8_t hi = BlockScale(rule, format, last);
    uint32_t keep = 0x7FFFFFu;  // the largest mantissa whose byte is lo
    if (hi != lo) {
      MXTRAIN_CHECK(hi == lo + 1, "scale table: rule ", Name(rule), " spans bytes ", int{lo}, "..",
                    int{hi}, " in binade ", e);
      uint32_t below = 0, above = 0x7FFFFFu;  // byte(below) == lo, byte(above) == hi
      while (above - below > 1) {
        const uint32_t mid = below + (above - below) / 2;
        (BlockScale(rule, format, first | mid) == lo ? below : above) = mid;
      }
      keep = below;
    }
    t.entry[e] = (uint32_t{lo} << 23) | keep;
    // With keep = T << 16 | L, a mantissa m exceeds keep exactly when (m >> 16 | sticky)
    // exceeds T if L == 0 and T is even (m >> 16 == T with a sticky bit goes up, as it
    // must) or if L == 0xFFFF and T is odd (m >> 16 == T stays).
    const uint32_t low = keep & 0xFFFFu, top = keep >> 16;
    if ((low == 0 && top % 2 == 0) || (low == 0xFFFFu && top % 2 == 1)) {
      t.narrow_exact[e / 32] |= 1u << (e % 32);
    }
    // The shape the lookup assumes, at the points where a rule could break it.
    for (uint32_t m : {0u, 1u, keep, keep + 1, 0x400000u, 0x7FFFFEu, 0x7FFFFFu}) {
      if (m > 0x7FFFFFu) continue;
      MXTRAIN_CHECK(ScaleFromTable(t, first | m) == BlockScale(rule, format, first | m),
                    "scale table: rule ", Name(rule), " is not monotone in binade ", e);
    }
  }
  // The longest run of binades that are one fixed offset from their exponent.
  uint32_t best_lo = 1, best_len = 0;
  for (uint32_t lo = 0; lo < 256;) {
    const uint32_t delta = t.entry[lo] - (lo << 23);
    uint32_t hi = lo;
    while (hi + 1 < 256 && t.entry[hi + 1] - ((hi + 1) << 23) == delta) ++hi;
    if (hi - lo + 1 > best_len) best_lo = lo, best_len = hi - lo + 1;
    lo = hi + 1;
  }
  t.affine_lo = best_lo;
  t.affine_hi = best_lo + best_len - 1;
  t.affine_delta = t.entry[best_lo] - (best_lo << 23);
  // The kernels' fast path takes narrowed amax in the affine range as they are.
  for (uint32_t e = t.affine_lo; e <= t.affine_hi; ++e) {
    MXTRAIN_CHECK(NarrowExact(t, e), "scale table: rule ", Name(rule), " binade ", e,
                  " cannot take an amax narrowed to 16 bits");
  }
  return t;
}

}  // namespace

const ScaleTable& ScaleTableFor(ScaleRule rule, ElementFormat format) {
  static const ScaleTable kTables[4][2] = {
      {Build(ScaleRule::kRceil, ElementFormat::kE4M3),
       Build(ScaleRule::kRceil, ElementFormat::kE5M2)},
      {Build(ScaleRule::kFloor, ElementFormat::kE4M3),
       Build(ScaleRule::kFloor, ElementFormat::kE5M2)},
      {Build(ScaleRule::kCeil, ElementFormat::kE4M3),
       Build(ScaleRule::kCeil, ElementFormat::kE5M2)},
      {Build(ScaleRule::kEven, ElementFormat::kE4M3),
       Build(ScaleRule::kEven, ElementFormat::kE5M2)},
  };
  // Rows in ScaleRule's order, columns in ElementFormat's.
  return kTables[static_cast<int>(rule)][format == ElementFormat::kE4M3 ? 0 : 1];
}

}  // namespace mxtrain::internal
