// OrderedMatMulF32 (elementwise.h): small fp32 products whose every sum runs in K order,
// vectorized along the columns of C, which leaves each element's sum as the scalar loop
// has it (one lane a column: the same products, added in the same order). A row of C takes
// up to kBlock vectors at a time, their accumulators in registers over the whole K range;
// a partial last vector uses masked loads and stores where the target has them (AVX2 and
// AVX-512, which do not touch the masked-off lanes' memory), and a scalar loop elsewhere.
// Written for attention's products (a sequence of 64 positions, heads of 32 values),
// where the compiler's own vectors of the scalar loops reloaded and stored C once a K step.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "ordered_matmul_simd.cc"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

#include <algorithm>
#include <cstdint>

#include "fp_env.h"
#include "mxtrain/elementwise.h"
#include "mxtrain/error.h"
#include "simd_internal.h"

HWY_BEFORE_NAMESPACE();
namespace mxtrain::internal {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// Masked loads and stores that never touch masked-off memory (vmaskmov, AVX-512 masks).
#if HWY_TARGET <= HWY_AVX2
constexpr bool kSafeMasks = true;
#else
constexpr bool kSafeMasks = false;
#endif

// C(r, n0 ..) for kV vectors of columns over K [k0, k1): `tail` lanes of the last vector
// (kTail) or all of them.
template <int kV, bool kTail, class D>
HWY_INLINE void Columns(D d, const float* HWY_RESTRICT a, int64_t a_depth,
                        const float* HWY_RESTRICT b, int64_t ldb, int64_t k0, int64_t k1,
                        float* HWY_RESTRICT c, size_t tail) {
  using V = hn::Vec<D>;
  const size_t n = hn::Lanes(d);
  const auto last = hn::FirstN(d, kTail ? tail : n);
  V acc[kV];
  for (int v = 0; v < kV; ++v) acc[v] = hn::Zero(d);
  for (int64_t k = k0; k < k1; ++k) {
    const V av = hn::Set(d, a[k * a_depth]);
    const float* bk = b + k * ldb;
    for (int v = 0; v < kV; ++v) {
      const V bv =
          (kTail && v == kV - 1) ? hn::MaskedLoad(last, d, bk + v * n) : hn::LoadU(d, bk + v * n);
      acc[v] = hn::Add(acc[v], hn::Mul(av, bv));
    }
  }
  for (int v = 0; v < kV; ++v) {
    if (kTail && v == kV - 1) {
      hn::BlendedStore(acc[v], last, d, c + v * n);
    } else {
      hn::StoreU(acc[v], d, c + v * n);
    }
  }
}

template <bool kTail, class D>
HWY_INLINE void ColumnsOf(int vectors, D d, const float* a, int64_t a_depth, const float* b,
                          int64_t ldb, int64_t k0, int64_t k1, float* c, size_t tail) {
  switch (vectors) {
    case 1:
      return Columns<1, kTail>(d, a, a_depth, b, ldb, k0, k1, c, tail);
    case 2:
      return Columns<2, kTail>(d, a, a_depth, b, ldb, k0, k1, c, tail);
    case 3:
      return Columns<3, kTail>(d, a, a_depth, b, ldb, k0, k1, c, tail);
    default:
      return Columns<4, kTail>(d, a, a_depth, b, ldb, k0, k1, c, tail);
  }
}

void OrderedMatMulImpl(const OrderedMatMul& p) {
  const hn::ScalableTag<float> d;
  const int64_t n = static_cast<int64_t>(hn::Lanes(d));
  constexpr int64_t kBlock = 4;  // vectors of C a pass over K
  for (int64_t r = 0; r < p.rows; ++r) {
    const int64_t cols =
        p.range == OrderedRange::kColsToDiagonal ? std::min(p.cols, r + 1) : p.cols;
    const int64_t k0 =
        p.range == OrderedRange::kDepthFromDiagonal ? std::min(r, p.depth) : int64_t{0};
    const int64_t k1 =
        p.range == OrderedRange::kDepthToDiagonal ? std::min(p.depth, r + 1) : p.depth;
    const float* a = p.a + r * p.a_row;
    float* c = p.c + r * p.ldc;
    int64_t n0 = 0;
    for (; n0 + kBlock * n <= cols; n0 += kBlock * n) {
      Columns<kBlock, false>(d, a, p.a_depth, p.b + n0, p.ldb, k0, k1, c + n0, 0);
    }
    const int64_t whole = (cols - n0) / n, tail = (cols - n0) % n;
    if (kSafeMasks && tail > 0) {
      ColumnsOf<true>(static_cast<int>(whole + 1), d, a, p.a_depth, p.b + n0, p.ldb, k0, k1, c + n0,
                      static_cast<size_t>(tail));
      continue;
    }
    if (whole > 0) {
      ColumnsOf<false>(static_cast<int>(whole), d, a, p.a_depth, p.b + n0, p.ldb, k0, k1, c + n0,
                       0);
      n0 += whole * n;
    }
    for (; n0 < cols; ++n0) {  // the scalar loop itself
      float s = 0;
      for (int64_t k = k0; k < k1; ++k) s += a[k * p.a_depth] * p.b[k * p.ldb + n0];
      c[n0] = s;
    }
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace mxtrain::internal
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace mxtrain {
namespace internal {
HWY_EXPORT(OrderedMatMulImpl);
}  // namespace internal

void OrderedMatMulF32(const OrderedMatMul& p) {
  MXTRAIN_CHECK(p.rows >= 0 && p.cols >= 0 && p.depth >= 0, "OrderedMatMulF32: sizes ", p.rows,
                " x ", p.cols, " x ", p.depth, " must not be negative");
  MXTRAIN_CHECK(p.ldb >= p.cols && p.ldc >= p.cols, "OrderedMatMulF32: ldb ", p.ldb, " and ldc ",
                p.ldc, " must be at least cols ", p.cols);
  if (p.rows == 0 || p.cols == 0) return;
  MXTRAIN_CHECK(p.c != nullptr && (p.depth == 0 || (p.a != nullptr && p.b != nullptr)),
                "OrderedMatMulF32: null operand");
  const internal::ScopedFpEnv fp_env;
  internal::EnsureSimdTargetChosen();
  HWY_DYNAMIC_DISPATCH(internal::OrderedMatMulImpl)(p);
}

}  // namespace mxtrain
#endif
