// The row-blocked kernel (1x32 blocks along K): batches of blocks whose amax share one
// transposing reduction, full blocks, and the partial last block of a row.
// One of the quantizer's kernel families (quantize_simd.cc compiles them for every target):
// included once per Highway target, hence the toggling guard of Highway's own -inl.h files.
#if defined(MXTRAIN_QUANTIZE_ROWWISE_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef MXTRAIN_QUANTIZE_ROWWISE_INL_H_
#undef MXTRAIN_QUANTIZE_ROWWISE_INL_H_
#else
#define MXTRAIN_QUANTIZE_ROWWISE_INL_H_
#endif

#include <hwy/highway.h>

#include <algorithm>

#include "quantize/encode-inl.h"
#include "quantize/encode16-inl.h"
#include "quantize/prefetch-inl.h"

HWY_BEFORE_NAMESPACE();
namespace mxtrain::internal {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

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
    for (size_t i = 0; i < kBlockVecs; ++i)
      vecs[i] = LoadF<kBf16>(src.x, at + static_cast<int64_t>(i * n));
    EncodeBlock<kFormat>(vecs, scales[j], out + j * kBlock);
  }
}

template <bool kBf16, ElementFormat kFormat, bool kSaturate>
void RowwiseT(const QuantSource& src, int64_t row0, int64_t row1, RowwiseOut out) {
  // Whole blocks only: the rows' blocks and scales lie end to end, so the rows quantize as
  // one long row and narrow ones (128 and 256 wide in the default model) fill whole batches.
  const bool joined = src.cols % kBlock == 0;
  const int64_t rows = joined ? std::min<int64_t>(row1 - row0, 1) : row1 - row0;
  const int64_t cols = joined ? src.cols * (row1 - row0) : src.cols;
  const int64_t blocks = (cols + kBlock - 1) / kBlock;
  const int64_t full = cols / kBlock;
  for (int64_t i = 0; i < rows; ++i) {
    const int64_t base = row0 * src.cols + i * cols;
    uint8_t* data = out.data + base;
    uint8_t* scales = out.scales + row0 * ((src.cols + kBlock - 1) / kBlock) + i * blocks;
    constexpr int64_t kBatch = static_cast<int64_t>(hn::MaxLanes(DI()));
    int64_t b = 0;
    for (; b + kBatch <= full; b += kBatch) {
#if HWY_TARGET != HWY_SCALAR
      BlockBatch16<kBf16, kFormat, kSaturate>(src, base + b * kBlock, data + b * kBlock,
                                              scales + b);
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

}  // namespace HWY_NAMESPACE
}  // namespace mxtrain::internal
HWY_AFTER_NAMESPACE();

#endif  // MXTRAIN_QUANTIZE_ROWWISE_INL_H_
