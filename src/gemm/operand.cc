#include "gemm/operand.h"

#include <omp.h>

#include <algorithm>

#include "fp_env.h"
#include "mxtrain/error.h"
#include "omp_threads.h"

namespace mxtrain::internal {
namespace {

// Non-zero element magnitudes lie in [2^kMinExp, 2^kMaxExp): E4M3 [2^-9, 448],
// E5M2 [2^-16, 57344].
int MinExp(ElementFormat f) { return f == ElementFormat::kE4M3 ? -9 : -16; }
int MaxExp(ElementFormat f) { return f == ElementFormat::kE4M3 ? 9 : 16; }

}  // namespace

GemmOperand GemmOperand::Of(const MxTensor& t, const char* name) {
  MXTRAIN_CHECK(t.defined(), "gemm: operand ", name, " is undefined");
  MXTRAIN_CHECK(t.shape().rank() == 2, "gemm: operand ", name, " must be 2-D, got shape ",
                t.shape().ToString());
  MXTRAIN_CHECK(!t.groups().has_value(), "gemm: operand ", name,
                " is token-grouped; use MxGroupedWgrad");
  GemmOperand op;
  op.data = t.data().const_data<uint8_t>();
  op.scales = t.scales().const_data<uint8_t>();
  op.format = t.format();
  op.contract_rows = t.axis() == BlockAxis::kColumnwise;
  op.free = op.contract_rows ? t.shape()[1] : t.shape()[0];
  op.s = op.contract_rows ? t.shape()[0] : t.shape()[1];
  op.blocks = CeilDiv(op.s, kMxBlock);
  return op;
}

RowScaleStats RowScaleStats::Of(const GemmOperand& op, int threads) {
  RowScaleStats st;
  st.min_scale.assign(static_cast<size_t>(op.free), 255);
  st.max_scale.assign(static_cast<size_t>(op.free), 0);
  st.has_nan.assign(static_cast<size_t>(op.free), 0);
  // Only blocks with a non-zero element constrain the range; NaN blocks (scale 0xFF) only
  // set has_nan. A zero block gets b = 0 (NUMERICS.md §4), so one pass takes the range over
  // the blocks with b > 0 (branch-free, so it vectorizes), and only a row whose range does
  // not already reach 0 has its b = 0 blocks scanned for a non-zero code. A block with b > 0
  // counts as non-zero even if its codes are all zero, which can only widen the range (more
  // tiles to the exact path, never a wrong one).
  const auto block_nonzero = [&](int64_t f, int64_t kb) {
    for (int64_t k = kb * kMxBlock; k < std::min(op.s, (kb + 1) * kMxBlock); ++k) {
      if ((op.Code(f, k) & 0x7F) != 0) return true;
    }
    return false;
  };
  std::vector<uint8_t> has_zero(static_cast<size_t>(op.free), 0);
  // Rows are independent: threads take contiguous row ranges, and within one each walks the
  // scales in storage order (down a row for rowwise storage, along scale rows for
  // columnwise). A small operand's scales (a small model's weights: a few thousand bytes)
  // take one thread: less than a thread team's start and join.
  constexpr int64_t kParallelMinScales = int64_t{1} << 14;
#pragma omp parallel num_threads(threads) if (op.free * op.blocks >= kParallelMinScales)
  {
    const internal::ScopedFpEnv fp_env;
    const ThreadShare share(op.free);
    const int64_t f0 = share.begin, f1 = share.end;
    if (!op.contract_rows) {
      for (int64_t f = f0; f < f1; ++f) {
        const uint8_t* sc = op.scales + f * op.blocks;
        uint8_t mn = 255, mx = 0, nan = 0, zero = 0;
#pragma omp simd reduction(min : mn) reduction(max : mx) reduction(| : nan, zero)
        for (int64_t kb = 0; kb < op.blocks; ++kb) {
          const uint8_t b = sc[kb];
          nan |= static_cast<uint8_t>(b == kE8M0NaN);
          zero |= static_cast<uint8_t>(b == 0);
          mn = std::min<uint8_t>(mn, b == 0 || b == kE8M0NaN ? 255 : b);
          mx = std::max<uint8_t>(mx, b == kE8M0NaN ? 0 : b);
        }
        st.min_scale[f] = mn;
        st.max_scale[f] = mx;
        st.has_nan[f] = nan;
        has_zero[f] = zero;
      }
    } else {
      // Written so that GCC vectorizes it (it kept the conditional form scalar, 3.9% of an
      // MXFP8 training step under the AVX2 caps): restrict, because byte pointers alias
      // anything; masks for the excluded scales (a NaN or zero scale is 255 for the
      // minimum, a NaN scale 0 for the maximum); min / max on values, not std::min's
      // references.
      uint8_t* __restrict mn = st.min_scale.data();
      uint8_t* __restrict mx = st.max_scale.data();
      uint8_t* __restrict nan = st.has_nan.data();
      uint8_t* __restrict zero = has_zero.data();
      for (int64_t kb = 0; kb < op.blocks; ++kb) {
        const uint8_t* __restrict sc = op.scales + kb * op.free;
#pragma omp simd
        for (int64_t f = f0; f < f1; ++f) {
          const uint8_t b = sc[f];
          const auto is_nan = static_cast<uint8_t>(b == kE8M0NaN);
          const auto is_zero = static_cast<uint8_t>(b == 0);
          nan[f] |= is_nan;
          zero[f] |= is_zero;
          const auto lo = static_cast<uint8_t>(b | static_cast<uint8_t>(0 - (is_nan | is_zero)));
          const auto hi = static_cast<uint8_t>(b & static_cast<uint8_t>(is_nan - 1));
          const uint8_t lo0 = mn[f], hi0 = mx[f];
          mn[f] = lo < lo0 ? lo : lo0;
          mx[f] = hi > hi0 ? hi : hi0;
        }
      }
    }
    for (int64_t f = f0; f < f1; ++f) {
      if (!has_zero[f] || st.min_scale[f] == 0) continue;
      for (int64_t kb = 0; kb < op.blocks; ++kb) {
        if (op.Scale(f, kb) == 0 && block_nonzero(f, kb)) {
          st.min_scale[f] = 0;
          break;
        }
      }
    }
  }
  return st;
}

bool ProductsAreExact(ElementFormat fa, uint8_t a_min, uint8_t a_max, ElementFormat fb,
                      uint8_t b_min, uint8_t b_max) {
  if (a_min > a_max || b_min > b_max) return true;  // a row of zeros
  // Decoded values: 2^(MinExp + b - 127) >= 2^-126 and 2^(MaxExp + b - 127) <= 2^128.
  const auto value_ok = [](ElementFormat f, int lo, int hi) {
    return MinExp(f) + lo - 127 >= -126 && MaxExp(f) + hi - 127 <= 128;
  };
  if (!value_ok(fa, a_min, a_max) || !value_ok(fb, b_min, b_max)) return false;
  // Products: no fp32 subnormal (nor overflow) either.
  return MinExp(fa) + MinExp(fb) + a_min + b_min - 254 >= -126 &&
         MaxExp(fa) + MaxExp(fb) + a_max + b_max - 254 <= 128;
}

namespace {

// The smallest and largest scale byte of an operand (lo > hi if it has none).
void ScaleByteRange(const GemmOperand& op, uint8_t& lo, uint8_t& hi) {
  // Both layouts hold free x blocks scale bytes in one run.
  const uint8_t* __restrict sc = op.scales;
  const int64_t n = op.free * op.blocks;
  uint8_t mn = 255, mx = 0;
#pragma omp simd reduction(min : mn) reduction(max : mx)
  for (int64_t i = 0; i < n; ++i) {
    mn = sc[i] < mn ? sc[i] : mn;
    mx = sc[i] > mx ? sc[i] : mx;
  }
  lo = mn;
  hi = mx;
}

}  // namespace

bool AllTilesSafe(const GemmOperand& a, const GemmOperand& b) {
  // A zero block's byte (0) or a NaN block's (0xFF) fails ProductsAreExact's value range on
  // its own, leaving those operands to RowScaleStats, which treats such blocks apart.
  uint8_t a_lo, a_hi, b_lo, b_hi;
  ScaleByteRange(a, a_lo, a_hi);
  ScaleByteRange(b, b_lo, b_hi);
  return ProductsAreExact(a.format, a_lo, a_hi, b.format, b_lo, b_hi);
}

}  // namespace mxtrain::internal
