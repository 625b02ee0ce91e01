// The fp32-lane pieces every quantizer kernel shares: loads of fp32 or bf16 sources, the
// element encoder of NUMERICS.md §1, the scale bytes of a vector of amax, one block's
// encode, and the transposing reduction of several blocks' amax.
// One of the quantizer's kernel families (quantize_simd.cc compiles them for every target):
// included once per Highway target, hence the toggling guard of Highway's own -inl.h files.
#if defined(MXTRAIN_QUANTIZE_ENCODE_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef MXTRAIN_QUANTIZE_ENCODE_INL_H_
#undef MXTRAIN_QUANTIZE_ENCODE_INL_H_
#else
#define MXTRAIN_QUANTIZE_ENCODE_INL_H_
#endif

#include <hwy/highway.h>

#include <algorithm>
#include <cstring>
#include <limits>

#include "quantize/kernels.h"

HWY_BEFORE_NAMESPACE();
namespace mxtrain::internal {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

using DF = hn::ScalableTag<float>;
using DI = hn::RebindToSigned<DF>;
using DU = hn::RebindToUnsigned<DF>;
using DU8 = hn::Rebind<uint8_t, DF>;
using DU16 = hn::Rebind<uint16_t, DF>;
using VF = hn::Vec<DF>;
using VI = hn::Vec<DI>;
using VU = hn::Vec<DU>;

constexpr int64_t kBlock = 32;

template <bool kBf16>
HWY_INLINE VF LoadF(const void* base, int64_t index) {
  if constexpr (kBf16) {
    const auto h = hn::LoadU(DU16(), static_cast<const uint16_t*>(base) + index);
    return hn::BitCast(DF(), hn::ShiftLeft<16>(hn::PromoteTo(DU(), h)));
  } else {
    return hn::LoadU(DF(), static_cast<const float*>(base) + index);
  }
}

// One element as fp32, for the scalar tails.
template <bool kBf16>
HWY_INLINE float LoadScalar(const void* base, int64_t index) {
  if constexpr (kBf16) return Bf16ToF32(static_cast<const uint16_t*>(base)[index]);
  return static_cast<const float*>(base)[index];
}

HWY_INLINE VI AbsBits(VF v) { return hn::And(hn::BitCast(DI(), v), hn::Set(DI(), 0x7FFFFFFF)); }

// The element encoder of NUMERICS.md §1 on fp32 lanes; codes in the low byte of each lane.
// kFinite: the caller guarantees finite lanes (a quantized block whose scale is not NaN), so
// the NaN and Inf selects are left out of the hot loop.
// D: the fp32 tag (DF but for the slow lanes of the 16-bit encoder, EncodeSlowLanes).
template <ElementFormat kFormat, bool kFinite, class D = DF>
HWY_INLINE hn::Vec<hn::RebindToSigned<D>> EncodeV(hn::Vec<D> v) {
  const hn::RebindToSigned<D> di;
  const D df;
  using VI = hn::Vec<hn::RebindToSigned<D>>;
  constexpr bool kE4M3 = kFormat == ElementFormat::kE4M3;
  constexpr int kMan = kE4M3 ? 3 : 2;
  constexpr int32_t kMaxBits = kE4M3 ? 0x43E00000 : 0x47600000;        // 448 | 57344
  constexpr int32_t kMinNormalBits = kE4M3 ? 0x3C800000 : 0x38800000;  // 2^-6 | 2^-14
  // fp32 exponent 127 + e maps to the element's biased exponent e + bias: subtracting
  // (127 - bias) << kMan from the shifted bits is folded into the rounding constant.
  constexpr int32_t kRebias = (127 - (kE4M3 ? 7 : 15)) << (23 - kMan) << kMan;
  constexpr int32_t kRound = ((1 << (22 - kMan)) - 1) - kRebias;
  // |v| + 2^(23 + min_subnormal_exp) has an ulp of exactly one element subnormal step.
  constexpr float kSubnormalMagic = kE4M3 ? 16384.0f : 128.0f;  // 2^14 | 2^7
  constexpr int32_t kSubnormalMagicBits = kE4M3 ? 0x46800000 : 0x43000000;

  const VI bits = hn::BitCast(di, v);
  const VI abs = hn::And(bits, hn::Set(di, 0x7FFFFFFF));
  const VI clamped = hn::Min(abs, hn::Set(di, kMaxBits));  // saturate (Inf too)
  const VI lsb = hn::And(hn::ShiftRight<23 - kMan>(clamped), hn::Set(di, 1));
  const VI normal = hn::ShiftRight<23 - kMan>(hn::Add(hn::Add(clamped, hn::Set(di, kRound)), lsb));
  const VI subnormal =
      hn::Sub(hn::BitCast(di, hn::Add(hn::BitCast(df, clamped), hn::Set(df, kSubnormalMagic))),
              hn::Set(di, kSubnormalMagicBits));
  VI code = hn::IfThenElse(hn::Lt(clamped, hn::Set(di, kMinNormalBits)), subnormal, normal);
  code = hn::OrAnd(code, hn::ShiftRight<24>(bits), hn::Set(di, 0x80));  // sign
  if constexpr (!kFinite) {
    if constexpr (!kE4M3) {  // E5M2 keeps Inf
      code = hn::IfThenElse(
          hn::Eq(abs, hn::Set(di, 0x7F800000)),
          hn::OrAnd(hn::Set(di, 0x7C), hn::ShiftRight<24>(bits), hn::Set(di, 0x80)), code);
    }
    code = hn::IfThenElse(hn::Gt(abs, hn::Set(di, 0x7F800000)), hn::Set(di, 0x7F), code);
  }
  return code;
}

// The low byte of each 32-bit lane of v to out. On AVX-512 one vpmovdb: Highway 1.0.3's
// TruncateTo from 32-bit lanes to bytes gives wrong bytes on AVX3_DL (its VBMI path), which
// every kernel test caught on that target (to 16-bit lanes it is right there).
HWY_INLINE void StoreLowBytes(VU v, uint8_t* out) {
#if HWY_TARGET <= HWY_AVX3
  _mm_storeu_si128(reinterpret_cast<__m128i*>(out), _mm512_cvtepi32_epi8(v.raw));
#else
  hn::StoreU(hn::TruncateTo(DU8(), v), DU8(), out);
#endif
}

HWY_INLINE void StoreCodes(VI codes, uint8_t* out) { StoreLowBytes(hn::BitCast(DU(), codes), out); }

// The factor a block is multiplied by before encoding: NaN for a NaN block, so that every
// element encodes to 0x7F.
HWY_INLINE float BlockMultiplier(uint8_t scale) {
  return scale == kE8M0NaN ? std::numeric_limits<float>::quiet_NaN() : E8M0InverseScale(scale);
}

// Whether any lane of amax (fp32 bits) lies outside the table's affine binades.
HWY_INLINE bool AnyOutsideAffine(const ScaleTable* table, VI amax) {
  const DU du;
  const VU exponent = hn::ShiftRight<23>(hn::BitCast(du, amax));
  return !hn::AllFalse(du, hn::Gt(hn::Sub(exponent, hn::Set(du, table->affine_lo)),
                                  hn::Set(du, table->affine_hi - table->affine_lo)));
}

// The scale bytes (one per lane) of amax given as fp32 bits: the vector form of
// ScaleFromTable (scale_table.h) on the rule's table. While every lane's binade lies in the
// table's affine range (all but zero, subnormal and clamped amax) the entry is the exponent
// field plus a constant; otherwise the 16-lane gather, ~20 cycles on Zen 4 (measured there:
// 11% of bf16 columnwise time with the gather always taken).
HWY_INLINE VI ScalesV(const ScaleTable* table, VI amax) {
  const DI di;
  const DU du;
  VI entry;
  if (HWY_LIKELY(!AnyOutsideAffine(table, amax))) {
    entry = hn::BitCast(di, hn::Add(hn::And(hn::BitCast(du, amax), hn::Set(du, 0x7F800000u)),
                                    hn::Set(du, table->affine_delta)));
  } else {
    entry = hn::GatherIndex(di, reinterpret_cast<const int32_t*>(table->entry),
                            hn::BitCast(di, hn::ShiftRight<23>(hn::BitCast(du, amax))));
  }
  const VI mant = hn::Set(di, 0x7FFFFF);
  const VI above = hn::VecFromMask(di, hn::Gt(hn::And(amax, mant), hn::And(entry, mant)));
  return hn::Sub(hn::ShiftRight<23>(entry), above);  // `above` lanes are -1
}

// Vectors per block of 32 (2 on AVX-512, 32 on the SCALAR target).
constexpr size_t kBlockVecs = kBlock / hn::MaxLanes(DF());

// Encodes `vecs` (already multiplied by the block's factor) of one block to out.
template <ElementFormat kFormat>
HWY_INLINE void EncodeBlock(const VF* vecs, uint8_t scale, uint8_t* out) {
  if (HWY_UNLIKELY(scale == kE8M0NaN)) {
    std::memset(out, 0x7F, kBlock);
    return;
  }
  const VF mult = hn::Set(DF(), E8M0InverseScale(scale));
  const size_t n = hn::Lanes(DF());
  for (size_t i = 0; i < kBlockVecs; ++i) {
    StoreCodes(EncodeV<kFormat, /*kFinite=*/true>(hn::Mul(vecs[i], mult)), out + i * n);
  }
}

// A full block of 32 at `index`: one load per vector, kept in registers for the encode.
template <bool kBf16, ElementFormat kFormat>
HWY_INLINE void FullBlock(const QuantSource& src, int64_t index, uint8_t* out, uint8_t* scale) {
  const size_t n = hn::Lanes(DF());
  VF vecs[kBlockVecs];
  VI amax = hn::Zero(DI());
  for (size_t i = 0; i < kBlockVecs; ++i) {
    vecs[i] = LoadF<kBf16>(src.x, index + static_cast<int64_t>(i * n));
    amax = hn::Max(amax, AbsBits(vecs[i]));
  }
  *scale =
      BlockScale(src.rule, kFormat, static_cast<uint32_t>(hn::GetLane(hn::MaxOfLanes(DI(), amax))));
  EncodeBlock<kFormat>(vecs, *scale, out);
}

// The partial last block of a row (len < 32 elements at `index`) as a full one: copied into
// a zeroed block (zeros change neither the amax nor the other lanes' codes), encoded there,
// and its len codes copied out. Element by element it was 10% of a mixture-of-experts
// step's MXFP8 time at ffn 88 (bench ops --case moe --hidden 128).
template <bool kBf16, ElementFormat kFormat>
HWY_INLINE void PartialBlock(const QuantSource& src, int64_t index, int64_t len, uint8_t* out,
                             uint8_t* scale) {
  constexpr size_t kSize = kBf16 ? 2 : 4;
  alignas(64) uint8_t block[kBlock * kSize] = {};
  std::memcpy(block, static_cast<const uint8_t*>(src.x) + index * static_cast<int64_t>(kSize),
              static_cast<size_t>(len) * kSize);
  QuantSource one = src;
  one.x = block;
  alignas(64) uint8_t codes[kBlock];
  FullBlock<kBf16, kFormat>(one, 0, codes, scale);
  std::memcpy(out, codes, static_cast<size_t>(len));
}

// The larger of a and b per 32-bit lane, or (kU16) per 16-bit half: the shuffles of
// TransposeMax move whole 32-bit lanes, so with 16-bit maxima they carry pairs of 16-bit
// values along and one PairMaxBits at the end finishes the reduction.
template <bool kU16>
HWY_INLINE VI Max2(VI a, VI b) {
#if HWY_TARGET != HWY_SCALAR
  if constexpr (kU16) {
    const hn::Repartition<uint16_t, DI> d16;
    return hn::BitCast(DI(), hn::Max(hn::BitCast(d16, a), hn::BitCast(d16, b)));
  }
#endif
  return hn::Max(a, b);
}

// Lane j of the result = the largest lane of in[j], for the kLanes vectors in[0..kLanes)
// (kU16: the larger 16-bit half in each half of lane j). A transposing reduction: ~3
// vector ops per vector instead of ~9 for a horizontal reduction each (the per-block scale
// was a third of the rowwise kernel's time).
template <size_t kLanes, bool kU16 = false>
HWY_INLINE VI TransposeMax(const VI* in) {
#if HWY_TARGET == HWY_SCALAR
  static_assert(kLanes == 1);
  return in[0];
#else
  {
    const DI di;
    const hn::RepartitionToWide<DI> d64;
    // Within each 128-bit block: 4 vectors -> one whose lane k holds vector k's block max.
    VI per_block[kLanes / 4];
    for (size_t g = 0; g < kLanes / 4; ++g) {
      const VI* v = in + 4 * g;
      const VI ab =
          Max2<kU16>(hn::InterleaveLower(v[0], v[1]), hn::InterleaveUpper(di, v[0], v[1]));
      const VI cd =
          Max2<kU16>(hn::InterleaveLower(v[2], v[3]), hn::InterleaveUpper(di, v[2], v[3]));
      const auto ab64 = hn::BitCast(d64, ab);
      const auto cd64 = hn::BitCast(d64, cd);
      per_block[g] = Max2<kU16>(hn::BitCast(di, hn::InterleaveLower(ab64, cd64)),
                                hn::BitCast(di, hn::InterleaveUpper(d64, ab64, cd64)));
    }
    if constexpr (kLanes == 4) {
      return per_block[0];
    } else if constexpr (kLanes == 8) {
      return Max2<kU16>(hn::ConcatLowerLower(di, per_block[1], per_block[0]),
                        hn::ConcatUpperUpper(di, per_block[1], per_block[0]));
    } else {
      static_assert(kLanes == 16, "TransposeMax handles 1, 4, 8 or 16 lanes");
      // Fold the upper 256 bits onto the lower for pairs of groups, then adjacent blocks.
      const VI v01 = Max2<kU16>(hn::ConcatLowerLower(di, per_block[1], per_block[0]),
                                hn::ConcatUpperUpper(di, per_block[1], per_block[0]));
      const VI v23 = Max2<kU16>(hn::ConcatLowerLower(di, per_block[3], per_block[2]),
                                hn::ConcatUpperUpper(di, per_block[3], per_block[2]));
      alignas(64) static constexpr int32_t kSwapBlocks[16] = {4,  5,  6,  7,  0, 1, 2,  3,
                                                              12, 13, 14, 15, 8, 9, 10, 11};
      const auto swap = hn::SetTableIndices(di, kSwapBlocks);
      const VI w01 = Max2<kU16>(v01, hn::TableLookupLanes(v01, swap));  // [g0 g0 g1 g1]
      const VI w23 = Max2<kU16>(v23, hn::TableLookupLanes(v23, swap));  // [g2 g2 g3 g3]
      return hn::OddEvenBlocks(hn::ConcatUpperUpper(di, w23, w01),
                               hn::ConcatLowerLower(di, w23, w01));
    }
  }
#endif
}

// kLanes consecutive full blocks: their amax in one transposing reduction, then the scalar

}  // namespace HWY_NAMESPACE
}  // namespace mxtrain::internal
HWY_AFTER_NAMESPACE();

#endif  // MXTRAIN_QUANTIZE_ENCODE_INL_H_
