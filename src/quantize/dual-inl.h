// The dual-axis kernel: rowwise and columnwise from one read of each strip.
// One of the quantizer's kernel families (quantize_simd.cc compiles them for every target):
// included once per Highway target, hence the toggling guard of Highway's own -inl.h files.
#if defined(MXTRAIN_QUANTIZE_DUAL_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef MXTRAIN_QUANTIZE_DUAL_INL_H_
#undef MXTRAIN_QUANTIZE_DUAL_INL_H_
#else
#define MXTRAIN_QUANTIZE_DUAL_INL_H_
#endif

#include <hwy/highway.h>

#include <type_traits>

#include "quantize/colwise-inl.h"
#include "quantize/encode-inl.h"
#include "quantize/encode16-inl.h"
#include "quantize/prefetch-inl.h"

HWY_BEFORE_NAMESPACE();
namespace mxtrain::internal {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// Whether the dual kernel's row pass writes an fp32 strip's 16-bit patterns (round-to-odd,
// Load16) to the workspace (StripWorkspace's copy) and takes both amax from them: pass 2
// then reads the copy, half the bytes, instead of narrowing the strip again
// (docs/decisions.md "fp32 dual from a 16-bit copy"). The exact path still reads the
// source.
template <bool kBf16>
constexpr bool kDualCopy = !kBf16 && k16;
template <bool kBf16>
using DualAmax = ColumnAmax<kBf16, kDualCopy<kBf16>>;
template <bool kBf16>
using DualWorkspace = StripWorkspace<kBf16, kDualCopy<kBf16>>;

// Whether DualBlockAmax returns 16-bit maxima (the 16-bit path) rather than fp32 bits;
// DualAmaxBits turns either into fp32 bits per lane.
template <bool kBf16>
constexpr bool kDualRaw16 = std::is_same_v<DualAmax<kBf16>, uint16_t>;

template <bool kBf16>
HWY_INLINE VI DualAmaxBits(VI amax) {
#if HWY_TARGET != HWY_SCALAR
  if constexpr (kDualRaw16<kBf16>) return PairMaxBits(hn::BitCast(D16(), amax));
#endif
  return amax;
}

// One full row block of the dual kernel at `index`: its elements' magnitudes folded into
// the column amax `col_amax`, and the block's own amax returned per lane (kDualRaw16: as
// 16-bit maxima, else as fp32 bits). Where kDualCopy the block's 16-bit patterns also go
// to `copy`.
template <bool kBf16>
HWY_INLINE VI DualBlockAmax(const QuantSource& src, int64_t index, DualAmax<kBf16>* col_amax,
                            uint16_t* copy) {
  if constexpr (std::is_same_v<DualAmax<kBf16>, uint16_t>) {
#if HWY_TARGET != HWY_SCALAR
    const D16 d;
    const size_t n = hn::Lanes(d);
    V16 row_amax = hn::Zero(d);
    for (size_t i = 0; i < kBlockVecs16; ++i) {
      const V16 h = Load16<kBf16>(src.x, index + static_cast<int64_t>(i * n));
      if constexpr (kDualCopy<kBf16>) hn::StoreU(h, d, copy + i * n);
      const V16 a = Abs16(h);
      row_amax = hn::Max(row_amax, a);
      uint16_t* ca = col_amax + i * n;
      hn::StoreU(hn::Max(hn::LoadU(d, ca), a), d, ca);
    }
    return hn::BitCast(DI(), row_amax);
#endif
  } else {
    (void)copy;
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

// The scale bytes (one per 32-bit lane) of kLanes full blocks of the dual kernel, block j
// at index + j * kBlock folding into the column amax col_amax[j] (and, where kDualCopy, its
// 16-bit patterns to copy + j * kBlock), from one transposing reduction of their amax.
template <bool kBf16>
HWY_INLINE VI DualBatchScales(const QuantSource& src, int64_t index,
                              DualAmax<kBf16>* const* col_amax, uint16_t* copy) {
  constexpr size_t kLanes = hn::MaxLanes(DI());
  VI block_amax[kLanes];
  for (size_t j = 0; j < kLanes; ++j) {
    const int64_t at = index + static_cast<int64_t>(j) * kBlock;
    PrefetchAhead<kBf16>(src.x, at);
    block_amax[j] =
        DualBlockAmax<kBf16>(src, at, col_amax[j], kDualCopy<kBf16> ? copy + j * kBlock : nullptr);
  }
  VI amax = DualAmaxBits<kBf16>(TransposeMax<kLanes, kDualRaw16<kBf16>>(block_amax));
  if constexpr (kDualCopy<kBf16>) {
    // Narrowed amax outside the affine range may need the fp32 amax (ScaleAmax).
    if (HWY_UNLIKELY(AnyOutsideAffine(src.scale_table, amax))) {
      amax = ScaleAmaxV<kBf16, true>(*src.scale_table, amax, src.x, index, kBlock, kBlock, 1);
    }
  }
  return ScalesV(src.scale_table, amax);
}

// DualBatchScales, then the blocks' rowwise codes to out (consecutive, as the blocks are)
// and scale bytes to scales.
template <bool kBf16, ElementFormat kFormat, bool kSaturate>
HWY_INLINE void DualBatch(const QuantSource& src, int64_t index, DualAmax<kBf16>* const* col_amax,
                          uint16_t* copy, uint8_t* out, uint8_t* scales) {
  const VI b = DualBatchScales<kBf16>(src, index, col_amax, copy);
#if HWY_TARGET != HWY_SCALAR
  EncodeBatch16<kBf16, kFormat, kSaturate, kDualCopy<kBf16>>(src, index, b, out, scales, copy);
#else
  constexpr size_t kLanes = hn::MaxLanes(DI());
  hn::StoreU(hn::TruncateTo(hn::Rebind<uint8_t, DI>(), hn::BitCast(DU(), b)),
             hn::Rebind<uint8_t, DI>(), scales);
  for (size_t j = 0; j < kLanes; ++j) {
    const int64_t at = index + static_cast<int64_t>(j) * kBlock;
    VF vecs[kBlockVecs];
    for (size_t i = 0; i < kBlockVecs; ++i) {
      vecs[i] = LoadF<kBf16>(src.x, at + static_cast<int64_t>(i * hn::Lanes(DF())));
    }
    EncodeBlock<kFormat>(vecs, scales[j], out + j * kBlock);
  }
#endif
}

// The scale byte of one full block of the dual kernel at `index` (DualBatchScales' lone
// form: a row's blocks past its last whole batch).
template <bool kBf16, ElementFormat kFormat>
HWY_INLINE uint8_t DualBlockScale(const QuantSource& src, int64_t index, DualAmax<kBf16>* col_amax,
                                  uint16_t* copy) {
  PrefetchAhead<kBf16>(src.x, index);
  const VI row_amax = DualAmaxBits<kBf16>(DualBlockAmax<kBf16>(src, index, col_amax, copy));
  const uint32_t amax = ScaleAmax<kBf16, kDualCopy<kBf16>>(
      *src.scale_table, static_cast<uint32_t>(hn::GetLane(hn::MaxOfLanes(DI(), row_amax))), src.x,
      index, kBlock, 1);
  return BlockScale(src.rule, kFormat, amax);
}

// DualBlockScale, then the block's rowwise codes.
template <bool kBf16, ElementFormat kFormat>
HWY_INLINE void DualBlock(const QuantSource& src, int64_t index, DualAmax<kBf16>* col_amax,
                          uint16_t* copy, uint8_t* out, uint8_t* scale) {
  *scale = DualBlockScale<kBf16, kFormat>(src, index, col_amax, copy);
  VF vecs[kBlockVecs];
  for (size_t i = 0; i < kBlockVecs; ++i) {
    vecs[i] = LoadF<kBf16>(src.x, index + static_cast<int64_t>(i * hn::Lanes(DF())));
  }
  EncodeBlock<kFormat>(vecs, *scale, out);
}

// Three quarters of the next strip's lines during the row pass of a column piece (of 1/4,
// 1/2, 3/4 and all, 3/4 was best for whole-row strips too, before they took their own
// lines, kDualRunAhead): lines per batch.
template <bool kBf16>
constexpr int64_t kDualAheadLines =
    static_cast<int64_t>(hn::MaxLanes(DI())) * kBlock*(kBf16 ? 2 : 4) * 3 / 4 / 64;

// How far ahead of its reads the row pass of a strip of whole rows (one contiguous run)
// prefetches the strip's own lines; pass 2 of the strip before prefetched the first this
// many bytes (NextStripPrefetch, truncated). Taking the whole next strip during this one,
// as column pieces do, put a 4096-wide fp32 strip's 512 KiB, the next one's and the 256
// KiB copy in a 1 MiB L2 (Zen 4) at once: f32 dual 4096 x 4096, 2 threads, median 3.87 ->
// 3.12 ms (docs/decisions.md "Dual's row pass prefetches its own strip").
constexpr int64_t kDualRunAhead = 32 << 10;

// The row pass of a strip of whole rows that are whole blocks: one long run of blocks
// batched across its rows (each block folds into its own column's amax). Rows narrower than
// a batch (128 and 256 wide in the default model) went block by block, with a horizontal
// reduction each, and took twice as long as a rowwise quantization. kFused: the blocks'
// scale bytes, and their 16-bit encoder offsets to sub2 and slow2 (StoreOffsets2, block k
// of the strip at k), for the fused pass 2 to encode, with the strip's own lines
// prefetched kDualRunAhead ahead; otherwise the rowwise codes here, with three quarters of
// the next strip's lines.
template <bool kBf16, ElementFormat kFormat, bool kSaturate, bool kFused>
void DualRows(const QuantSource& src, const ColStrip& strip, RowwiseOut row_out,
              const DualWorkspace<kBf16>& ws, NextStripPrefetch& ahead, uint32_t* sub2 = nullptr,
              uint32_t* slow2 = nullptr) {
  constexpr size_t kLanes = hn::MaxLanes(DI());
  constexpr int64_t kBatchCols = static_cast<int64_t>(kLanes) * kBlock;
  const int64_t begin = strip.row0 * src.cols;
  const int64_t end = begin + strip.num_rows * src.cols;
  DualAmax<kBf16>* col_amax[kLanes];
  constexpr int64_t kSize = kBf16 ? 2 : 4;
  const char* x = static_cast<const char*>(src.x);
  RunPrefetch own(x + std::min(begin * kSize + kDualRunAhead, end * kSize), x + end * kSize);
  int64_t at = begin;
  int64_t col = 0;  // at's column
  // The column amax of the block at `at`, then `col` moved on to the next block's column.
  const auto next_amax = [&] {
    DualAmax<kBf16>* amax = ws.amax + col;
    col += kBlock;
    if (col == src.cols) col = 0;
    return amax;
  };
  for (; at + kBatchCols <= end; at += kBatchCols) {
    if constexpr (kFused) {
      own.Issue<kBatchCols * kSize / 64>();
    } else {
      ahead.Issue<kDualAheadLines<kBf16>>();
    }
    for (size_t j = 0; j < kLanes; ++j) col_amax[j] = next_amax();
    uint16_t* copy = ws.CopyAt(0, at - begin);
    if constexpr (kFused) {
#if HWY_TARGET != HWY_SCALAR
      const VI b = DualBatchScales<kBf16>(src, at, col_amax, copy);
      StoreLowBytes(hn::BitCast(DU(), b), row_out.scales + at / kBlock);
      const int64_t k = (at - begin) / kBlock;
      StoreOffsets2<kFormat>(b, sub2 + k, slow2 + k);
#endif
    } else {
      DualBatch<kBf16, kFormat, kSaturate>(src, at, col_amax, copy, row_out.data + at,
                                           row_out.scales + at / kBlock);
    }
  }
  for (; at < end; at += kBlock) {
    uint16_t* copy = ws.CopyAt(0, at - begin);
    if constexpr (kFused) {
#if HWY_TARGET != HWY_SCALAR
      const uint8_t b = DualBlockScale<kBf16, kFormat>(src, at, next_amax(), copy);
      row_out.scales[at / kBlock] = b;
      const int64_t k = (at - begin) / kBlock;
      StoreOffsets2<kFormat>(b, sub2 + k, slow2 + k);
#endif
    } else {
      DualBlock<kBf16, kFormat>(src, at, next_amax(), copy, row_out.data + at,
                                row_out.scales + at / kBlock);
    }
  }
}

// The row pass of any other strip (a column piece, or rows with a partial last block), row
// by row.
template <bool kBf16, ElementFormat kFormat, bool kSaturate>
void DualRowsOfPiece(const QuantSource& src, const ColStrip& strip, RowwiseOut row_out,
                     const DualWorkspace<kBf16>& ws, NextStripPrefetch& ahead) {
  constexpr size_t kLanes = hn::MaxLanes(DI());
  constexpr int64_t kBatchCols = static_cast<int64_t>(kLanes) * kBlock;
  const int64_t blocks_per_row = (src.cols + kBlock - 1) / kBlock;
  DualAmax<kBf16>* col_amax[kLanes];
  for (int64_t r = strip.row0; r < strip.row0 + strip.num_rows; ++r) {
    const int64_t base = r * src.cols;
    const int64_t i = r - strip.row0;
    uint8_t* row_scales = row_out.scales + r * blocks_per_row;
    int64_t c = strip.col0;
    for (; c + kBatchCols <= strip.col1; c += kBatchCols) {
      ahead.Issue<kDualAheadLines<kBf16>>();
      for (size_t j = 0; j < kLanes; ++j) {
        col_amax[j] = ws.amax + (c - strip.col0) + static_cast<int64_t>(j) * kBlock;
      }
      DualBatch<kBf16, kFormat, kSaturate>(src, base + c, col_amax, ws.CopyAt(i, c - strip.col0),
                                           row_out.data + base + c, row_scales + c / kBlock);
    }
    for (; c + kBlock <= strip.col1; c += kBlock) {
      DualBlock<kBf16, kFormat>(src, base + c, ws.amax + (c - strip.col0),
                                ws.CopyAt(i, c - strip.col0), row_out.data + base + c,
                                row_scales + c / kBlock);
    }
    if (c < strip.col1) {  // the row's partial last block (col1 == cols here)
      AccumulateStripAmax<kBf16, kDualCopy<kBf16>>(
          src, r, c, strip.col1, ws.amax + (c - strip.col0), ws.CopyAt(i, c - strip.col0));
      PartialBlock<kBf16, kFormat>(src, base + c, strip.col1 - c, row_out.data + base + c,
                                   row_scales + c / kBlock);
    }
  }
}

// Both axes from one read of the strip. A strip of whole rows of whole blocks: the row pass
// takes every block's amax and scale while the column amax accumulates (kLanes blocks at a
// time, sharing one transposing reduction of their amax); pass 2 then re-reads the strip
// from cache (an fp32 strip: its 16-bit copy, kDualCopy) and encodes each vector twice, with
// its column's offsets and its block's, from one load (the fused pass 2). Other strips
// quantize rowwise in the row pass and columnwise in pass 2.
template <bool kBf16, ElementFormat kFormat, bool kSaturate>
void DualT(const QuantSource& src, const ColStrip& strip, RowwiseOut row_out, ColwiseOut col_out,
           void* workspace) {
  const int64_t width = strip.col1 - strip.col0;
  const DualWorkspace<kBf16> ws(workspace, width);
  NextStripPrefetch ahead(src, strip);
  if (strip.col0 == 0 && strip.col1 == src.cols && src.cols % kBlock == 0) {
#if HWY_TARGET != HWY_SCALAR
    // The blocks' offsets after the workspace's columnwise part, 8 bytes per column
    // (kernels.h); a strip has at most width blocks.
    static_assert(WorkspaceBytesPerColumn(/*dual=*/true, kBf16) ==
                  DualWorkspace<kBf16>::kBytesPerColumn + 8);
    uint32_t* sub2 = reinterpret_cast<uint32_t*>(static_cast<char*>(workspace) +
                                                 DualWorkspace<kBf16>::kBytesPerColumn * width);
    uint32_t* slow2 = sub2 + width;
    // The row pass prefetches the strip's own lines (kDualRunAhead); pass 2 the next
    // strip's first.
    ahead.Truncate(kDualRunAhead / 64);
    DualRows<kBf16, kFormat, kSaturate, true>(src, strip, row_out, ws, ahead, sub2, slow2);
    const int64_t begin = strip.row0 * src.cols;
    const RowCodes rows{sub2, slow2, row_out.scales + begin / kBlock, row_out.data};
    FinishColumnStrip<kBf16, kFormat, kSaturate, kDualCopy<kBf16>, true>(src, strip, col_out, ws,
                                                                         ahead, &rows);
#else
    DualRows<kBf16, kFormat, kSaturate, false>(src, strip, row_out, ws, ahead);
    FinishColumnStrip<kBf16, kFormat, kSaturate, kDualCopy<kBf16>>(src, strip, col_out, ws, ahead);
#endif
    return;
  }
  DualRowsOfPiece<kBf16, kFormat, kSaturate>(src, strip, row_out, ws, ahead);
  FinishColumnStrip<kBf16, kFormat, kSaturate, kDualCopy<kBf16>>(src, strip, col_out, ws, ahead);
}

}  // namespace HWY_NAMESPACE
}  // namespace mxtrain::internal
HWY_AFTER_NAMESPACE();

#endif  // MXTRAIN_QUANTIZE_DUAL_INL_H_
