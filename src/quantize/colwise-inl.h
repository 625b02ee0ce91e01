// The column-blocked kernel (32x1 blocks along M), in strips of up to 32 rows: pass 1
// accumulates each column's amax, pass 2 encodes the strip again from cache, in 16-bit
// lanes where the target has them.
// One of the quantizer's kernel families (quantize_simd.cc compiles them for every target):
// included once per Highway target, hence the toggling guard of Highway's own -inl.h files.
#if defined(MXTRAIN_QUANTIZE_COLWISE_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef MXTRAIN_QUANTIZE_COLWISE_INL_H_
#undef MXTRAIN_QUANTIZE_COLWISE_INL_H_
#else
#define MXTRAIN_QUANTIZE_COLWISE_INL_H_
#endif

#include <hwy/cache_control.h>
#include <hwy/highway.h>

#include <algorithm>
#include <cstring>
#include <type_traits>

#include "quantize/encode-inl.h"
#include "quantize/encode16-inl.h"
#include "quantize/prefetch-inl.h"

HWY_BEFORE_NAMESPACE();
namespace mxtrain::internal {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// Whether the dual kernel's fused pass 2 streams its rowwise codes too where it streams
// the columnwise ones (ColwiseOut::stream): on the AVX-512 targets. On AMD Zen 4 that took
// bf16 dual 4096 x 4096, 2 threads, 2.10-2.26 -> 2.00-2.05 ms; on the AVX2 target of a
// Zen 3 (no AVX-512) streaming this second half made the same kernel 9-12% slower (bf16
// 4.26 -> 4.65 ms, f32 5.40 -> 6.05; docs/decisions.md "Dual's rowwise codes streamed on
// AVX-512 only").
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3
constexpr bool kDualStreamsRows = true;
#else
constexpr bool kDualStreamsRows = false;
#endif

// The rowwise half of the dual kernel's fused pass 2 (dual-inl.h): the strip is whole rows
// of whole blocks, and for block k of the strip (row-major from its first row) sub2[k] and
// slow2[k] hold Enc16::Sub and ::SlowBelow of its scale byte scales[k], each in both halves
// of a 32-bit word (StoreOffsets2; a NaN block's are never read, EncodeRowsFromScales). The
// codes go to data, the rowwise output ([rows, cols], as the source).
struct RowCodes {
  const uint32_t* sub2;
  const uint32_t* slow2;
  const uint8_t* scales;
  uint8_t* data;
};

#if HWY_TARGET != HWY_SCALAR
// One element's 16-bit pattern: bf16 as it is, fp32 narrowed to odd (NarrowToOdd's scalar
// form: the low 16 bits OR-ed into bit 16).
template <bool kBf16>
HWY_INLINE uint16_t Scalar16(const void* x, int64_t index) {
  if constexpr (kBf16) return static_cast<const uint16_t*>(x)[index];
  const uint32_t bits = F32Bits(static_cast<const float*>(x)[index]);
  return static_cast<uint16_t>((bits >> 16) | ((bits & 0xFFFFu) != 0 ? 1u : 0u));
}

// Columnwise pass 1 in 16-bit lanes for columns [col0, col1) of a row: amax[c - col0] =
// max(amax[c - col0], |x[row, c]| as 16 bits); an fp32 row's narrowed patterns also go to
// copy[c - col0] (the dual kernel's copy, StripWorkspace).
template <bool kBf16>
HWY_INLINE void AccumulateColumnAmax16(const QuantSource& src, int64_t row, int64_t col0,
                                       int64_t col1, uint16_t* amax, uint16_t* copy) {
  const D16 d;
  const int64_t n = static_cast<int64_t>(hn::Lanes(d));
  const int64_t base = row * src.cols;
  int64_t c = col0;
  for (; c + n <= col1; c += n) {
    if ((c & 31) == 0) PrefetchAhead<kBf16>(src.x, base + c);
    const V16 h = Load16<kBf16>(src.x, base + c);
    if constexpr (!kBf16) hn::StoreU(h, d, copy + (c - col0));
    uint16_t* a = amax + (c - col0);
    hn::StoreU(hn::Max(hn::LoadU(d, a), Abs16(h)), d, a);
  }
  for (; c < col1; ++c) {
    const uint16_t h = Scalar16<kBf16>(src.x, base + c);
    if constexpr (!kBf16) copy[c - col0] = h;
    amax[c - col0] = std::max<uint16_t>(amax[c - col0], h & 0x7FFF);
  }
}

// Where pass 2 reads a strip's elements, row by row: the source, or the 16-bit copy that an
// fp32 strip's row pass wrote (the dual kernel, StripWorkspace). Column c of the strip's row
// i (from row0) is element i * stride + (c - col0) from `first`, 16-bit patterns (kIn16) or
// fp32 values that Load16 narrows.
struct StripIn {
  const void* first;
  int64_t stride;
};

// The last len (< Lanes(D16())) columns of a row through the 16-bit encoder, from a
// zero-padded copy of their input `in` (StripIn's elements; zero lanes encode to 0 and are
// never slow); their slow lanes are redone from the source at `index`. sub and slow_below
// are whole vectors whose first len lanes are the columns' (the rest any value), scales the
// columns' scale bytes. For strips narrower than a vector; wider ones end with the vector
// that ends at their last column.
template <bool kBf16, bool kIn16, ElementFormat kFormat, bool kSaturate>
HWY_INLINE void EncodeTail16(const void* x, int64_t index, const void* in, int64_t len,
                             const uint16_t* sub, const uint16_t* slow_below, const uint8_t* scales,
                             uint8_t* out) {
  const D16 d;
  constexpr size_t kSize = kIn16 ? 2 : 4;
  alignas(64) uint8_t padded[hn::MaxLanes(D16()) * kSize] = {};
  std::memcpy(padded, in, static_cast<size_t>(len) * kSize);
  const V16 h = Load16<kIn16>(padded, 0);
  const V16 slow = hn::Load(d, slow_below);
  Fast16 fast = AllFast16();
  alignas(64) uint8_t codes[hn::MaxLanes(D16())];
  StoreCodes16(Encode16<kFormat, kSaturate>(h, hn::Load(d, sub), slow, fast), codes);
  std::memcpy(out, codes, static_cast<size_t>(len));
  if (HWY_UNLIKELY(AnySlow16(fast))) {
    EncodeSlowLanes<kBf16, kFormat>(x, index, LaneBits16(SlowLanes16(h, slow)), scales, 0, out);
  }
}

// Columnwise pass 2 in 16-bit lanes (no NaN column in the strip): the strip's input `in`
// (StripIn; kIn16: 16-bit patterns), per-column subtrahends and thresholds (Enc16), and the
// scale bytes for the exact path, which reads the source. kSaturate as for Encode16.
// kRows: the dual kernel's rowwise encode too, from the same loads (RowCodes; the strip's
// width is then a multiple of 32, so every vector lies within one block).
template <bool kBf16, bool kIn16, ElementFormat kFormat, bool kSaturate, bool kStream,
          bool kRows = false>
void EncodeColumnStrip16(const QuantSource& src, const ColStrip& strip, ColwiseOut out,
                         const StripIn in, const uint8_t* scales, const uint16_t* sub,
                         const uint16_t* slow_below, NextStripPrefetch& next_strip,
                         const RowCodes* rows = nullptr) {
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
  // A strip narrower than a vector: its columns' offsets as whole vectors (EncodeTail16).
  alignas(64) uint16_t tail_sub[hn::MaxLanes(D16())] = {};
  alignas(64) uint16_t tail_slow_below[hn::MaxLanes(D16())] = {};
  if (col1 - col0 < n) {
    std::copy(sub, sub + (col1 - col0), tail_sub);
    std::copy(slow_below, slow_below + (col1 - col0), tail_slow_below);
  }
  for (int64_t r = strip.row0; r < strip.row0 + strip.num_rows; ++r) {
    const int64_t base = r * cols;
    uint8_t* data = out.data + base;
    const int64_t row_in = (r - strip.row0) * in.stride - col0;  // + column: the input's index
    Fast16 fast = AllFast16();
    int64_t c = col0;
    if (groups_per_row == 0) ahead.Issue(per_row);
    const auto load = [&](int64_t at) { return Load16<kIn16>(in.first, row_in + at); };
    const auto encode = [&](int64_t at, V16 h, Fast16& acc) {
      return Encode16<kFormat, kSaturate>(h, hn::LoadU(d, sub + (at - col0)),
                                          hn::LoadU(d, slow_below + (at - col0)), acc);
    };
    // kRows: the block of column `at` in this row (an index into RowCodes' arrays).
    const int64_t row_blocks = (r - strip.row0) * (cols / kBlock);
    uint8_t* row_data = kRows ? rows->data + base : nullptr;
    const auto row_offset = [&](const uint32_t* offsets2, int64_t at) {
      return hn::BitCast(d, hn::Set(DU(), offsets2[row_blocks + at / kBlock]));
    };
    const auto encode_row = [&](int64_t at, V16 h, Fast16& acc) {
      return Encode16<kFormat, kSaturate>(h, row_offset(rows->sub2, at),
                                          row_offset(rows->slow2, at), acc);
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
      Fast16 group_fast = AllFast16();
      Fast16 row_fast = AllFast16();
      ahead.Issue<kGroupAhead>();
      for (int64_t i = 0; i < kGroup; i += 2) {  // pairs share one pack (StoreCodes16x2)
        const int64_t at = c + i * n;
        const V16 h0 = load(at), h1 = load(at + n);
        const V16 first = encode(at, h0, group_fast);
        StoreCodes16x2<kStream>(first, encode(at + n, h1, group_fast), data + at);
        if constexpr (kRows) {
          const V16 row_first = encode_row(at, h0, row_fast);
          StoreCodes16x2<kStream && kDualStreamsRows>(row_first, encode_row(at + n, h1, row_fast),
                                                      row_data + at);
        }
      }
      if (HWY_UNLIKELY(AnySlow16(group_fast) || (kRows && AnySlow16(row_fast)))) {
        if (num_flagged < kMaxFlagged) {
          flagged[num_flagged++] = c;
        } else {
          all_groups = true;
        }
      }
    }
    const int64_t groups_end = c;
    Fast16 row_fast = AllFast16();
    for (; c + 2 * n <= col1; c += 2 * n) {
      const V16 h0 = load(c), h1 = load(c + n);
      const V16 first = encode(c, h0, fast);
      StoreCodes16x2(first, encode(c + n, h1, fast), data + c);
      if constexpr (kRows) {
        const V16 row_first = encode_row(c, h0, row_fast);
        StoreCodes16x2(row_first, encode_row(c + n, h1, row_fast), row_data + c);
      }
    }
    for (; c + n <= col1; c += n) {
      const V16 h = load(c);
      StoreCodes16(encode(c, h, fast), data + c);
      if constexpr (kRows) StoreCodes16(encode_row(c, h, row_fast), row_data + c);
    }
    const int64_t vectors_end = c;
    // Re-checks the vectors in [c0, c1) and redoes the flagged ones (kRows: the rowwise
    // codes too).
    const auto redo = [&](int64_t c0, int64_t c1) {
      for (int64_t v = c0; v + n <= c1; v += n) {
        const V16 h = load(v);
        const M16 slow = SlowLanes16(h, hn::LoadU(d, slow_below + (v - col0)));
        if (!hn::AllFalse(d, slow)) {
          EncodeSlowLanes<kBf16, kFormat>(x, base + v, LaneBits16(slow), scales + (v - col0), 0,
                                          data + v);
        }
        if constexpr (kRows) {
          const M16 row_slow = SlowLanes16(h, row_offset(rows->slow2, v));
          if (!hn::AllFalse(d, row_slow)) {
            EncodeSlowLanes<kBf16, kFormat>(x, base + v, LaneBits16(row_slow), nullptr,
                                            rows->scales[row_blocks + v / kBlock], row_data + v);
          }
        }
      }
    };
    if (HWY_UNLIKELY(all_groups)) {
      redo(col0, groups_end);
    } else {
      for (int i = 0; i < num_flagged; ++i) redo(flagged[i], flagged[i] + kGroup * n);
    }
    if (HWY_UNLIKELY(AnySlow16(fast) || (kRows && AnySlow16(row_fast)))) {
      redo(groups_end, vectors_end);
    }
    if constexpr (kRows) continue;  // whole vectors only
    if (c < col1 && col1 - col0 >= n) {
      // The columns past the last whole vector as the vector that ends at col1: the
      // columns it shares with the one before get the same codes again, and its redo
      // fixes the slow lanes of both (an ordinary store, after the others in program order).
      Fast16 tail_fast = AllFast16();
      StoreCodes16(encode(col1 - n, load(col1 - n), tail_fast), data + (col1 - n));
      if (HWY_UNLIKELY(AnySlow16(tail_fast))) redo(col1 - n, col1);
    } else if (c < col1) {
      const void* tail_in = static_cast<const char*>(in.first) + (row_in + c) * (kIn16 ? 2 : 4);
      EncodeTail16<kBf16, kIn16, kFormat, kSaturate>(
          x, base + c, tail_in, col1 - c, tail_sub, tail_slow_below, scales + (c - col0), data + c);
    }
  }
  // The streamed codes reach memory before the strip is reported done (and the redos'
  // ordinary stores above went after them to the same lines, in program order).
  if constexpr (kStream) hwy::FlushStream();
  next_strip = ahead;
}
#endif  // HWY_TARGET != HWY_SCALAR

// Columnwise pass 1 for one row: amax[c] = max(amax[c], |x[row, col0 + c]|).
template <bool kBf16>
HWY_INLINE void AccumulateColumnAmax(const QuantSource& src, int64_t row, int64_t col0,
                                     int64_t col1, int32_t* amax) {
  const int64_t n = static_cast<int64_t>(hn::Lanes(DF()));
  const int64_t base = row * src.cols;
  int64_t c = col0;
  for (; c + n <= col1; c += n) {
    if ((c & 31) == 0) PrefetchAhead<kBf16>(src.x, base + c);
    int32_t* a = amax + (c - col0);
    hn::StoreU(hn::Max(hn::LoadU(DI(), a), AbsBits(LoadF<kBf16>(src.x, base + c))), DI(), a);
  }
  for (; c < col1; ++c) {
    const int32_t v =
        static_cast<int32_t>(F32Bits(LoadScalar<kBf16>(src.x, base + c)) & kF32AbsMask);
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

// The column amax of a strip: 16-bit patterns' magnitudes where the 16-bit encoder runs on
// bf16, or on an fp32 strip's 16-bit copy (kCopy), fp32 bits otherwise.
template <bool kBf16, bool kCopy = false>
using ColumnAmax = std::conditional_t<k16 && (kBf16 || kCopy), uint16_t, int32_t>;

// The largest |x| of n elements of the source at index, step apart, as fp32 bits.
template <bool kBf16>
HWY_INLINE uint32_t ExactAmax(const void* x, int64_t index, int64_t n, int64_t step) {
  uint32_t amax = 0;
  for (int64_t i = 0; i < n; ++i) {
    amax = std::max(amax, F32Bits(LoadScalar<kBf16>(x, index + i * step)) & kF32AbsMask);
  }
  return amax;
}

// The amax to take the scale of, given one as fp32 bits: where kCopy it is the narrowed
// amax of an fp32 strip's copy, which gives the full amax's byte wherever the table marks
// its binade (NarrowExact, scale_table.h); elsewhere (rceil's tiniest binades) the fp32
// amax of the elements it came from (ExactAmax's arguments).
template <bool kBf16, bool kCopy>
HWY_INLINE uint32_t ScaleAmax(const ScaleTable& table, uint32_t amax_bits, const void* x,
                              int64_t index, int64_t n, int64_t step) {
  if (!kCopy || NarrowExact(table, amax_bits >> 23)) return amax_bits;
  return ExactAmax<kBf16>(x, index, n, step);
}

// ScaleAmax on every lane of amax (fp32 bits), lane i's elements starting at index + i *
// lane_step: for the scale paths off the affine range, where a lane may need its fp32 amax.
template <bool kBf16, bool kCopy>
HWY_INLINE VI ScaleAmaxV(const ScaleTable& table, VI amax, const void* x, int64_t index,
                         int64_t lane_step, int64_t n, int64_t step) {
  if constexpr (!kCopy) return amax;
  const DU du;
  alignas(64) uint32_t bits[hn::MaxLanes(DU())];
  hn::Store(hn::BitCast(du, amax), du, bits);
  for (size_t i = 0; i < hn::Lanes(du); ++i) {
    bits[i] = ScaleAmax<kBf16, kCopy>(table, bits[i], x,
                                      index + static_cast<int64_t>(i) * lane_step, n, step);
  }
  return hn::BitCast(DI(), hn::Load(du, bits));
}

// A strip's per-column workspace (kernels.h: WorkspaceBytesPerColumn): amax, fp32 factors,
// the 16-bit encoder's subtrahends and thresholds and, where kCopy, the strip's 16-bit
// copy (num_rows rows of width patterns).
template <bool kBf16, bool kCopy = false>
struct StripWorkspace {
  // The bytes per column it lays out below (kernels.h's WorkspaceBytesPerColumn adds what
  // the dual kernel keeps after them).
  static constexpr int64_t kBytesPerColumn = kCopy ? 16 + 2 * kBlock : 16;
  ColumnAmax<kBf16, kCopy>* amax;
  float* mult;
  uint16_t* sub;
  uint16_t* slow_below;
  uint16_t* copy;
  int64_t width;
  StripWorkspace(void* workspace, int64_t width)
      : amax(static_cast<ColumnAmax<kBf16, kCopy>*>(workspace)),
        mult(reinterpret_cast<float*>(static_cast<char*>(workspace) + 4 * width)),
        sub(reinterpret_cast<uint16_t*>(static_cast<char*>(workspace) + 8 * width)),
        slow_below(reinterpret_cast<uint16_t*>(static_cast<char*>(workspace) + 10 * width)),
        copy(kCopy ? reinterpret_cast<uint16_t*>(static_cast<char*>(workspace) + 16 * width)
                   : nullptr),
        width(width) {
    std::fill(amax, amax + width, ColumnAmax<kBf16, kCopy>{0});
  }
  // Where the copy of the strip's row i (from row0), column c (from col0) goes (null
  // without a copy).
  uint16_t* CopyAt(int64_t i, int64_t c) const {
    if constexpr (!kCopy) return nullptr;
    return copy + i * width + c;
  }
};

// Columnwise pass 1 for one row, in the strip's amax type; where kCopy the row's 16-bit
// patterns also go to `copy` (the place of col0).
template <bool kBf16, bool kCopy = false>
HWY_INLINE void AccumulateStripAmax(const QuantSource& src, int64_t row, int64_t col0, int64_t col1,
                                    ColumnAmax<kBf16, kCopy>* amax, uint16_t* copy) {
  if constexpr (std::is_same_v<ColumnAmax<kBf16, kCopy>, uint16_t>) {
#if HWY_TARGET != HWY_SCALAR
    AccumulateColumnAmax16<kBf16>(src, row, col0, col1, amax, copy);
#endif
  } else {
    (void)copy;
    AccumulateColumnAmax<kBf16>(src, row, col0, col1, amax);
  }
}

// Columnwise scales from the accumulated amax (a vector of them at a time), then pass 2
// over the strip (now in cache).
#if HWY_TARGET != HWY_SCALAR
// The rowwise codes of RowCodes' strip block by block from their scale bytes, NaN blocks
// included (the fused pass 2 leaves a strip with a NaN column to the fp32 encoder, and a
// NaN block always comes with one: both come from a non-finite element).
template <bool kBf16, ElementFormat kFormat>
void EncodeRowsFromScales(const QuantSource& src, const ColStrip& strip, const RowCodes& rows) {
  const int64_t begin = strip.row0 * src.cols;
  const int64_t blocks = strip.num_rows * src.cols / kBlock;
  for (int64_t k = 0; k < blocks; ++k) {
    const int64_t index = begin + k * kBlock;
    QuantizeBlock16<kBf16, kFormat>(src.x, index, rows.scales[k], rows.data + index);
  }
}
#endif

// kRows: the dual kernel's fused pass 2, which also writes the strip's rowwise codes
// (RowCodes, EncodeColumnStrip16).
template <bool kBf16, ElementFormat kFormat, bool kSaturate, bool kCopy = false, bool kRows = false>
void FinishColumnStrip(const QuantSource& src, const ColStrip& strip, ColwiseOut out,
                       const StripWorkspace<kBf16, kCopy>& ws, NextStripPrefetch& ahead,
                       const RowCodes* rows = nullptr) {
  const int64_t width = strip.col1 - strip.col0;
  uint8_t* scales = out.scales + strip.scale_row * src.cols + strip.col0;
  const DI di;
  const int64_t n = static_cast<int64_t>(hn::Lanes(di));
  const hn::Rebind<uint16_t, DI> d16;
  auto any_nan = hn::FirstN(di, 0);
  // Columns [c, c + n) in 32-bit lanes: scale bytes, and the 16-bit encoder's offsets.
  const auto step32 = [&](int64_t c) {
    VI amax;
    if constexpr (sizeof(ws.amax[0]) == 2) {
      const auto a16 = hn::LoadU(d16, reinterpret_cast<const uint16_t*>(ws.amax) + c);
      amax = hn::BitCast(di, hn::ShiftLeft<16>(hn::PromoteTo(DU(), a16)));
      // Off the 16-bit fast path (lanes outside the affine range, or the last columns):
      // narrowed amax in binades the table does not take as they are get the column's fp32
      // amax.
      amax = ScaleAmaxV<kBf16, kCopy>(*src.scale_table, amax, src.x,
                                      strip.row0 * src.cols + strip.col0 + c, 1, strip.num_rows,
                                      src.cols);
    } else {
      amax = hn::LoadU(di, reinterpret_cast<const int32_t*>(ws.amax) + c);
    }
    const VI b = ScalesV(src.scale_table, amax);
    StoreLowBytes(hn::BitCast(DU(), b), scales + c);
    any_nan = hn::Or(any_nan, hn::Eq(b, hn::Set(di, kE8M0NaN)));
#if HWY_TARGET != HWY_SCALAR
    VI sub, slow_below;
    OffsetsV<kFormat>(di, b, sub, slow_below);
    hn::StoreU(hn::TruncateTo(d16, hn::BitCast(DU(), sub)), d16, ws.sub + c);
    hn::StoreU(hn::TruncateTo(d16, hn::BitCast(DU(), slow_below)), d16, ws.slow_below + c);
#endif
  };
  int64_t c = 0;
#if HWY_TARGET != HWY_SCALAR
  if constexpr (sizeof(ws.amax[0]) == 2) {
    // bf16 amax in 16-bit lanes, twice the columns per op (in 32-bit lanes this loop took
    // 15% of bf16 columnwise time in cache on AVX2).
    const D16 dh;
    const hn::RebindToSigned<D16> ds;
    const hn::Rebind<uint8_t, D16> d8;
    const int64_t nh = static_cast<int64_t>(hn::Lanes(dh));
    auto any_nan16 = hn::FirstN(dh, 0);
    for (; c + nh <= width; c += nh) {
      V16 b;
      if (HWY_UNLIKELY(!ScalesV16(src.scale_table, hn::LoadU(dh, ws.amax + c), b))) {
        // A lane outside the affine binades: these columns take the table in 32-bit lanes,
        // bytes, NaN flag and offsets included.
        for (int64_t h = 0; h < nh; h += n) step32(c + h);
        continue;
      }
      hn::StoreU(hn::DemoteTo(d8, hn::BitCast(ds, b)), d8, scales + c);
      any_nan16 = hn::Or(any_nan16, hn::Eq(b, hn::Set(dh, kE8M0NaN)));
      hn::Vec<decltype(ds)> sub, slow_below;
      OffsetsV<kFormat>(ds, hn::BitCast(ds, b), sub, slow_below);
      hn::StoreU(hn::BitCast(dh, sub), dh, ws.sub + c);
      hn::StoreU(hn::BitCast(dh, slow_below), dh, ws.slow_below + c);
    }
    if (!hn::AllFalse(dh, any_nan16)) any_nan = hn::FirstN(di, 1);
  }
#endif
  for (; c + n <= width; c += n) step32(c);
  bool nan_column = !hn::AllFalse(di, any_nan);
  for (; c < width; ++c) {
    const uint32_t amax_bits = ScaleAmax<kBf16, kCopy>(
        *src.scale_table, static_cast<uint32_t>(ws.amax[c]) << (sizeof(ws.amax[0]) == 2 ? 16 : 0),
        src.x, strip.row0 * src.cols + strip.col0 + c, strip.num_rows, src.cols);
    scales[c] = BlockScale(src.rule, kFormat, amax_bits);
    nan_column |= scales[c] == kE8M0NaN;
#if HWY_TARGET != HWY_SCALAR
    ws.sub[c] = Enc16<kFormat>::Sub(scales[c]);
    ws.slow_below[c] = Enc16<kFormat>::SlowBelow(scales[c]);
#endif
  }
  if (HWY_UNLIKELY(nan_column) || !k16) {
#if HWY_TARGET != HWY_SCALAR
    if constexpr (kRows) EncodeRowsFromScales<kBf16, kFormat>(src, strip, *rows);
#endif
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
  // kRows: where the rowwise codes stream (kDualStreamsRows), only if they are aligned as
  // well.
  const bool aligned =
      src.cols % static_cast<int64_t>(align) == 0 &&
      reinterpret_cast<uintptr_t>(out.data + strip.col0) % align == 0 &&
      (!kRows || !kDualStreamsRows ||
       reinterpret_cast<uintptr_t>(rows->data + strip.row0 * src.cols) % align == 0);
  // Pass 2's input: the copy (kCopy), else the source.
  constexpr bool kIn16 = kBf16 || kCopy;
  const StripIn in = kCopy ? StripIn{ws.copy, ws.width}
                           : StripIn{static_cast<const char*>(src.x) +
                                         (strip.row0 * src.cols + strip.col0) * (kBf16 ? 2 : 4),
                                     src.cols};
  if (out.stream && aligned) {
    EncodeColumnStrip16<kBf16, kIn16, kFormat, kSaturate, true, kRows>(
        src, strip, out, in, scales, ws.sub, ws.slow_below, ahead, rows);
  } else {
    EncodeColumnStrip16<kBf16, kIn16, kFormat, kSaturate, false, kRows>(
        src, strip, out, in, scales, ws.sub, ws.slow_below, ahead, rows);
  }
#endif
}

template <bool kBf16, ElementFormat kFormat, bool kSaturate>
void ColwiseT(const QuantSource& src, const ColStrip& strip, ColwiseOut out, void* workspace) {
  static_assert(WorkspaceBytesPerColumn(/*dual=*/false, kBf16) ==
                StripWorkspace<kBf16>::kBytesPerColumn);
  const StripWorkspace<kBf16> ws(workspace, strip.col1 - strip.col0);
  NextStripPrefetch ahead(src, strip);
  int64_t c = strip.col0;
#if HWY_TARGET != HWY_SCALAR
  {
    // The amax of kChunk vectors of columns in registers down the strip's rows (16-bit
    // lanes for bf16, fp32 bits for fp32), one store each, instead of a load and a store of
    // the running amax per row and vector (f32 colwise 256 x 1024, one thread: see
    // docs/decisions.md). Pass 2 narrows an fp32 strip itself: a 16-bit copy written here,
    // as the dual kernel's row pass does, was slower (decisions.md "fp32 dual from a 16-bit
    // copy").
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
        ahead.Issue<kChunk* static_cast<int64_t>(hn::MaxLanes(da) * sizeof(hn::TFromD<DA>)) / 64 /
                    2>();
        for (int64_t i = 0; i < kChunk; ++i) {
          if constexpr (kBf16) {
            acc[i] = hn::Max(acc[i], Abs16(Load16<true>(src.x, at + i * n)));
          } else {
            acc[i] = hn::Max(acc[i], AbsBits(LoadF<false>(src.x, at + i * n)));
          }
        }
      }
      for (int64_t i = 0; i < kChunk; ++i)
        hn::StoreU(acc[i], da, ws.amax + (c - strip.col0) + i * n);
    }
  }
#endif
  if (c < strip.col1) {
    // The columns past the chunks (all of a narrow strip): half the next strip's lines, as
    // above.
    const int64_t rate = c == strip.col0 ? ahead.Rate(strip.num_rows, 1, 2) : 0;
    for (int64_t r = strip.row0; r < strip.row0 + strip.num_rows; ++r) {
      ahead.Issue(rate);
      AccumulateStripAmax<kBf16>(src, r, c, strip.col1, ws.amax + (c - strip.col0), nullptr);
    }
  }
  FinishColumnStrip<kBf16, kFormat, kSaturate>(src, strip, out, ws, ahead);
}

}  // namespace HWY_NAMESPACE
}  // namespace mxtrain::internal
HWY_AFTER_NAMESPACE();

#endif  // MXTRAIN_QUANTIZE_COLWISE_INL_H_
