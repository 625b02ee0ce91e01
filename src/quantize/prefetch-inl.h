// Software prefetch of the quantizer kernels: a fixed distance ahead within a row, and the
// next strip of the columnwise and dual kernels spread over both of their passes.
// One of the quantizer's kernel families (quantize_simd.cc compiles them for every target):
// included once per Highway target, hence the toggling guard of Highway's own -inl.h files.
#if defined(MXTRAIN_QUANTIZE_PREFETCH_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef MXTRAIN_QUANTIZE_PREFETCH_INL_H_
#undef MXTRAIN_QUANTIZE_PREFETCH_INL_H_
#else
#define MXTRAIN_QUANTIZE_PREFETCH_INL_H_
#endif

#include <hwy/cache_control.h>
#include <hwy/highway.h>

#include <algorithm>

#include "quantize/encode-inl.h"

HWY_BEFORE_NAMESPACE();
namespace mxtrain::internal {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// Bytes ahead of the current read that the kernels prefetch: the hardware prefetcher alone
// lets the per-block scale computation stall on DRAM (measured: bf16 rowwise 18 -> 7 ms at
// 4096x4096 on one core).
constexpr int64_t kPrefetchBytes = 2048;

// The 64-byte line at p into L2 (prefetcht1). hwy::Prefetch (Highway 1.0.3) has no cache
// level; it always fetches into L1 (prefetcht0).
HWY_INLINE void PrefetchLineL2(const char* p) { __builtin_prefetch(p, /*rw=*/0, /*locality=*/2); }

// The lines of the 32 elements kPrefetchBytes past element `index` (one line of bf16, two of
// fp32), into L2. Fetched into L1 (prefetcht0), one line per 32 fp32, the rowwise kernel
// waited on DRAM far more often (docs/decisions.md "Prefetch into L2").
template <bool kBf16>
HWY_INLINE void PrefetchAhead(const void* base, int64_t index) {
  const char* p = static_cast<const char*>(base) + index * (kBf16 ? 2 : 4) + kPrefetchBytes;
  PrefetchLineL2(p);
  if constexpr (!kBf16) PrefetchLineL2(p + 64);
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
// lines in colwise pass 1 was worse (bf16 1.29-1.35 ms). A dual strip of whole rows has
// since taken its own lines in its row pass (RunPrefetch) and leaves pass 2 only the first
// of the next strip's (Truncate; dual-inl.h, kDualRunAhead).
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
  // From here on at most `lines` more lines in all: the first of the next strip only.
  void Truncate(int64_t lines) { left_ = std::min(left_, lines); }
  // Issues the next k lines (fewer at the end). The common case, k lines within the
  // current run, is one compare and a prefetch per line (the kernels call this in loops
  // whose other uops are few when the strip is in cache).
  HWY_INLINE void Issue(int64_t k) {
    if (HWY_LIKELY(k <= left_ && next_ + 64 * k <= row_end_)) {
#pragma GCC unroll 16
      for (int64_t i = 0; i < k; ++i) PrefetchLineL2(next_ + 64 * i);
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
      PrefetchLineL2(next_);
      next_ += 64;
    }
  }

  const char* next_ = nullptr;
  const char* row_end_ = nullptr;
  int64_t stride_ = 0, width_ = 0, rows_ = 0, lines_ = 0, left_ = 0;
};

// A contiguous run of bytes prefetched into L2 a few lines at a time, as the reads that
// walk it move on: a fixed distance ahead of them where it starts that far past their
// first byte (the dual kernel's row pass over a strip of whole rows).
class RunPrefetch {
 public:
  RunPrefetch(const void* begin, const void* end)
      : next_(static_cast<const char*>(begin)), end_(static_cast<const char*>(end)) {}
  // Issues the next kLines lines (fewer at the end of the run).
  template <int64_t kLines>
  HWY_INLINE void Issue() {
    if (HWY_LIKELY(next_ + 64 * kLines <= end_)) {
#pragma GCC unroll 32
      for (int64_t i = 0; i < kLines; ++i) PrefetchLineL2(next_ + 64 * i);
      next_ += 64 * kLines;
      return;
    }
    for (; next_ < end_; next_ += 64) PrefetchLineL2(next_);
  }

 private:
  const char* next_;
  const char* end_;
};

}  // namespace HWY_NAMESPACE
}  // namespace mxtrain::internal
HWY_AFTER_NAMESPACE();

#endif  // MXTRAIN_QUANTIZE_PREFETCH_INL_H_
