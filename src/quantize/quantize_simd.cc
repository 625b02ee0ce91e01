// The SIMD quantization kernels, written once over vector width with Google Highway and
// compiled for every x86 target (AVX3_DL = AVX-512 with VBMI, AVX3, AVX2, SSE4, SSSE3) plus
// the portable SCALAR one; simd.h picks among them at run time.
//
// Bit-exactness with the scalar reference (minifloat.h) rests on three facts:
// - scaling is the same fp32 multiply x * fl32(2^(127-b)) (NUMERICS.md §5);
// - the vector encoder rounds normal values with integer arithmetic on the fp32 bits
//   (add 2^(22-m) - 1 plus the lowest kept bit, then shift: round half to even) and
//   subnormal ones by an fp32 add of 2^(23 + min_subnormal_exp), which puts the fp8
//   subnormal step at one fp32 ulp, so the hardware's round-to-nearest-even does the
//   rounding; this is checked against the reference over all 2^32 inputs;
// - a NaN block gets the multiplier NaN, so every element of it encodes to 0x7F.
// Partial blocks and column tails use the scalar encoder itself.
//
// On every target but SCALAR, full blocks go through a second encoder on 16-bit lanes
// (twice the lanes per instruction; docs/decisions.md "16-bit quantization lanes"): a bf16
// value times 2^(127-b) is its bit pattern plus (127-b) << 7 while the result is an element
// normal (taken as one saturating subtraction that also rebases the exponent to the
// element's bias, so zeros stay zero), and rounding those 7 mantissa bits to 3 (or 2) is
// the same integer rounding as above. An fp32 input is first narrowed to 16 bits with
// round-to-odd (the low 16 bits OR-ed into the lowest kept bit), which keeps
// round-to-nearest-even to the 3 or 2 bits exact (4 spare bits, where 2 suffice). A vector holding any lane that would be an element
// subnormal, or an input subnormal, is encoded again by the fp32 encoder from the source;
// zeros stay on the fast path.

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "quantize/quantize_simd.cc"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/cache_control.h>
#include <hwy/highway.h>

#include <algorithm>
#include <cstring>
#include <limits>
#include <type_traits>

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
template <ElementFormat kFormat, bool kFinite>
HWY_INLINE VI EncodeV(VF v) {
  const DI di;
  const DF df;
  constexpr bool kE4M3 = kFormat == ElementFormat::kE4M3;
  constexpr int kMan = kE4M3 ? 3 : 2;
  constexpr int32_t kMaxBits = kE4M3 ? 0x43E00000 : 0x47600000;     // 448 | 57344
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
  const VI normal =
      hn::ShiftRight<23 - kMan>(hn::Add(hn::Add(clamped, hn::Set(di, kRound)), lsb));
  const VI subnormal =
      hn::Sub(hn::BitCast(di, hn::Add(hn::BitCast(df, clamped), hn::Set(df, kSubnormalMagic))),
              hn::Set(di, kSubnormalMagicBits));
  VI code = hn::IfThenElse(hn::Lt(clamped, hn::Set(di, kMinNormalBits)), subnormal, normal);
  code = hn::OrAnd(code, hn::ShiftRight<24>(bits), hn::Set(di, 0x80));  // sign
  if constexpr (!kFinite) {
    if constexpr (!kE4M3) {  // E5M2 keeps Inf
      code = hn::IfThenElse(hn::Eq(abs, hn::Set(di, 0x7F800000)),
                            hn::OrAnd(hn::Set(di, 0x7C), hn::ShiftRight<24>(bits), hn::Set(di, 0x80)),
                            code);
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

// The scale bytes (one per lane) of amax given as fp32 bits: the vector form of
// ScaleFromTable (scale_table.h) on the rule's table. While every lane's binade lies in the
// table's affine range (all but zero, subnormal and clamped amax) the entry is the exponent
// field plus a constant; otherwise the 16-lane gather, ~20 cycles on Zen 4 (measured there:
// 11% of bf16 columnwise time with the gather always taken).
HWY_INLINE VI ScalesV(const ScaleTable* table, VI amax) {
  const DI di;
  const DU du;
  const VU exponent = hn::ShiftRight<23>(hn::BitCast(du, amax));
  const auto outside = hn::Gt(hn::Sub(exponent, hn::Set(du, table->affine_lo)),
                              hn::Set(du, table->affine_hi - table->affine_lo));
  VI entry;
  if (HWY_LIKELY(hn::AllFalse(du, outside))) {
    entry = hn::BitCast(di, hn::Add(hn::And(hn::BitCast(du, amax), hn::Set(du, 0x7F800000u)),
                                    hn::Set(du, table->affine_delta)));
  } else {
    entry = hn::GatherIndex(di, reinterpret_cast<const int32_t*>(table->entry),
                            hn::BitCast(di, exponent));
  }
  const VI mant = hn::Set(di, 0x7FFFFF);
  const VI above = hn::VecFromMask(di, hn::Gt(hn::And(amax, mant), hn::And(entry, mant)));
  return hn::Sub(hn::ShiftRight<23>(entry), above);  // `above` lanes are -1
}

// Scalar: quantize `len` (< 32) elements of one block.
template <bool kBf16, ElementFormat kFormat>
void PartialBlock(const QuantSource& src, int64_t index, int64_t len, uint8_t* out,
                  uint8_t* scale) {
  uint32_t amax = 0;
  for (int64_t i = 0; i < len; ++i) {
    amax = std::max(amax, F32Bits(LoadScalar<kBf16>(src.x, index + i)) & kF32AbsMask);
  }
  *scale = BlockScale(src.rule, kFormat, amax);
  const float mult = BlockMultiplier(*scale);
  for (int64_t i = 0; i < len; ++i) {
    out[i] = EncodeElement(kFormat, LoadScalar<kBf16>(src.x, index + i) * mult);
  }
}

// Vectors per block of 32 (2 on AVX-512, 32 on the SCALAR target).
constexpr size_t kBlockVecs = kBlock / hn::MaxLanes(DF());

// Bytes ahead of the current read that the kernels prefetch: the hardware prefetcher alone
// lets the per-block scale computation stall on DRAM (measured: bf16 rowwise 18 -> 7 ms at
// 4096x4096 on one core).
constexpr int64_t kPrefetchBytes = 2048;

template <bool kBf16>
HWY_INLINE void PrefetchAhead(const void* base, int64_t index) {
  hwy::Prefetch(static_cast<const char*>(base) + index * (kBf16 ? 2 : 4) + kPrefetchBytes);
}

// The strip a columnwise or dual kernel expects its thread to take next (the rows below
// this one, same columns: the next strip of a static schedule over whole-row strips),
// prefetched into L2 a cache line at a time while this strip computes. Both passes issue
// a share, so that DRAM stays busy through the whole strip: pass 2 alone left it idle
// during pass 1 and the scale computation. Columnwise issues half the lines in each pass,
// dual three quarters in its longer row pass; pass 2 takes a line per two it encodes until
// none are left. 4096 x 4096, 2 threads, against pass 2 alone: bf16 colwise 1.17-1.18 ->
// 1.08-1.11 ms (ratio 0.74 -> 0.80-0.82), dual 2.14-2.16 -> 1.91-2.05, grouped 1.17-1.19
// -> 1.08-1.11; f32 colwise 2.17-2.21 -> 2.11-2.16, dual 3.52-3.55 -> 3.16-3.32. All the
// lines in colwise pass 1 was worse (bf16 1.29-1.35 ms).
class NextStripPrefetch {
 public:
  NextStripPrefetch(const QuantSource& src, const ColStrip& strip) {
    const int64_t size = src.bf16 ? 2 : 4;
    const int64_t row0 = strip.row0 + strip.num_rows;
    const int64_t rows = std::max<int64_t>(0, std::min(kBlock, src.rows - row0));
    if (rows == 0 || strip.col1 <= strip.col0) return;
    stride_ = src.cols * size;
    const char* base = static_cast<const char*>(src.x) + row0 * stride_;
    // First and one-past-last line of each row's columns, as offsets from the row.
    const int64_t first = (strip.col0 * size) & ~int64_t{63};
    width_ = ((strip.col1 * size + 63) & ~int64_t{63}) - first;
    rows_ = rows;
    if (strip.col0 == 0 && strip.col1 == src.cols) {  // contiguous rows: one run
      width_ = (rows * stride_ + 63) & ~int64_t{63};
      rows_ = 1;
    }
    next_ = base + first;
    row_end_ = next_ + width_;
    lines_ = rows_ * (width_ / 64);
    left_ = lines_;
  }
  // Lines not yet issued.
  int64_t left() const { return left_; }
  // Issues the next k lines (fewer at the end). The common case, k lines within the
  // current run, is one compare and a prefetch per line (the kernels call this in loops
  // whose other uops are few when the strip is in cache).
  HWY_INLINE void Issue(int64_t k) {
    if (HWY_LIKELY(k <= left_ && next_ + 64 * k <= row_end_)) {
#pragma GCC unroll 16
      for (int64_t i = 0; i < k; ++i) __builtin_prefetch(next_ + 64 * i, 0, 2);
      next_ += 64 * k;
      left_ -= k;
      return;
    }
    IssueSlow(k);
  }
  // Issue(kLines): with the count known, the loop above unrolls to kLines prefetches.
  template <int64_t kLines>
  HWY_INLINE void Issue() {
    Issue(kLines);
  }
  // Lines per step to issue `fraction_num / fraction_den` of the total over `steps` steps.
  int64_t Rate(int64_t steps, int64_t fraction_num = 1, int64_t fraction_den = 1) const {
    const int64_t share = (lines_ * fraction_num + fraction_den - 1) / fraction_den;
    return steps > 0 ? (share + steps - 1) / steps : share;
  }

 private:
  HWY_NOINLINE void IssueSlow(int64_t k) {
    for (; k > 0 && left_ > 0; --k, --left_) {
      if (next_ == row_end_) {
        next_ = row_end_ - width_ + stride_;
        row_end_ = next_ + width_;
      }
      __builtin_prefetch(next_, 0, 2);
      next_ += 64;
    }
  }

  const char* next_ = nullptr;
  const char* row_end_ = nullptr;
  int64_t stride_ = 0, width_ = 0, rows_ = 0, lines_ = 0, left_ = 0;
};

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
  *scale = BlockScale(src.rule, kFormat, static_cast<uint32_t>(hn::GetLane(hn::MaxOfLanes(DI(), amax))));
  EncodeBlock<kFormat>(vecs, *scale, out);
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
      const VI ab = Max2<kU16>(hn::InterleaveLower(v[0], v[1]), hn::InterleaveUpper(di, v[0], v[1]));
      const VI cd = Max2<kU16>(hn::InterleaveLower(v[2], v[3]), hn::InterleaveUpper(di, v[2], v[3]));
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
      alignas(64) static constexpr int32_t kSwapBlocks[16] = {4, 5, 6, 7, 0, 1, 2, 3,
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
// rule per block, then the encode (the blocks are re-read from L1).
template <bool kBf16, ElementFormat kFormat>
HWY_INLINE void BlockBatch(const QuantSource& src, int64_t index, uint8_t* out, uint8_t* scales) {
  constexpr size_t kLanes = hn::MaxLanes(DI());
  const size_t n = hn::Lanes(DF());
  VI block_amax[kLanes];
  for (size_t j = 0; j < kLanes; ++j) {
    const int64_t at = index + static_cast<int64_t>(j) * kBlock;
    PrefetchAhead<kBf16>(src.x, at);
    VI amax = hn::Zero(DI());
    for (size_t i = 0; i < kBlockVecs; ++i) {
      amax = hn::Max(amax, AbsBits(LoadF<kBf16>(src.x, at + static_cast<int64_t>(i * n))));
    }
    block_amax[j] = amax;
  }
  alignas(64) int32_t amax[kLanes];
  hn::Store(TransposeMax<kLanes>(block_amax), DI(), amax);
  for (size_t j = 0; j < kLanes; ++j) {
    scales[j] = BlockScale(src.rule, kFormat, static_cast<uint32_t>(amax[j]));
  }
  for (size_t j = 0; j < kLanes; ++j) {
    const int64_t at = index + static_cast<int64_t>(j) * kBlock;
    VF vecs[kBlockVecs];
    for (size_t i = 0; i < kBlockVecs; ++i) vecs[i] = LoadF<kBf16>(src.x, at + static_cast<int64_t>(i * n));
    EncodeBlock<kFormat>(vecs, scales[j], out + j * kBlock);
  }
}

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

// Enc16::Sub and ::SlowBelow on a vector of scale bytes (32-bit lanes, none NaN).
template <ElementFormat kFormat>
HWY_INLINE void OffsetsV(VI b, VI& sub, VI& slow_below) {
  using E = Enc16<kFormat>;
  const DI di;
  const auto low = hn::Lt(b, hn::Set(di, E::kMinScale + 1));
  const VI rebase = hn::ShiftLeft<7>(hn::Sub(b, hn::Set(di, E::kMinScale)));
  sub = hn::IfThenZeroElse(low, hn::Sub(rebase, hn::Set(di, E::kRound)));
  const VI thr = hn::ShiftLeft<7>(hn::Max(hn::Add(b, hn::Set(di, E::kMinNormalExp)), hn::Set(di, 1)));
  slow_below = hn::IfThenElse(low, hn::Set(di, 0xFFFE), hn::Sub(thr, hn::Set(di, 1)));
}

// |h| of 16-bit (bf16) patterns.
HWY_INLINE V16 Abs16(V16 h) { return hn::And(h, hn::Set(D16(), 0x7FFF)); }

// The lanes of h the 16-bit encoder may not take: nonzero and below the threshold, i.e.
// |h| - 1 below slow_below (Enc16::SlowBelow; zero wraps around to 0xFFFF).
HWY_INLINE M16 SlowLanes16(V16 h, V16 slow_below) {
  return hn::Lt(hn::Sub(Abs16(h), hn::Set(D16(), 1)), slow_below);
}

// The slow-lane tests of a run of vectors, accumulated as the lanes that were fast in every
// vector so far (start from AllFast16, test with AnySlow16). On AVX-512 each test is one
// compare masked by the running mask, so accumulating takes no mask OR of its own (kor
// would share port 0 with the encode).
HWY_INLINE M16 AllFast16() { return hn::FirstN(D16(), hn::Lanes(D16())); }
HWY_INLINE M16 StillFast16(M16 fast, V16 h, V16 slow_below) {
#if HWY_TARGET <= HWY_AVX3
  const V16 below = hn::Sub(Abs16(h), hn::Set(D16(), 1));
  return M16{_mm512_mask_cmp_epu16_mask(fast.raw, below.raw, slow_below.raw, _MM_CMPINT_NLT)};
#else
  return hn::AndNot(SlowLanes16(h, slow_below), fast);
#endif
}
HWY_INLINE bool AnySlow16(M16 fast) { return !hn::AllTrue(D16(), fast); }

// Codes (in the high byte of each lane; the low byte is junk) of 16-bit values h scaled by
// the per-lane subtrahends `sub` (Enc16::Sub, kRound folded in). `fast` loses the lanes of
// SlowLanes16 (StillFast16): the caller encodes the vectors that had any again with the fp32
// encoder. Zero lanes saturate to 0, which rounds to code 0 before the sign. kSaturate: clamp
// at the largest element; rceil and ceil never exceed it (exhaustive_rceil_range), so
// their kernels leave the min out (one vector op of about ten). The code is built in the high byte so that
// the sign is one bitwise select from h and no shift back is needed (docs/decisions.md,
// "16-bit quantization lanes").
template <ElementFormat kFormat, bool kSaturate = true>
HWY_INLINE V16 Encode16(V16 h, V16 sub, V16 slow_below, M16& fast) {
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
  // vpmovwb: Highway's TruncateTo takes a shuffle and a permute here.
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(out), _mm512_cvtepi16_epi8(low.raw));
#else
  hn::StoreU(hn::TruncateTo(D8(), low), D8(), out);
#endif
}

#if HWY_TARGET <= HWY_AVX3_DL
// AVX512-VBMI: output byte i is byte pick(i) of the 128-byte concatenation [a, b], one
// two-register byte permute (vpermt2b).
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

// StoreCodes16 of a then b, to 2 * Lanes(D16()) consecutive bytes. kStream: non-temporal
// stores, `out` aligned to 2 * Lanes(D16()) bytes (the caller issues hwy::FlushStream
// before the bytes are read elsewhere).
template <bool kStream = false>
HWY_INLINE void StoreCodes16x2(V16 a, V16 b, uint8_t* out) {
#if HWY_TARGET <= HWY_AVX3
#if HWY_TARGET <= HWY_AVX3_DL
  // The high bytes of both.
  static constexpr ByteTable kOdd = MakeByteTable([](int i) { return 2 * i + 1; });
  const __m512i codes = PickBytes(a.raw, b.raw, kOdd);
#else
  // vpackuswb interleaves the 128-bit blocks (a0 b0 a1 b1 ...; codes fit a byte unsigned);
  // vpermq puts a's four quarters first.
  const __m512i packed =
      _mm512_packus_epi16(hn::ShiftRight<8>(a).raw, hn::ShiftRight<8>(b).raw);
  const __m512i codes = _mm512_permutexvar_epi64(_mm512_set_epi64(7, 5, 3, 1, 6, 4, 2, 0), packed);
#endif
  if constexpr (kStream) {
    _mm512_stream_si512(reinterpret_cast<__m512i*>(out), codes);
  } else {
    _mm512_storeu_si512(out, codes);
  }
#else
  if constexpr (kStream) {
    // The high bytes of both as one full vector of bytes (a stream of a half vector is not
    // a half-vector store on every target).
    const hn::Repartition<uint8_t, D16> d8;
    hn::Stream(hn::ConcatOdd(d8, hn::BitCast(d8, b), hn::BitCast(d8, a)), d8, out);
  } else {
    StoreCodes16(a, out);
    StoreCodes16(b, out + hn::Lanes(D16()));
  }
#endif
}

// Two fp32 vectors (as bits) to one vector of their top 16 bits, rounded to odd: the low
// 16 bits OR-ed into the lowest kept bit. v + 0xFFFF carries into bit 16 exactly when the
// low half is nonzero, and a carry always flips bit 16, so bit 16 of v ^ (v + 0xFFFF) is
// the sticky bit: v | ((v ^ (v + 0xFFFF)) & 0x10000) is an add and one ternary-logic op on
// AVX-512, then one byte permute takes the high halves (5 vector uops per 32 elements,
// where shifting, a min, an OR and vpermt2w took 11).
HWY_INLINE V16 NarrowToOdd(VU lo, VU hi) {
  const DU du;
  const auto odd = [&](VU v) {
    const VU carried = hn::Add(v, hn::Set(du, 0xFFFF));
#if HWY_TARGET <= HWY_AVX3
    // A | ((A ^ B) & C) for A = v, B = carried, C = 0x10000.
    return VU{_mm512_ternarylogic_epi32(v.raw, carried.raw, hn::Set(du, 0x10000).raw, 0xF8)};
#else
    return hn::Or(v, hn::And(hn::Xor(v, carried), hn::Set(du, 0x10000)));
#endif
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

// The fp32 encoder for the elements of one 16-bit vector at `index`, each with its column's
// scale byte lane_scales[i], or all with `scale` (lane_scales == nullptr): the exact path
// for vectors with lanes the 16-bit encoder may not take.
template <bool kBf16, ElementFormat kFormat>
HWY_NOINLINE void EncodeSlow16(const void* base, int64_t index, const uint8_t* lane_scales,
                               uint8_t scale, uint8_t* out) {
  const size_t n = hn::Lanes(DF());
  alignas(64) float mult[2 * hn::MaxLanes(DF())];
  for (size_t i = 0; i < 2 * n; ++i) {
    mult[i] = E8M0InverseScale(lane_scales != nullptr ? lane_scales[i] : scale);
  }
  for (size_t j = 0; j < 2; ++j) {
    const VF v = LoadF<kBf16>(base, index + static_cast<int64_t>(j * n));
    StoreCodes(EncodeV<kFormat, /*kFinite=*/true>(hn::Mul(v, hn::Load(DF(), mult + j * n))),
               out + j * n);
  }
}

// kBlocks adjacent full blocks of 32 at `index` whose Enc16::Sub and ::SlowBelow are both
// halves of sub2[j] and slow2[j] (a 32-bit broadcast from memory is a load alone; a 16-bit
// one also takes a shuffle). The lanes the fp32 encoder must redo are taken out of `fast`
// (SlowVectors16 finds them afterwards, outside the hot loop).
template <bool kBf16, ElementFormat kFormat, size_t kBlocks, bool kSaturate = true>
HWY_INLINE void EncodeBlocks16(const void* base, int64_t index, const uint32_t* sub2,
                               const uint32_t* slow2, uint8_t* out, M16& fast) {
  const D16 d;
  const size_t n = hn::Lanes(d);
  constexpr size_t kVecs = kBlocks * kBlockVecs16;
  V16 codes[kVecs];
  for (size_t i = 0; i < kVecs; ++i) {
    const size_t j = i / kBlockVecs16;
    codes[i] = Encode16<kFormat, kSaturate>(Load16<kBf16>(base, index + static_cast<int64_t>(i * n)),
                                            hn::BitCast(d, hn::Set(DU(), sub2[j])),
                                            hn::BitCast(d, hn::Set(DU(), slow2[j])), fast);
  }
  for (size_t i = 0; i + 1 < kVecs; i += 2) StoreCodes16x2(codes[i], codes[i + 1], out + i * n);
  if constexpr (kVecs % 2 == 1) StoreCodes16(codes[kVecs - 1], out + (kVecs - 1) * n);
}

// A bit per 16-bit vector of the block at `index` that the fp32 encoder must redo: the
// slow-lane test of Encode16 alone, run only for blocks whose encode reported any.
template <bool kBf16, ElementFormat kFormat>
HWY_INLINE uint32_t SlowVectors16(const void* base, int64_t index, uint8_t scale) {
  using E = Enc16<kFormat>;
  const D16 d;
  const size_t n = hn::Lanes(d);
  uint32_t redo = 0;
  const V16 slow_below = hn::Set(d, E::SlowBelow(scale));
  for (size_t i = 0; i < kBlockVecs16; ++i) {
    const M16 slow =
        SlowLanes16(Load16<kBf16>(base, index + static_cast<int64_t>(i * n)), slow_below);
    redo |= static_cast<uint32_t>(!hn::AllFalse(d, slow)) << i;
  }
  return redo;
}

// The fp32 encoder over the vectors of a block that SlowVectors16 flagged.
template <bool kBf16, ElementFormat kFormat>
HWY_NOINLINE void RedoSlow16(const void* base, int64_t index, uint8_t scale, uint32_t redo,
                             uint8_t* out) {
  const size_t n = hn::Lanes(D16());
  for (size_t i = 0; i < kBlockVecs16; ++i) {
    if ((redo >> i) & 1) {
      EncodeSlow16<kBf16, kFormat>(base, index + static_cast<int64_t>(i * n), nullptr, scale,
                                   out + i * n);
    }
  }
}

// A full block through the 16-bit encoder, NaN blocks and redos included.
template <bool kBf16, ElementFormat kFormat>
HWY_INLINE void QuantizeBlock16(const void* base, int64_t index, uint8_t scale, uint8_t* out) {
  if (HWY_UNLIKELY(scale == kE8M0NaN)) {
    std::memset(out, 0x7F, kBlock);
    return;
  }
  using E = Enc16<kFormat>;
  M16 fast = AllFast16();
  const uint32_t sub2 = E::Sub(scale) * 0x10001u, slow2 = E::SlowBelow(scale) * 0x10001u;
  EncodeBlocks16<kBf16, kFormat, 1>(base, index, &sub2, &slow2, out, fast);
  if (HWY_UNLIKELY(AnySlow16(fast))) {
    RedoSlow16<kBf16, kFormat>(base, index, scale, SlowVectors16<kBf16, kFormat>(base, index, scale),
                               out);
  }
}

// |x| of one 16-bit (bf16) vector, widened to fp32 lanes that hold the larger of each
// pair, as fp32 bits: the per-block amax input of TransposeMax.
HWY_INLINE VI PairMaxBits(V16 abs16) {
  const VU u = hn::BitCast(DU(), abs16);
  return hn::BitCast(DI(), hn::Max(hn::ShiftLeft<16>(u), hn::And(u, hn::Set(DU(), 0xFFFF0000u))));
}

// kLanes consecutive full blocks at `index` in 16-bit lanes, given their scale bytes b (one
// per 32-bit lane): the bytes stored to `scales`, then the encode (NaN blocks and redos
// included). kSaturate as for Encode16.
template <bool kBf16, ElementFormat kFormat, bool kSaturate>
HWY_INLINE void EncodeBatch16(const QuantSource& src, int64_t index, VI b, uint8_t* out,
                              uint8_t* scales) {
  constexpr size_t kLanes = hn::MaxLanes(DI());
  StoreLowBytes(hn::BitCast(DU(), b), scales);
  if (HWY_UNLIKELY(!hn::AllFalse(DI(), hn::Eq(b, hn::Set(DI(), kE8M0NaN))))) {
    for (size_t j = 0; j < kLanes; ++j) {
      QuantizeBlock16<kBf16, kFormat>(src.x, index + static_cast<int64_t>(j) * kBlock, scales[j],
                                      out + j * kBlock);
    }
    return;
  }
  // The 16-bit encoder's per-block subtrahends and thresholds (Enc16::Sub, ::SlowBelow),
  // each in both halves of a 32-bit lane.
  alignas(64) uint32_t sub[kLanes], slow_below[kLanes];
  VI sub_v, slow_v;
  OffsetsV<kFormat>(b, sub_v, slow_v);
  hn::Store(hn::BitCast(DU(), hn::Or(sub_v, hn::ShiftLeft<16>(sub_v))), DU(), sub);
  hn::Store(hn::BitCast(DU(), hn::Or(slow_v, hn::ShiftLeft<16>(slow_v))), DU(), slow_below);
  // Without this, GCC forwards the stores to the broadcasts below as 2-3 shuffles each
  // (vpsrldq/valignd, vpbroadcastd), on the port the encode needs; from memory a broadcast
  // is a load alone.
  asm volatile("" : : "r"(sub), "r"(slow_below) : "memory");
  const void* x = src.x;
  M16 fast = AllFast16();
  constexpr size_t kStep = kLanes % 2 == 0 ? 2 : 1;  // pairs share one pack (StoreCodes16x2)
  for (size_t j = 0; j < kLanes; j += kStep) {
    EncodeBlocks16<kBf16, kFormat, kStep, kSaturate>(x, index + static_cast<int64_t>(j) * kBlock,
                                                     sub + j, slow_below + j, out + j * kBlock,
                                                     fast);
  }
  if (HWY_UNLIKELY(AnySlow16(fast))) {
    for (size_t j = 0; j < kLanes; ++j) {
      const int64_t at = index + static_cast<int64_t>(j) * kBlock;
      const uint32_t redo = SlowVectors16<kBf16, kFormat>(x, at, scales[j]);
      if (redo != 0) RedoSlow16<kBf16, kFormat>(x, at, scales[j], redo, out + j * kBlock);
    }
  }
}

// kLanes consecutive full blocks of 16-bit lanes: amax, scales, encode.
template <bool kBf16, ElementFormat kFormat, bool kSaturate>
HWY_INLINE void BlockBatch16(const QuantSource& src, int64_t index, uint8_t* out,
                             uint8_t* scales) {
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

// Columnwise pass 1 of a bf16 source in 16-bit lanes: amax[c] = max(amax[c], |x[row, c]|).
HWY_INLINE void AccumulateColumnAmax16(const QuantSource& src, int64_t row, int64_t col0,
                                       int64_t col1, uint16_t* amax) {
  const D16 d;
  const int64_t n = static_cast<int64_t>(hn::Lanes(d));
  const int64_t base = row * src.cols;
  const uint16_t* x = static_cast<const uint16_t*>(src.x);
  int64_t c = col0;
  for (; c + n <= col1; c += n) {
    if ((c & 31) == 0) PrefetchAhead<true>(src.x, base + c);
    uint16_t* a = amax + (c - col0);
    hn::StoreU(hn::Max(hn::LoadU(d, a), Abs16(hn::LoadU(d, x + base + c))), d, a);
  }
  for (; c < col1; ++c) {
    amax[c - col0] = std::max<uint16_t>(amax[c - col0], x[base + c] & 0x7FFF);
  }
}

// Columnwise pass 2 in 16-bit lanes (no NaN column in the strip): per-column subtrahends
// and thresholds (Enc16), and the scale bytes for the exact path. kSaturate as for Encode16.
template <bool kBf16, ElementFormat kFormat, bool kSaturate, bool kStream>
void EncodeColumnStrip16(const QuantSource& src, const ColStrip& strip, ColwiseOut out,
                         const uint8_t* scales, const uint16_t* sub, const uint16_t* slow_below,
                         NextStripPrefetch& next_strip) {
  // A copy whose address stays here, so that its fields live in registers (the code stores
  // are bytes, which may alias anything).
  NextStripPrefetch ahead = next_strip;
  const D16 d;
  const int64_t n = static_cast<int64_t>(hn::Lanes(d));
  const void* x = src.x;
  const int64_t cols = src.cols, col0 = strip.col0, col1 = strip.col1;
  constexpr int64_t kGroup = 8;
  // The rest of the next strip's lines (NextStripPrefetch): a line per 2 lines of a group
  // of kGroup vectors, or spread over the rows of strips narrower than a group.
  constexpr int64_t kGroupAhead =
      kGroup * static_cast<int64_t>(hn::MaxLanes(D16())) * (kBf16 ? 2 : 4) / 64 / 2;
  const int64_t groups_per_row = (col1 - col0) / (kGroup * n);
  const int64_t per_row = (ahead.left() + strip.num_rows - 1) / strip.num_rows;
  for (int64_t r = strip.row0; r < strip.row0 + strip.num_rows; ++r) {
    const int64_t base = r * cols;
    uint8_t* data = out.data + base;
    M16 fast = AllFast16();
    int64_t c = col0;
    if (groups_per_row == 0) ahead.Issue(per_row);
    const auto encode = [&](int64_t at, M16& acc) {
      return Encode16<kFormat, kSaturate>(Load16<kBf16>(x, base + at),
                                          hn::LoadU(d, sub + (at - col0)),
                                          hn::LoadU(d, slow_below + (at - col0)), acc);
    };
    // Vectors that the fp32 encoder must redo are looked for again only in the groups of
    // kGroup vectors that reported one (a row of 4096 bf16 columns has a slow lane in about
    // a quarter of the rows of Gaussian data; re-checking the whole row cost more than the
    // redo itself).
    constexpr int kMaxFlagged = 64;
    int64_t flagged[kMaxFlagged];
    int num_flagged = 0;
    bool all_groups = false;  // more flagged groups than `flagged` holds
    for (; c + kGroup * n <= col1; c += kGroup * n) {
      M16 group_fast = AllFast16();
      ahead.Issue<kGroupAhead>();
      for (int64_t i = 0; i < kGroup; i += 2) {  // pairs share one pack (StoreCodes16x2)
        const int64_t at = c + i * n;
        const V16 first = encode(at, group_fast);
        StoreCodes16x2<kStream>(first, encode(at + n, group_fast), data + at);
      }
      if (HWY_UNLIKELY(AnySlow16(group_fast))) {
        if (num_flagged < kMaxFlagged) {
          flagged[num_flagged++] = c;
        } else {
          all_groups = true;
        }
      }
    }
    const int64_t groups_end = c;
    for (; c + 2 * n <= col1; c += 2 * n) {
      const V16 first = encode(c, fast);
      StoreCodes16x2(first, encode(c + n, fast), data + c);
    }
    for (; c + n <= col1; c += n) {
      StoreCodes16(encode(c, fast), data + c);
    }
    const int64_t vectors_end = c;
    // Re-checks the vectors in [c0, c1) and redoes the flagged ones.
    const auto redo = [&](int64_t c0, int64_t c1) {
      for (int64_t v = c0; v + n <= c1; v += n) {
        const M16 slow =
            SlowLanes16(Load16<kBf16>(x, base + v), hn::LoadU(d, slow_below + (v - col0)));
        if (!hn::AllFalse(d, slow)) {
          EncodeSlow16<kBf16, kFormat>(x, base + v, scales + (v - col0), 0, data + v);
        }
      }
    };
    if (HWY_UNLIKELY(all_groups)) {
      redo(col0, groups_end);
    } else {
      for (int i = 0; i < num_flagged; ++i) redo(flagged[i], flagged[i] + kGroup * n);
    }
    if (HWY_UNLIKELY(AnySlow16(fast))) redo(groups_end, vectors_end);
    for (; c < col1; ++c) {
      data[c] = EncodeElement(kFormat,
                              LoadScalar<kBf16>(x, base + c) * E8M0InverseScale(scales[c - col0]));
    }
  }
  // The streamed codes reach memory before the strip is reported done (and the redos'
  // ordinary stores above went after them to the same lines, in program order).
  if constexpr (kStream) hwy::FlushStream();
  next_strip = ahead;
}
#endif  // HWY_TARGET != HWY_SCALAR

#if HWY_TARGET != HWY_SCALAR
constexpr bool k16 = true;
#else
constexpr bool k16 = false;
#endif

template <bool kBf16, ElementFormat kFormat, bool kSaturate>
void RowwiseT(const QuantSource& src, int64_t row0, int64_t row1, RowwiseOut out) {
  const int64_t cols = src.cols;
  const int64_t blocks = (cols + kBlock - 1) / kBlock;
  const int64_t full = cols / kBlock;
  for (int64_t r = row0; r < row1; ++r) {
    const int64_t base = r * cols;
    uint8_t* data = out.data + base;
    uint8_t* scales = out.scales + r * blocks;
    constexpr int64_t kBatch = static_cast<int64_t>(hn::MaxLanes(DI()));
    int64_t b = 0;
    for (; b + kBatch <= full; b += kBatch) {
#if HWY_TARGET != HWY_SCALAR
      BlockBatch16<kBf16, kFormat, kSaturate>(src, base + b * kBlock, data + b * kBlock, scales + b);
#else
      BlockBatch<kBf16, kFormat>(src, base + b * kBlock, data + b * kBlock, scales + b);
#endif
    }
    for (; b < full; ++b) {
      PrefetchAhead<kBf16>(src.x, base + b * kBlock);
      FullBlock<kBf16, kFormat>(src, base + b * kBlock, data + b * kBlock, scales + b);
    }
    if (full < blocks) {
      PartialBlock<kBf16, kFormat>(src, base + full * kBlock, cols - full * kBlock,
                                   data + full * kBlock, scales + full);
    }
  }
}

// Columnwise pass 1 for one row: amax[c] = max(amax[c], |x[row, col0 + c]|).
template <bool kBf16>
HWY_INLINE void AccumulateColumnAmax(const QuantSource& src, int64_t row, int64_t col0,
                                     int64_t col1, int32_t* amax) {
  const int64_t n = static_cast<int64_t>(hn::Lanes(DF()));
  const int64_t base = row * src.cols;
  int64_t c = col0;
  for (; c + n <= col1; c += n) {
    if ((c & 15) == 0) PrefetchAhead<kBf16>(src.x, base + c);  // once per 64-byte line or so
    int32_t* a = amax + (c - col0);
    hn::StoreU(hn::Max(hn::LoadU(DI(), a), AbsBits(LoadF<kBf16>(src.x, base + c))), DI(), a);
  }
  for (; c < col1; ++c) {
    const int32_t v = static_cast<int32_t>(F32Bits(LoadScalar<kBf16>(src.x, base + c)) & kF32AbsMask);
    amax[c - col0] = std::max(amax[c - col0], v);
  }
}

// Columnwise pass 2: every element times its column's factor, encoded. A NaN column has
// the factor NaN, which the non-finite encoder turns into 0x7F.
template <bool kBf16, ElementFormat kFormat, bool kFinite>
void EncodeColumnStrip(const QuantSource& src, const ColStrip& strip, ColwiseOut out,
                       const float* mult) {
  const int64_t n = static_cast<int64_t>(hn::Lanes(DF()));
  for (int64_t r = strip.row0; r < strip.row0 + strip.num_rows; ++r) {
    const int64_t base = r * src.cols;
    uint8_t* data = out.data + base;
    int64_t c = strip.col0;
    for (; c + n <= strip.col1; c += n) {
      const VF v = hn::Mul(LoadF<kBf16>(src.x, base + c), hn::LoadU(DF(), mult + (c - strip.col0)));
      StoreCodes(EncodeV<kFormat, kFinite>(v), data + c);
    }
    for (; c < strip.col1; ++c) {
      data[c] = EncodeElement(kFormat, LoadScalar<kBf16>(src.x, base + c) * mult[c - strip.col0]);
    }
  }
}

// The column amax of a strip: |bf16| bits in 16-bit lanes where the 16-bit encoder runs,
// fp32 bits otherwise.
template <bool kBf16>
using ColumnAmax = std::conditional_t<kBf16 && k16, uint16_t, int32_t>;

// A strip's per-column workspace (kernels.h: 16 bytes per column): amax, fp32 factors,
// and the 16-bit encoder's subtrahends and thresholds.
template <bool kBf16>
struct StripWorkspace {
  ColumnAmax<kBf16>* amax;
  float* mult;
  uint16_t* sub;
  uint16_t* slow_below;
  StripWorkspace(void* workspace, int64_t width)
      : amax(static_cast<ColumnAmax<kBf16>*>(workspace)),
        mult(reinterpret_cast<float*>(static_cast<char*>(workspace) + 4 * width)),
        sub(reinterpret_cast<uint16_t*>(static_cast<char*>(workspace) + 8 * width)),
        slow_below(reinterpret_cast<uint16_t*>(static_cast<char*>(workspace) + 10 * width)) {
    std::fill(amax, amax + width, ColumnAmax<kBf16>{0});
  }
};

// Columnwise pass 1 for one row, in the strip's amax type.
template <bool kBf16>
HWY_INLINE void AccumulateStripAmax(const QuantSource& src, int64_t row, int64_t col0,
                                    int64_t col1, ColumnAmax<kBf16>* amax) {
  if constexpr (std::is_same_v<ColumnAmax<kBf16>, uint16_t>) {
#if HWY_TARGET != HWY_SCALAR
    AccumulateColumnAmax16(src, row, col0, col1, amax);
#endif
  } else {
    AccumulateColumnAmax<kBf16>(src, row, col0, col1, amax);
  }
}

// Columnwise scales from the accumulated amax (a vector of them at a time), then pass 2
// over the strip (now in cache).
template <bool kBf16, ElementFormat kFormat, bool kSaturate>
void FinishColumnStrip(const QuantSource& src, const ColStrip& strip, ColwiseOut out,
                       const StripWorkspace<kBf16>& ws, NextStripPrefetch& ahead) {
  const int64_t width = strip.col1 - strip.col0;
  uint8_t* scales = out.scales + strip.scale_row * src.cols + strip.col0;
  const DI di;
  const int64_t n = static_cast<int64_t>(hn::Lanes(di));
  const hn::Rebind<uint16_t, DI> d16;
  auto any_nan = hn::FirstN(di, 0);
  int64_t c = 0;
  for (; c + n <= width; c += n) {
    VI amax;
    if constexpr (sizeof(ws.amax[0]) == 2) {
      const auto a16 = hn::LoadU(d16, reinterpret_cast<const uint16_t*>(ws.amax) + c);
      amax = hn::BitCast(di, hn::ShiftLeft<16>(hn::PromoteTo(DU(), a16)));
    } else {
      amax = hn::LoadU(di, reinterpret_cast<const int32_t*>(ws.amax) + c);
    }
    const VI b = ScalesV(src.scale_table, amax);
    StoreLowBytes(hn::BitCast(DU(), b), scales + c);
    any_nan = hn::Or(any_nan, hn::Eq(b, hn::Set(di, kE8M0NaN)));
#if HWY_TARGET != HWY_SCALAR
    VI sub, slow_below;
    OffsetsV<kFormat>(b, sub, slow_below);
    hn::StoreU(hn::TruncateTo(d16, hn::BitCast(DU(), sub)), d16, ws.sub + c);
    hn::StoreU(hn::TruncateTo(d16, hn::BitCast(DU(), slow_below)), d16, ws.slow_below + c);
#endif
  }
  bool nan_column = !hn::AllFalse(di, any_nan);
  for (; c < width; ++c) {
    const uint32_t amax_bits = static_cast<uint32_t>(ws.amax[c])
                               << (sizeof(ws.amax[0]) == 2 ? 16 : 0);
    scales[c] = BlockScale(src.rule, kFormat, amax_bits);
    nan_column |= scales[c] == kE8M0NaN;
#if HWY_TARGET != HWY_SCALAR
    ws.sub[c] = Enc16<kFormat>::Sub(scales[c]);
    ws.slow_below[c] = Enc16<kFormat>::SlowBelow(scales[c]);
#endif
  }
  if (HWY_UNLIKELY(nan_column) || !k16) {
    for (int64_t i = 0; i < width; ++i) ws.mult[i] = BlockMultiplier(scales[i]);
    if (nan_column) {
      EncodeColumnStrip<kBf16, kFormat, /*kFinite=*/false>(src, strip, out, ws.mult);
    } else {
      EncodeColumnStrip<kBf16, kFormat, /*kFinite=*/true>(src, strip, out, ws.mult);
    }
    return;
  }
#if HWY_TARGET != HWY_SCALAR
  // The groups of the row loop start at col0 + a multiple of 2 * Lanes(D16()) bytes' worth
  // of codes, so rows whose first column is aligned to that are aligned throughout.
  const auto align = static_cast<uintptr_t>(2 * hn::Lanes(D16()));
  const bool aligned = src.cols % static_cast<int64_t>(align) == 0 &&
                       reinterpret_cast<uintptr_t>(out.data + strip.col0) % align == 0;
  if (out.stream && aligned) {
    EncodeColumnStrip16<kBf16, kFormat, kSaturate, true>(src, strip, out, scales, ws.sub,
                                                         ws.slow_below, ahead);
  } else {
    EncodeColumnStrip16<kBf16, kFormat, kSaturate, false>(src, strip, out, scales, ws.sub,
                                                          ws.slow_below, ahead);
  }
#endif
}

template <bool kBf16, ElementFormat kFormat, bool kSaturate>
void ColwiseT(const QuantSource& src, const ColStrip& strip, ColwiseOut out, void* workspace) {
  const StripWorkspace<kBf16> ws(workspace, strip.col1 - strip.col0);
  NextStripPrefetch ahead(src, strip);
  int64_t c = strip.col0;
#if HWY_TARGET != HWY_SCALAR
  {
    // The amax of kChunk vectors of columns in registers down the strip's rows (16-bit
    // lanes for bf16, fp32 bits for fp32), one store each, instead of a load and a store of
    // the running amax per row and vector (f32 colwise 256 x 1024, one thread: see
    // docs/decisions.md).
    using DA = std::conditional_t<kBf16, D16, DI>;
    constexpr int64_t kChunk = 8;
    const DA da;
    const int64_t n = static_cast<int64_t>(hn::Lanes(da));
    for (; c + kChunk * n <= strip.col1; c += kChunk * n) {
      hn::Vec<DA> acc[kChunk];
      for (int64_t i = 0; i < kChunk; ++i) acc[i] = hn::Zero(da);
      for (int64_t r = strip.row0; r < strip.row0 + strip.num_rows; ++r) {
        const int64_t at = r * src.cols + c;
        // Half the next strip's lines (NextStripPrefetch): a line each 2 lines read.
        ahead.Issue<kChunk * static_cast<int64_t>(hn::MaxLanes(da) * sizeof(hn::TFromD<DA>)) /
                    64 / 2>();
        for (int64_t i = 0; i < kChunk; ++i) {
          if constexpr (kBf16) {
            acc[i] = hn::Max(acc[i], Abs16(Load16<true>(src.x, at + i * n)));
          } else {
            acc[i] = hn::Max(acc[i], AbsBits(LoadF<false>(src.x, at + i * n)));
          }
        }
      }
      for (int64_t i = 0; i < kChunk; ++i) hn::StoreU(acc[i], da, ws.amax + (c - strip.col0) + i * n);
    }
  }
#endif
  if (c < strip.col1) {
    // The columns past the chunks (all of a narrow strip): half the next strip's lines, as
    // above.
    const int64_t rate = c == strip.col0 ? ahead.Rate(strip.num_rows, 1, 2) : 0;
    for (int64_t r = strip.row0; r < strip.row0 + strip.num_rows; ++r) {
      ahead.Issue(rate);
      AccumulateStripAmax<kBf16>(src, r, c, strip.col1, ws.amax + (c - strip.col0));
    }
  }
  FinishColumnStrip<kBf16, kFormat, kSaturate>(src, strip, out, ws, ahead);
}

// Whether DualBlockAmax returns 16-bit maxima (bf16 on the 16-bit path) rather than fp32
// bits; DualAmaxBits turns either into fp32 bits per lane.
template <bool kBf16>
constexpr bool kDualRaw16 = std::is_same_v<ColumnAmax<kBf16>, uint16_t>;

template <bool kBf16>
HWY_INLINE VI DualAmaxBits(VI amax) {
#if HWY_TARGET != HWY_SCALAR
  if constexpr (kDualRaw16<kBf16>) return PairMaxBits(hn::BitCast(D16(), amax));
#endif
  return amax;
}

// One full row block of the dual kernel at `index`: its elements' magnitudes folded into
// the column amax `col_amax`, and the block's own amax returned per lane (kDualRaw16: as
// 16-bit maxima, else as fp32 bits).
template <bool kBf16>
HWY_INLINE VI DualBlockAmax(const QuantSource& src, int64_t index, ColumnAmax<kBf16>* col_amax) {
  if constexpr (std::is_same_v<ColumnAmax<kBf16>, uint16_t>) {
#if HWY_TARGET != HWY_SCALAR
    const D16 d;
    const size_t n = hn::Lanes(d);
    V16 row_amax = hn::Zero(d);
    for (size_t i = 0; i < kBlockVecs16; ++i) {
      const V16 a = Abs16(Load16<true>(src.x, index + static_cast<int64_t>(i * n)));
      row_amax = hn::Max(row_amax, a);
      uint16_t* ca = col_amax + i * n;
      hn::StoreU(hn::Max(hn::LoadU(d, ca), a), d, ca);
    }
    return hn::BitCast(DI(), row_amax);
#endif
  } else {
    const size_t n = hn::Lanes(DF());
    VI row_amax = hn::Zero(DI());
    for (size_t i = 0; i < kBlockVecs; ++i) {
      const VI a = AbsBits(LoadF<kBf16>(src.x, index + static_cast<int64_t>(i * n)));
      row_amax = hn::Max(row_amax, a);
      int32_t* ca = col_amax + i * n;
      hn::StoreU(hn::Max(hn::LoadU(DI(), ca), a), DI(), ca);
    }
    return row_amax;
  }
}

// Both axes from one read of the strip: each row's blocks are quantized rowwise while the
// column amax accumulates (kLanes blocks at a time, sharing one transposing reduction of
// their amax); the columnwise pass then re-reads the strip from cache.
template <bool kBf16, ElementFormat kFormat, bool kSaturate>
void DualT(const QuantSource& src, const ColStrip& strip, RowwiseOut row_out, ColwiseOut col_out,
           void* workspace) {
  const StripWorkspace<kBf16> ws(workspace, strip.col1 - strip.col0);
  NextStripPrefetch ahead(src, strip);
  constexpr size_t kLanes = hn::MaxLanes(DI());
  constexpr int64_t kBatchCols = static_cast<int64_t>(kLanes) * kBlock;
  const int64_t blocks_per_row = (src.cols + kBlock - 1) / kBlock;
  // Three quarters of the next strip's lines during the row pass, the longer of the two
  // (of 1/2, 3/4 and all, 3/4 was best for f32 and as good as all for bf16).
  constexpr int64_t kAheadLines = kBatchCols * (kBf16 ? 2 : 4) * 3 / 4 / 64;
  for (int64_t r = strip.row0; r < strip.row0 + strip.num_rows; ++r) {
    const int64_t base = r * src.cols;
    uint8_t* row_scales = row_out.scales + r * blocks_per_row;
    int64_t c = strip.col0;
    for (; c + kBatchCols <= strip.col1; c += kBatchCols) {
      ahead.Issue<kAheadLines>();
      VI block_amax[kLanes];
      for (size_t j = 0; j < kLanes; ++j) {
        const int64_t at = c + static_cast<int64_t>(j) * kBlock;
        PrefetchAhead<kBf16>(src.x, base + at);
        block_amax[j] = DualBlockAmax<kBf16>(src, base + at, ws.amax + (at - strip.col0));
      }
      const VI b = ScalesV(src.scale_table,
                           DualAmaxBits<kBf16>(TransposeMax<kLanes, kDualRaw16<kBf16>>(block_amax)));
      uint8_t* scales = row_scales + c / kBlock;
#if HWY_TARGET != HWY_SCALAR
      EncodeBatch16<kBf16, kFormat, kSaturate>(src, base + c, b, row_out.data + base + c, scales);
#else
      hn::StoreU(hn::TruncateTo(hn::Rebind<uint8_t, DI>(), hn::BitCast(DU(), b)),
                 hn::Rebind<uint8_t, DI>(), scales);
      for (size_t j = 0; j < kLanes; ++j) {
        const int64_t at = c + static_cast<int64_t>(j) * kBlock;
        VF vecs[kBlockVecs];
        for (size_t i = 0; i < kBlockVecs; ++i) {
          vecs[i] = LoadF<kBf16>(src.x, base + at + static_cast<int64_t>(i * hn::Lanes(DF())));
        }
        EncodeBlock<kFormat>(vecs, scales[j], row_out.data + base + at);
      }
#endif
    }
    for (; c + kBlock <= strip.col1; c += kBlock) {
      PrefetchAhead<kBf16>(src.x, base + c);
      const VI row_amax =
          DualAmaxBits<kBf16>(DualBlockAmax<kBf16>(src, base + c, ws.amax + (c - strip.col0)));
      uint8_t* scale = row_scales + c / kBlock;
      *scale = BlockScale(src.rule, kFormat,
                          static_cast<uint32_t>(hn::GetLane(hn::MaxOfLanes(DI(), row_amax))));
      VF vecs[kBlockVecs];
      for (size_t i = 0; i < kBlockVecs; ++i) {
        vecs[i] = LoadF<kBf16>(src.x, base + c + static_cast<int64_t>(i * hn::Lanes(DF())));
      }
      EncodeBlock<kFormat>(vecs, *scale, row_out.data + base + c);
    }
    if (c < strip.col1) {  // the row's partial last block (col1 == cols here)
      AccumulateStripAmax<kBf16>(src, r, c, strip.col1, ws.amax + (c - strip.col0));
      PartialBlock<kBf16, kFormat>(src, base + c, strip.col1 - c, row_out.data + base + c,
                                   row_scales + c / kBlock);
    }
  }
  FinishColumnStrip<kBf16, kFormat, kSaturate>(src, strip, col_out, ws, ahead);
}

// Whether a rule's elements can exceed the largest element once scaled (floor and even:
// blocks whose amax mantissa is large); rceil and ceil cannot (docs/decisions.md "rceil and
// saturation", checked by exhaustive_rceil_range), so their kernels leave the clamp out.
HWY_INLINE bool RuleSaturates(ScaleRule rule) {
  return rule != ScaleRule::kRceil && rule != ScaleRule::kCeil;
}

// Run-time (bf16, format, saturation) to template dispatch, once per kernel call.
#define MXTRAIN_DISPATCH_SAT(FN, BF16, FORMAT, SRC, ...)                                  \
  do {                                                                                  \
    if (RuleSaturates((SRC).rule)) FN<BF16, FORMAT, true>(__VA_ARGS__);                  \
    else FN<BF16, FORMAT, false>(__VA_ARGS__);                                          \
  } while (0)
#define MXTRAIN_DISPATCH_TYPES(FN, SRC, ...)                                                \
  do {                                                                                      \
    if ((SRC).bf16) {                                                                       \
      if ((SRC).format == ElementFormat::kE4M3) {                                           \
        MXTRAIN_DISPATCH_SAT(FN, true, ElementFormat::kE4M3, SRC, __VA_ARGS__);             \
      } else {                                                                              \
        MXTRAIN_DISPATCH_SAT(FN, true, ElementFormat::kE5M2, SRC, __VA_ARGS__);             \
      }                                                                                     \
    } else {                                                                                \
      if ((SRC).format == ElementFormat::kE4M3) {                                           \
        MXTRAIN_DISPATCH_SAT(FN, false, ElementFormat::kE4M3, SRC, __VA_ARGS__);            \
      } else {                                                                              \
        MXTRAIN_DISPATCH_SAT(FN, false, ElementFormat::kE5M2, SRC, __VA_ARGS__);            \
      }                                                                                     \
    }                                                                                       \
  } while (0)

void Rowwise(const QuantSource& src, int64_t row0, int64_t row1, RowwiseOut out) {
  MXTRAIN_DISPATCH_TYPES(RowwiseT, src, src, row0, row1, out);
}
void Colwise(const QuantSource& src, const ColStrip& strip, ColwiseOut out, void* workspace) {
  MXTRAIN_DISPATCH_TYPES(ColwiseT, src, src, strip, out, workspace);
}
void Dual(const QuantSource& src, const ColStrip& strip, RowwiseOut row_out, ColwiseOut col_out,
          void* workspace) {
  MXTRAIN_DISPATCH_TYPES(DualT, src, src, strip, row_out, col_out, workspace);
}
#undef MXTRAIN_DISPATCH_TYPES
#undef MXTRAIN_DISPATCH_SAT

template <ElementFormat kFormat>
void EncodeT(const float* in, uint8_t* out, size_t count) {
  const size_t n = hn::Lanes(DF());
  size_t i = 0;
  for (; i + n <= count; i += n) {
    StoreCodes(EncodeV<kFormat, /*kFinite=*/false>(hn::LoadU(DF(), in + i)), out + i);
  }
  for (; i < count; ++i) out[i] = EncodeElement(kFormat, in[i]);
}

void Encode(ElementFormat format, const float* in, uint8_t* out, size_t count) {
  if (format == ElementFormat::kE4M3) {
    EncodeT<ElementFormat::kE4M3>(in, out, count);
  } else {
    EncodeT<ElementFormat::kE5M2>(in, out, count);
  }
}

const QuantKernels* GetQuantKernels() {
  static const QuantKernels kernels = {hwy::TargetName(HWY_TARGET), &Rowwise, &Colwise, &Dual,
                                       &Encode};
  return &kernels;
}

}  // namespace HWY_NAMESPACE
}  // namespace mxtrain::internal
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
#include "mxtrain/error.h"
#include "simd_internal.h"

namespace mxtrain::internal {

HWY_EXPORT(GetQuantKernels);

const QuantKernels& CurrentQuantKernels() {
  EnsureSimdTargetChosen();
  return *HWY_DYNAMIC_DISPATCH(GetQuantKernels)();
}

const QuantKernels& QuantKernelsForTarget(const std::string& name) {
  for (int64_t target : hwy::SupportedAndGeneratedTargets()) {
    if (name != hwy::TargetName(target)) continue;
    // The dispatch table's slot for one target, as hwy::ChosenTarget::GetIndex computes it
    // for a mask holding that target alone (the last slot is the portable fallback).
    const int64_t shifted = HWY_CHOSEN_TARGET_SHIFT(target);
    const size_t index = shifted != 0 ? static_cast<size_t>(__builtin_ctzll(shifted))
                                      : static_cast<size_t>(HWY_MAX_DYNAMIC_TARGETS + 1);
    return *HWY_DISPATCH_TABLE(GetQuantKernels)[index]();
  }
  Fail("unknown or unsupported SIMD target '", name, "'");
}

}  // namespace mxtrain::internal
#endif  // HWY_ONCE
