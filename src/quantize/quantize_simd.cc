// The SIMD quantization kernels, written once over vector width with Google Highway and
// compiled for every x86 target (AVX3 = AVX-512, AVX2, SSE4, SSSE3) plus the portable
// SCALAR one; simd.h picks among them at run time.
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

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "quantize/quantize_simd.cc"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/cache_control.h>
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

HWY_INLINE void StoreCodes(VI codes, uint8_t* out) {
  hn::StoreU(hn::TruncateTo(DU8(), hn::BitCast(DU(), codes)), DU8(), out);
}

// The factor a block is multiplied by before encoding: NaN for a NaN block, so that every
// element encodes to 0x7F.
HWY_INLINE float BlockMultiplier(uint8_t scale) {
  return scale == kE8M0NaN ? std::numeric_limits<float>::quiet_NaN() : E8M0InverseScale(scale);
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

// Lane j of the result = the largest lane of in[j], for the kLanes vectors in[0..kLanes).
// A transposing reduction: ~3 vector ops per vector instead of ~9 for a horizontal
// reduction each (the per-block scale was a third of the rowwise kernel's time).
template <size_t kLanes>
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
      const VI ab = hn::Max(hn::InterleaveLower(v[0], v[1]), hn::InterleaveUpper(di, v[0], v[1]));
      const VI cd = hn::Max(hn::InterleaveLower(v[2], v[3]), hn::InterleaveUpper(di, v[2], v[3]));
      const auto ab64 = hn::BitCast(d64, ab);
      const auto cd64 = hn::BitCast(d64, cd);
      per_block[g] = hn::Max(hn::BitCast(di, hn::InterleaveLower(ab64, cd64)),
                             hn::BitCast(di, hn::InterleaveUpper(d64, ab64, cd64)));
    }
    if constexpr (kLanes == 4) {
      return per_block[0];
    } else if constexpr (kLanes == 8) {
      return hn::Max(hn::ConcatLowerLower(di, per_block[1], per_block[0]),
                     hn::ConcatUpperUpper(di, per_block[1], per_block[0]));
    } else {
      static_assert(kLanes == 16, "TransposeMax handles 1, 4, 8 or 16 lanes");
      // Fold the upper 256 bits onto the lower for pairs of groups, then adjacent blocks.
      const VI v01 = hn::Max(hn::ConcatLowerLower(di, per_block[1], per_block[0]),
                             hn::ConcatUpperUpper(di, per_block[1], per_block[0]));
      const VI v23 = hn::Max(hn::ConcatLowerLower(di, per_block[3], per_block[2]),
                             hn::ConcatUpperUpper(di, per_block[3], per_block[2]));
      alignas(64) static constexpr int32_t kSwapBlocks[16] = {4, 5, 6, 7, 0, 1, 2, 3,
                                                               12, 13, 14, 15, 8, 9, 10, 11};
      const auto swap = hn::SetTableIndices(di, kSwapBlocks);
      const VI w01 = hn::Max(v01, hn::TableLookupLanes(v01, swap));  // [g0 g0 g1 g1]
      const VI w23 = hn::Max(v23, hn::TableLookupLanes(v23, swap));  // [g2 g2 g3 g3]
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

template <bool kBf16, ElementFormat kFormat>
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
      BlockBatch<kBf16, kFormat>(src, base + b * kBlock, data + b * kBlock, scales + b);
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

// Columnwise scales from the accumulated amax, then pass 2 over the strip (now in cache).
template <bool kBf16, ElementFormat kFormat>
void FinishColumnStrip(const QuantSource& src, const ColStrip& strip, ColwiseOut out,
                       const int32_t* amax, float* mult) {
  const int64_t width = strip.col1 - strip.col0;
  uint8_t* scales = out.scales + strip.scale_row * src.cols + strip.col0;
  bool any_nan = false;
  for (int64_t c = 0; c < width; ++c) {
    scales[c] = BlockScale(src.rule, kFormat, static_cast<uint32_t>(amax[c]));
    mult[c] = BlockMultiplier(scales[c]);
    any_nan |= scales[c] == kE8M0NaN;
  }
  if (HWY_UNLIKELY(any_nan)) {
    EncodeColumnStrip<kBf16, kFormat, /*kFinite=*/false>(src, strip, out, mult);
  } else {
    EncodeColumnStrip<kBf16, kFormat, /*kFinite=*/true>(src, strip, out, mult);
  }
}

template <bool kBf16, ElementFormat kFormat>
void ColwiseT(const QuantSource& src, const ColStrip& strip, ColwiseOut out, void* workspace) {
  const int64_t width = strip.col1 - strip.col0;
  int32_t* amax = static_cast<int32_t*>(workspace);
  float* mult = reinterpret_cast<float*>(amax + width);
  std::fill(amax, amax + width, 0);
  for (int64_t r = strip.row0; r < strip.row0 + strip.num_rows; ++r) {
    AccumulateColumnAmax<kBf16>(src, r, strip.col0, strip.col1, amax);
  }
  FinishColumnStrip<kBf16, kFormat>(src, strip, out, amax, mult);
}

// Both axes from one read of the strip: each row's blocks are quantized rowwise while the
// column amax accumulates; the columnwise pass then re-reads the strip from cache.
template <bool kBf16, ElementFormat kFormat>
void DualT(const QuantSource& src, const ColStrip& strip, RowwiseOut row_out, ColwiseOut col_out,
           void* workspace) {
  const int64_t width = strip.col1 - strip.col0;
  int32_t* amax = static_cast<int32_t*>(workspace);
  float* mult = reinterpret_cast<float*>(amax + width);
  std::fill(amax, amax + width, 0);
  const size_t n = hn::Lanes(DF());
  const int64_t blocks_per_row = (src.cols + kBlock - 1) / kBlock;
  for (int64_t r = strip.row0; r < strip.row0 + strip.num_rows; ++r) {
    const int64_t base = r * src.cols;
    int64_t c = strip.col0;
    for (; c + kBlock <= strip.col1; c += kBlock) {
      PrefetchAhead<kBf16>(src.x, base + c);
      VF vecs[kBlockVecs];
      VI row_amax = hn::Zero(DI());
      for (size_t i = 0; i < kBlockVecs; ++i) {
        vecs[i] = LoadF<kBf16>(src.x, base + c + static_cast<int64_t>(i * n));
        const VI a = AbsBits(vecs[i]);
        row_amax = hn::Max(row_amax, a);
        int32_t* col_amax = amax + (c - strip.col0) + i * n;
        hn::StoreU(hn::Max(hn::LoadU(DI(), col_amax), a), DI(), col_amax);
      }
      uint8_t* scale = row_out.scales + r * blocks_per_row + c / kBlock;
      *scale = BlockScale(src.rule, kFormat,
                          static_cast<uint32_t>(hn::GetLane(hn::MaxOfLanes(DI(), row_amax))));
      EncodeBlock<kFormat>(vecs, *scale, row_out.data + base + c);
    }
    if (c < strip.col1) {  // the row's partial last block (col1 == cols here)
      AccumulateColumnAmax<kBf16>(src, r, c, strip.col1, amax + (c - strip.col0));
      PartialBlock<kBf16, kFormat>(src, base + c, strip.col1 - c, row_out.data + base + c,
                                   row_out.scales + r * blocks_per_row + c / kBlock);
    }
  }
  FinishColumnStrip<kBf16, kFormat>(src, strip, col_out, amax, mult);
}

// Run-time (bf16, format) to template dispatch, once per kernel call.
#define MXTRAIN_DISPATCH_TYPES(FN, SRC, ...)                                          \
  do {                                                                                \
    if ((SRC).bf16) {                                                                 \
      if ((SRC).format == ElementFormat::kE4M3) FN<true, ElementFormat::kE4M3>(__VA_ARGS__); \
      else FN<true, ElementFormat::kE5M2>(__VA_ARGS__);                               \
    } else {                                                                          \
      if ((SRC).format == ElementFormat::kE4M3) FN<false, ElementFormat::kE4M3>(__VA_ARGS__); \
      else FN<false, ElementFormat::kE5M2>(__VA_ARGS__);                              \
    }                                                                                 \
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
