// The 16-bit encoder (every target but SCALAR): full blocks in 16-bit lanes, twice the
// lanes per instruction (docs/decisions.md "16-bit quantization lanes"); lanes
// it cannot encode exactly go back to the fp32 encoder of encode-inl.h (EncodeSlowLanes).
// One of the quantizer's kernel families (quantize_simd.cc compiles them for every target):
// included once per Highway target, hence the toggling guard of Highway's own -inl.h files.
#if defined(MXTRAIN_QUANTIZE_ENCODE16_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef MXTRAIN_QUANTIZE_ENCODE16_INL_H_
#undef MXTRAIN_QUANTIZE_ENCODE16_INL_H_
#else
#define MXTRAIN_QUANTIZE_ENCODE16_INL_H_
#endif

#include <hwy/cache_control.h>
#include <hwy/highway.h>

#include "quantize/encode-inl.h"
#include "quantize/prefetch-inl.h"

HWY_BEFORE_NAMESPACE();
namespace mxtrain::internal {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

#if HWY_TARGET != HWY_SCALAR
// ---- The 16-bit encoder -------------------------------------------------------------

using D16 = hn::ScalableTag<uint16_t>;
using V16 = hn::Vec<D16>;
using M16 = hn::Mask<D16>;
using D8 = hn::Rebind<uint8_t, D16>;
// 16-bit vectors per block of 32 (1 on AVX-512); each covers two fp32 vectors.
constexpr size_t kBlockVecs16 = kBlock / hn::MaxLanes(D16());

// The constants of the 16-bit encoder for one element format.
template <ElementFormat kFormat>
struct Enc16 {
  static constexpr bool kE4M3 = kFormat == ElementFormat::kE4M3;
  static constexpr int kShift = kE4M3 ? 4 : 5;              // 7 - mantissa bits
  static constexpr int kMinNormalExp = kE4M3 ? -6 : -14;    // of the element format
  static constexpr int kRebias = (kE4M3 ? 120 : 112) << 7;  // (127 - element bias) << 7
  // The largest element, 448 | 57344, as a bf16 pattern less kRebias.
  static constexpr uint16_t kMaxBits = (kE4M3 ? 0x43E0 : 0x4760) - kRebias;
  // Round half to even: add 2^(kShift-1) - 1 and the lowest kept bit, then shift.
  static constexpr uint16_t kRound = (1 << (kShift - 1)) - 1;
  // The smallest scale byte whose multiplication by 2^(127-b) is a subtraction of
  // (b - kMinScale) << 7 from the bf16 pattern, once rebased by kRebias.
  static constexpr int kMinScale = kE4M3 ? 7 : 15;
  // Per block (or column) of scale byte b (not NaN): what a saturating subtraction takes
  // off |bits| to give an element normal's (exponent, 7-bit mantissa) in the element's own
  // bias, less kRound, so that rounding needs no add of its own (scale bytes up to kMinScale
  // send every nonzero lane to the fp32 encoder, so it is never negative); zero stays zero ...
  static uint16_t Sub(uint8_t b) {
    if (b <= kMinScale) return 0;
    return static_cast<uint16_t>(((int{b} - kMinScale) << 7) - kRound);
  }
  // ... and one less than the smallest |bits| that is an input normal and an element normal
  // once scaled: lanes with |bits| - 1 below it (nonzero and smaller) take the fp32 encoder,
  // every nonzero lane when b <= kMinScale.
  static uint16_t SlowBelow(uint8_t b) {
    if (b <= kMinScale) return 0xFFFE;
    return static_cast<uint16_t>((std::max(1, int{b} + kMinNormalExp) << 7) - 1);
  }
};

// Enc16::Sub and ::SlowBelow on a vector of scale bytes (none NaN), in 32-bit lanes or in
// 16-bit ones (signed: every value fits, and 0xFFFE is -2 there).
template <ElementFormat kFormat, class D>
HWY_INLINE void OffsetsV(D d, hn::Vec<D> b, hn::Vec<D>& sub, hn::Vec<D>& slow_below) {
  using E = Enc16<kFormat>;
  using T = hn::TFromD<D>;
  static_assert(hwy::IsSigned<T>());
  const auto low = hn::Lt(b, hn::Set(d, E::kMinScale + 1));
  const auto rebase = hn::ShiftLeft<7>(hn::Sub(b, hn::Set(d, E::kMinScale)));
  sub = hn::IfThenZeroElse(low, hn::Sub(rebase, hn::Set(d, E::kRound)));
  const auto thr =
      hn::ShiftLeft<7>(hn::Max(hn::Add(b, hn::Set(d, E::kMinNormalExp)), hn::Set(d, 1)));
  slow_below = hn::IfThenElse(low, hn::Set(d, static_cast<T>(0xFFFE)), hn::Sub(thr, hn::Set(d, 1)));
}

// ScalesV (encode-inl.h) on |bf16| patterns in 16-bit lanes: twice the lanes per op. Inside
// the table's affine binades entry[E] is (E << 23) + affine_delta, so a lane's byte is
// (E + (delta >> 23)) mod 2^9, a byte there, plus one where its 7 mantissa bits exceed the
// top 7 of delta's mantissa (the lower 16 bits of a bf16 amax are zero, so there is no
// tie). False, with `b` unset, when a lane lies outside those binades (zero, subnormal or
// clamped amax): the caller takes ScalesV's table lookup on 32-bit lanes then.
HWY_INLINE bool ScalesV16(const ScaleTable* table, V16 amax, V16& b) {
  const hn::RebindToSigned<D16> ds;
  const auto a = hn::BitCast(ds, amax);  // 0 .. 0x7FFF
  const auto e = hn::ShiftRight<7>(a);
  const auto outside = hn::Or(hn::Lt(e, hn::Set(ds, static_cast<int16_t>(table->affine_lo))),
                              hn::Gt(e, hn::Set(ds, static_cast<int16_t>(table->affine_hi))));
  if (HWY_UNLIKELY(!hn::AllFalse(ds, outside))) return false;
  const int16_t delta_exponent = static_cast<int16_t>(table->affine_delta >> 23);
  const int16_t delta_mantissa7 = static_cast<int16_t>((table->affine_delta & 0x7FFFFF) >> 16);
  const auto above = hn::Gt(hn::And(a, hn::Set(ds, 0x7F)), hn::Set(ds, delta_mantissa7));
  const auto byte = hn::And(hn::Add(e, hn::Set(ds, delta_exponent)), hn::Set(ds, 0xFF));
  b = hn::BitCast(D16(), hn::Sub(byte, hn::VecFromMask(ds, above)));  // `above` lanes are -1
  return true;
}

// |h| of 16-bit (bf16) patterns.
HWY_INLINE V16 Abs16(V16 h) { return hn::And(h, hn::Set(D16(), 0x7FFF)); }

// The lanes of h the 16-bit encoder may not take: nonzero and below the threshold, i.e.
// |h| - 1 below slow_below (Enc16::SlowBelow; zero wraps around to 0xFFFF).
HWY_INLINE M16 SlowLanes16(V16 h, V16 slow_below) {
  return hn::Lt(hn::Sub(Abs16(h), hn::Set(D16(), 1)), slow_below);
}

// The slow-lane tests of a run of vectors, accumulated (start from AllFast16, update with
// StillFast16, test with AnySlow16). On AVX-512 the accumulator is the mask of the lanes
// that were fast in every vector so far, and each test is one compare masked by it (vpcmpuw
// with a write mask), so accumulating takes no mask operation of its own (kandn would share
// port 0 with the encode): Highway 1.0.3 has no compare under a mask, only a compare and
// then AndNot of the masks. Below AVX-512 there are no mask registers and no unsigned
// 16-bit compare (Highway's Lt takes two XORs of the sign bit, a compare and then an AndNot
// of the masks: 5 uops with the decrement); instead slow_below -sat (|h| - 1), nonzero
// exactly where |h| - 1 < slow_below, is OR-ed into a vector (3 uops), tested once per run.
#if HWY_TARGET <= HWY_AVX3
using Fast16 = M16;
HWY_INLINE Fast16 AllFast16() { return hn::FirstN(D16(), hn::Lanes(D16())); }
HWY_INLINE Fast16 StillFast16(Fast16 fast, V16 h, V16 slow_below) {
  const V16 below = hn::Sub(Abs16(h), hn::Set(D16(), 1));
  return M16{_mm512_mask_cmp_epu16_mask(fast.raw, below.raw, slow_below.raw, _MM_CMPINT_NLT)};
}
HWY_INLINE bool AnySlow16(Fast16 fast) { return !hn::AllTrue(D16(), fast); }
#else
using Fast16 = V16;  // nonzero in the lanes that were slow in some vector
HWY_INLINE Fast16 AllFast16() { return hn::Zero(D16()); }
HWY_INLINE Fast16 StillFast16(Fast16 slow, V16 h, V16 slow_below) {
  return hn::Or(slow, hn::SaturatedSub(slow_below, hn::Sub(Abs16(h), hn::Set(D16(), 1))));
}
HWY_INLINE bool AnySlow16(Fast16 slow) {
  return !hn::AllTrue(D16(), hn::Eq(slow, hn::Zero(D16())));
}
#endif

// Codes (in the high byte of each lane; the low byte is junk) of 16-bit values h scaled by
// the per-lane subtrahends `sub` (Enc16::Sub, kRound folded in). `fast` loses the lanes of
// SlowLanes16 (StillFast16): the caller encodes those lanes again with the fp32
// encoder. Zero lanes saturate to 0, which rounds to code 0 before the sign. kSaturate: clamp
// at the largest element; rceil and ceil never exceed it
// (Exhaustive.RceilAndCeilNeverRoundPastTheLargestElement), so their kernels leave the min
// out (one vector op of about ten). The code is built in the high byte
// so that the sign is one bitwise select from h and no shift back is needed (docs/decisions.md,
// "16-bit quantization lanes").
template <ElementFormat kFormat, bool kSaturate = true>
HWY_INLINE V16 Encode16(V16 h, V16 sub, V16 slow_below, Fast16& fast) {
  using E = Enc16<kFormat>;
  const D16 d;
  fast = StillFast16(fast, h, slow_below);
  // |h| scaled, rebased and plus kRound; saturated at the largest element (plus kRound).
  V16 c = hn::SaturatedSub(Abs16(h), sub);
  if constexpr (kSaturate) c = hn::Min(c, hn::Set(d, E::kMaxBits + E::kRound));
  // Round half to even: (c + lowest kept bit) >> kShift, taken as a shift left by
  // 8 - kShift so that the code lands in the high byte.
  if constexpr (E::kShift == 4) {
    // The lowest kept bit of |h| scaled is bit 4 of h itself (the scaling subtracts a
    // multiple of 128, kRound aside), already in place once shifted: lsb << 4 = h & 0x10.
    // The sign comes in the same AND and add, as c << 4 + 0x10 stays below 0x8000 (c is at
    // most the largest element plus kRound, 0x7E7, on the lanes that are not redone).
    return hn::Add(hn::ShiftLeft<4>(c), hn::And(h, hn::Set(d, 0x8010)));
  } else {
    const V16 mag = hn::ShiftLeft<8 - E::kShift>(
        hn::Add(c, hn::And(hn::ShiftRight<E::kShift>(c), hn::Set(d, 1))));
    return hn::OrAnd(mag, h, hn::Set(d, 0x8000));  // the sign
  }
}

// The codes of Encode16 (high bytes) to Lanes(D16()) bytes.
HWY_INLINE void StoreCodes16(V16 codes, uint8_t* out) {
  const V16 low = hn::ShiftRight<8>(codes);
#if HWY_TARGET <= HWY_AVX3
  // One truncating vpmovwb: Highway 1.0.3's TruncateTo takes a shuffle and a permute here.
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(out), _mm512_cvtepi16_epi8(low.raw));
#else
  hn::StoreU(hn::TruncateTo(D8(), low), D8(), out);
#endif
}

#if HWY_TARGET <= HWY_AVX3_DL
// AVX512-VBMI: output byte i is byte pick(i) of the 128-byte concatenation [a, b], one
// two-register byte permute (vpermt2b). Highway 1.0.3 has no two-register table lookup
// (its TableLookupBytes stays within 16-byte blocks).
struct alignas(64) ByteTable {
  uint8_t index[64];
};
template <typename Pick>
constexpr ByteTable MakeByteTable(Pick pick) {
  ByteTable t{};
  for (int i = 0; i < 64; ++i) t.index[i] = static_cast<uint8_t>(pick(i));
  return t;
}
HWY_INLINE __m512i PickBytes(__m512i a, __m512i b, const ByteTable& table) {
  return _mm512_permutex2var_epi8(a, _mm512_load_si512(table.index), b);
}
#endif

#if HWY_TARGET <= HWY_AVX3
// The high bytes of a's lanes, then of b's: one vector of 64 codes. VBMI: one vpermt2b
// (PickBytes). AVX-512 without it: vpackuswb interleaves the 128-bit blocks (a0 b0 a1 b1
// ...; codes fit a byte unsigned), vpermq puts a's four quarters first. Highway 1.0.3's
// ConcatOdd emits the same permutes (as vpermi2b on VBMI); the quantizer's figures were
// measured with this form, so it stays until a measurement says otherwise.
using DBytes = hn::Repartition<uint8_t, D16>;  // a whole vector of bytes
HWY_INLINE hn::Vec<DBytes> HighBytesOf2(V16 a, V16 b) {
#if HWY_TARGET <= HWY_AVX3_DL
  static constexpr ByteTable kOdd = MakeByteTable([](int i) { return 2 * i + 1; });
  return hn::Vec<DBytes>{PickBytes(a.raw, b.raw, kOdd)};
#else
  const __m512i packed = _mm512_packus_epi16(hn::ShiftRight<8>(a).raw, hn::ShiftRight<8>(b).raw);
  return hn::Vec<DBytes>{
      _mm512_permutexvar_epi64(_mm512_set_epi64(7, 5, 3, 1, 6, 4, 2, 0), packed)};
#endif
}
#endif

// StoreCodes16 of a then b, to 2 * Lanes(D16()) consecutive bytes. kStream: non-temporal
// stores, `out` aligned to 2 * Lanes(D16()) bytes (the caller issues hwy::FlushStream
// before the bytes are read elsewhere).
template <bool kStream = false>
HWY_INLINE void StoreCodes16x2(V16 a, V16 b, uint8_t* out) {
#if HWY_TARGET <= HWY_AVX3
  const hn::Vec<DBytes> codes = HighBytesOf2(a, b);
  if constexpr (kStream) {
    hn::Stream(codes, DBytes(), out);
  } else {
    hn::StoreU(codes, DBytes(), out);
  }
#else
  if constexpr (kStream) {
    // The high bytes of both as one full vector of bytes (a stream of a half vector is not
    // a half-vector store on every target).
    const hn::Repartition<uint8_t, D16> d8;
    hn::Stream(hn::ConcatOdd(d8, hn::BitCast(d8, b), hn::BitCast(d8, a)), d8, out);
  } else {
    // One pack of both (shifts, vpackuswb and, on AVX2, vpermq) and one store: two
    // StoreCodes16 took a shift, vpshufb and vpermq each, and two half stores.
    const hn::Repartition<uint8_t, D16> d8;
    hn::StoreU(hn::ConcatOdd(d8, hn::BitCast(d8, b), hn::BitCast(d8, a)), d8, out);
  }
#endif
}

// Two fp32 vectors (as bits) to one vector of their top 16 bits, rounded to odd: the low
// 16 bits OR-ed into the lowest kept bit. v + 0xFFFF carries into bit 16 exactly when the
// low half is nonzero, and a carry flips bit 16, so bit 16 of v + 0xFFFF is bit 16 of v XOR
// the sticky bit, and v | ((v + 0xFFFF) & 0x10000) has bit 16 of v OR the sticky bit in
// place (where bit 16 of v is set it stays set): an add and one ternary-logic op on
// AVX-512, then one byte permute takes the high halves (5 vector uops per 32 elements,
// where shifting, a min, an OR and vpermt2w took 11). Elsewhere the OR of an AND is two
// ops (the form v | ((v ^ (v + 0xFFFF)) & 0x10000), equal to it for all bits, took a third).
HWY_INLINE VU OrAnd3(VU a, VU b, VU c) {
#if HWY_TARGET <= HWY_AVX3
  return VU{_mm512_ternarylogic_epi32(a.raw, b.raw, c.raw, 0xF8)};  // a | (b & c)
#else
  return hn::OrAnd(a, b, c);
#endif
}

HWY_INLINE V16 NarrowToOdd(VU lo, VU hi) {
  const DU du;
  const auto odd = [&](VU v) {
    const VU carried = hn::Add(v, hn::Set(du, 0xFFFF));
    return OrAnd3(v, carried, hn::Set(du, 0x10000));
  };
#if HWY_TARGET <= HWY_AVX3_DL
  // Bytes 2 and 3 of each 32-bit lane of lo, then of hi.
  static constexpr ByteTable kHighHalves =
      MakeByteTable([](int i) { return 4 * (i / 2) + 2 + i % 2; });
  return V16{PickBytes(odd(lo).raw, odd(hi).raw, kHighHalves)};
#else
  return hn::ConcatOdd(D16(), hn::BitCast(D16(), odd(hi)), hn::BitCast(D16(), odd(lo)));
#endif
}

// The 16-bit vector i of the elements at `index` of the source.
template <bool kBf16>
HWY_INLINE V16 Load16(const void* base, int64_t index) {
  if constexpr (kBf16) {
    return hn::LoadU(D16(), static_cast<const uint16_t*>(base) + index);
  } else {
    const float* p = static_cast<const float*>(base) + index;
    const size_t n = hn::Lanes(DF());
    return NarrowToOdd(hn::LoadU(DU(), reinterpret_cast<const uint32_t*>(p)),
                       hn::LoadU(DU(), reinterpret_cast<const uint32_t*>(p + n)));
  }
}

// The lanes of a mask as bits (lane i: bit i).
HWY_INLINE uint64_t LaneBits16(M16 m) {
  uint8_t bytes[8] = {};
  hn::StoreMaskBits(D16(), m, bytes);
  uint64_t bits = 0;
  for (int i = 7; i >= 0; --i) bits = (bits << 8) | bytes[i];
  return bits;
}

// The exact path for the lanes the 16-bit encoder may not take: the fp32 encoder
// (EncodeV) on the elements index + i for each bit i of `lanes`, one at a time in a 128-bit
// vector, each with its column's scale byte lane_scales[i], or all with `scale`
// (lane_scales == nullptr). The other lanes of their vectors keep the 16-bit encoder's
// codes, which are exact. Redoing whole vectors with the full-width fp32 encoder instead
// cost 12% of bf16 columnwise time at 4096 x 4096 on AVX-512 (a slow lane in about a third
// of the rows of Gaussian data): its multiply and add were the kernel's only 512-bit
// floating-point ops, and the memcpy-style baseline run right after such a kernel was
// slower too (a lower AVX-512 frequency licence, by all appearances). The branchy scalar
// encoder (EncodeElement) per lane was slower than this in cache (bf16 dual 256 x 1024:
// 0.051 against 0.048 ms).
template <bool kBf16, ElementFormat kFormat>
HWY_NOINLINE void EncodeSlowLanes(const void* base, int64_t index, uint64_t lanes,
                                  const uint8_t* lane_scales, uint8_t scale, uint8_t* out) {
  const hn::CappedTag<float, 4> d4;
  for (; lanes != 0; lanes &= lanes - 1) {
    const size_t i = hwy::Num0BitsBelowLS1Bit_Nonzero64(lanes);
    const uint8_t b = lane_scales != nullptr ? lane_scales[i] : scale;
    const float scaled =
        LoadScalar<kBf16>(base, index + static_cast<int64_t>(i)) * E8M0InverseScale(b);
    out[i] = static_cast<uint8_t>(
        hn::GetLane(EncodeV<kFormat, true, decltype(d4)>(hn::Set(d4, scaled))));
  }
}

// kBlocks adjacent full blocks of 32 at `index` whose Enc16::Sub and ::SlowBelow are both
// halves of sub2[j] and slow2[j] (a 32-bit broadcast from memory is a load alone; a 16-bit
// one also takes a shuffle). The lanes the fp32 encoder must redo are taken out of `fast`
// (SlowLanesOfBlock16 finds them afterwards, outside the hot loop).
template <bool kBf16, ElementFormat kFormat, size_t kBlocks, bool kSaturate = true>
HWY_INLINE void EncodeBlocks16(const void* base, int64_t index, const uint32_t* sub2,
                               const uint32_t* slow2, uint8_t* out, Fast16& fast) {
  const D16 d;
  const size_t n = hn::Lanes(d);
  constexpr size_t kVecs = kBlocks * kBlockVecs16;
  V16 codes[kVecs];
  for (size_t i = 0; i < kVecs; ++i) {
    const size_t j = i / kBlockVecs16;
    codes[i] = Encode16<kFormat, kSaturate>(
        Load16<kBf16>(base, index + static_cast<int64_t>(i * n)),
        hn::BitCast(d, hn::Set(DU(), sub2[j])), hn::BitCast(d, hn::Set(DU(), slow2[j])), fast);
  }
  for (size_t i = 0; i + 1 < kVecs; i += 2) {
    StoreCodes16x2(codes[i], codes[i + 1], out + i * n);
  }
  if constexpr (kVecs % 2 == 1) StoreCodes16(codes[kVecs - 1], out + (kVecs - 1) * n);
}

// A bit per lane of the block at `index` that the exact path must redo: the slow-lane test
// of Encode16 alone, run only for blocks whose encode reported any.
template <bool kBf16, ElementFormat kFormat>
HWY_INLINE uint64_t SlowLanesOfBlock16(const void* base, int64_t index, uint8_t scale) {
  using E = Enc16<kFormat>;
  const D16 d;
  const size_t n = hn::Lanes(d);
  uint64_t redo = 0;
  const V16 slow_below = hn::Set(d, E::SlowBelow(scale));
  for (size_t i = 0; i < kBlockVecs16; ++i) {
    const M16 slow =
        SlowLanes16(Load16<kBf16>(base, index + static_cast<int64_t>(i * n)), slow_below);
    redo |= LaneBits16(slow) << (i * n);
  }
  return redo;
}

// Enc16::Sub and ::SlowBelow of one block's scale byte b (not NaN), each in both halves of
// a 32-bit word: StoreOffsets2's lone-block form.
template <ElementFormat kFormat>
HWY_INLINE void StoreOffsets2(uint8_t b, uint32_t* sub2, uint32_t* slow2) {
  *sub2 = Enc16<kFormat>::Sub(b) * 0x10001u;
  *slow2 = Enc16<kFormat>::SlowBelow(b) * 0x10001u;
}

// A full block through the 16-bit encoder, NaN blocks and redos included.
template <bool kBf16, ElementFormat kFormat>
HWY_INLINE void QuantizeBlock16(const void* base, int64_t index, uint8_t scale, uint8_t* out) {
  if (HWY_UNLIKELY(scale == kE8M0NaN)) {
    std::memset(out, 0x7F, kBlock);
    return;
  }
  Fast16 fast = AllFast16();
  uint32_t sub2, slow2;
  StoreOffsets2<kFormat>(scale, &sub2, &slow2);
  EncodeBlocks16<kBf16, kFormat, 1>(base, index, &sub2, &slow2, out, fast);
  if (HWY_UNLIKELY(AnySlow16(fast))) {
    EncodeSlowLanes<kBf16, kFormat>(
        base, index, SlowLanesOfBlock16<kBf16, kFormat>(base, index, scale), nullptr, scale, out);
  }
}

// |x| of one 16-bit (bf16) vector, widened to fp32 lanes that hold the larger of each
// pair, as fp32 bits: the per-block amax input of TransposeMax.
HWY_INLINE VI PairMaxBits(V16 abs16) {
  const VU u = hn::BitCast(DU(), abs16);
  return hn::BitCast(DI(), hn::Max(hn::ShiftLeft<16>(u), hn::And(u, hn::Set(DU(), 0xFFFF0000u))));
}

// The 16-bit encoder's subtrahends and thresholds (Enc16::Sub, ::SlowBelow) of the scale
// bytes b (one per 32-bit lane, none NaN), each in both halves of a 32-bit word, to
// sub2[0..Lanes) and slow2[0..Lanes): what EncodeBlocks16 broadcasts per block.
template <ElementFormat kFormat>
HWY_INLINE void StoreOffsets2(VI b, uint32_t* sub2, uint32_t* slow2) {
  VI sub, slow_below;
  OffsetsV<kFormat>(DI(), b, sub, slow_below);
  hn::StoreU(hn::BitCast(DU(), hn::Or(sub, hn::ShiftLeft<16>(sub))), DU(), sub2);
  hn::StoreU(hn::BitCast(DU(), hn::Or(slow_below, hn::ShiftLeft<16>(slow_below))), DU(), slow2);
}

// kLanes consecutive full blocks at `index` in 16-bit lanes, given their scale bytes b (one
// per 32-bit lane): the bytes stored to `scales`, then the encode (NaN blocks and redos
// included). kSaturate as for Encode16. kCopy: the blocks' 16-bit patterns are read from `copy` (an
// fp32 source's, narrowed already) rather than from the source; the redos read the source.
template <bool kBf16, ElementFormat kFormat, bool kSaturate, bool kCopy = false>
HWY_INLINE void EncodeBatch16(const QuantSource& src, int64_t index, VI b, uint8_t* out,
                              uint8_t* scales, const uint16_t* copy = nullptr) {
  constexpr size_t kLanes = hn::MaxLanes(DI());
  StoreLowBytes(hn::BitCast(DU(), b), scales);
  if (HWY_UNLIKELY(!hn::AllFalse(DI(), hn::Eq(b, hn::Set(DI(), kE8M0NaN))))) {
    for (size_t j = 0; j < kLanes; ++j) {
      QuantizeBlock16<kBf16, kFormat>(src.x, index + static_cast<int64_t>(j) * kBlock, scales[j],
                                      out + j * kBlock);
    }
    return;
  }
  alignas(64) uint32_t sub[kLanes], slow_below[kLanes];
  StoreOffsets2<kFormat>(b, sub, slow_below);
  // Without this, GCC forwards the stores to the broadcasts below as 2-3 shuffles each
  // (vpsrldq/valignd, vpbroadcastd), on the port the encode needs; from memory a broadcast
  // is a load alone.
  asm volatile("" : : "r"(sub), "r"(slow_below) : "memory");
  const void* x = src.x;
  Fast16 fast = AllFast16();
  constexpr size_t kStep = kLanes % 2 == 0 ? 2 : 1;  // pairs share one pack (StoreCodes16x2)
  for (size_t j = 0; j < kLanes; j += kStep) {
    const int64_t at = static_cast<int64_t>(j) * kBlock;
    if constexpr (kCopy) {
      EncodeBlocks16<true, kFormat, kStep, kSaturate>(copy, at, sub + j, slow_below + j, out + at,
                                                      fast);
    } else {
      EncodeBlocks16<kBf16, kFormat, kStep, kSaturate>(x, index + at, sub + j, slow_below + j,
                                                       out + at, fast);
    }
  }
  if (HWY_UNLIKELY(AnySlow16(fast))) {
    for (size_t j = 0; j < kLanes; ++j) {
      const int64_t at = index + static_cast<int64_t>(j) * kBlock;
      const uint64_t redo = SlowLanesOfBlock16<kBf16, kFormat>(x, at, scales[j]);
      if (redo != 0)
        EncodeSlowLanes<kBf16, kFormat>(x, at, redo, nullptr, scales[j], out + j * kBlock);
    }
  }
}

// kLanes consecutive full blocks of 16-bit lanes: amax, scales, encode.
template <bool kBf16, ElementFormat kFormat, bool kSaturate>
HWY_INLINE void BlockBatch16(const QuantSource& src, int64_t index, uint8_t* out, uint8_t* scales) {
  constexpr size_t kLanes = hn::MaxLanes(DI());
  VI block_amax[kLanes];
  for (size_t j = 0; j < kLanes; ++j) {
    const int64_t at = index + static_cast<int64_t>(j) * kBlock;
    PrefetchAhead<kBf16>(src.x, at);
    if constexpr (kBf16) {
      const size_t n = hn::Lanes(D16());
      V16 amax = hn::Zero(D16());
      for (size_t i = 0; i < kBlockVecs16; ++i) {
        amax = hn::Max(amax, Abs16(Load16<true>(src.x, at + static_cast<int64_t>(i * n))));
      }
      block_amax[j] = hn::BitCast(DI(), amax);  // 16-bit maxima, paired up after the reduction
    } else {
      const size_t n = hn::Lanes(DF());
      VI amax = hn::Zero(DI());
      for (size_t i = 0; i < kBlockVecs; ++i) {
        amax = hn::Max(amax, AbsBits(LoadF<false>(src.x, at + static_cast<int64_t>(i * n))));
      }
      block_amax[j] = amax;
    }
  }
  VI amax = TransposeMax<kLanes, kBf16>(block_amax);
  if constexpr (kBf16) amax = PairMaxBits(hn::BitCast(D16(), amax));
  EncodeBatch16<kBf16, kFormat, kSaturate>(src, index, ScalesV(src.scale_table, amax), out, scales);
}

#endif  // HWY_TARGET != HWY_SCALAR

#if HWY_TARGET != HWY_SCALAR
constexpr bool k16 = true;
#else
constexpr bool k16 = false;
#endif

}  // namespace HWY_NAMESPACE
}  // namespace mxtrain::internal
HWY_AFTER_NAMESPACE();

#endif  // MXTRAIN_QUANTIZE_ENCODE16_INL_H_
