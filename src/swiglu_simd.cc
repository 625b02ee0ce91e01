// SwiGluF32 and SwiGluBackwardF32 (elementwise.h): the gate's exponentials a chunk of a row
// at a time (exp-inl.h, the bits of std::exp) into a buffer in L1, then the rest of the
// formula a whole vector at a time. Every operation is an IEEE one in the order the scalar
// loop writes it (strict FP: nothing fused), so each lane gives that loop's bits whatever
// the vector width. The model's loops had called ExpF32 once a row and left the division
// to the compiler's vectors of the baseline ISA (SSE2): SwiGLU was ~10% of a default `mxtrain
// train` MXFP8 step on Zen 4.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "swiglu_simd.cc"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

#include <algorithm>
#include <cstdint>
#include <span>

#include "exp-inl.h"
#include "fp_env.h"
#include "mxtrain/elementwise.h"
#include "mxtrain/error.h"
#include "simd_internal.h"

HWY_BEFORE_NAMESPACE();
namespace mxtrain::internal {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// Columns of a row per exponential chunk (a 1 KiB buffer). The exponential stores half
// vectors (one float per double lane) that the body reads back as whole ones, which cannot
// be forwarded from the store buffer: with 64-column chunks the body's first loads waited
// on the last stores (2048 x 256, 2 threads, Zen 4: forward 213-217 -> 193-196 us with
// 256, backward 231-238 -> 216-217).
constexpr int64_t kSwiGluChunk = 256;

// Rows of SwiGLU (dh == nullptr: forward, out [rows, f]) or of its gradient (out [rows,
// 2f]); gu [rows, 2f], gate columns first.
template <bool kBackward>
void SwiGluRows(const float* HWY_RESTRICT gu, const float* HWY_RESTRICT dh, int64_t rows, int64_t f,
                float* HWY_RESTRICT out) {
  const hn::ScalableTag<float> d;
  const int64_t n = static_cast<int64_t>(hn::Lanes(d));
  const auto one = hn::Set(d, 1.0f);
  HWY_ALIGN float e[kSwiGluChunk];
  for (int64_t i = 0; i < rows; ++i) {
    const float* a = gu + i * 2 * f;
    const float* b = a + f;
    const float* g = kBackward ? dh + i * f : nullptr;
    float* o = out + i * (kBackward ? 2 * f : f);
    for (int64_t j0 = 0; j0 < f; j0 += kSwiGluChunk) {
      const int64_t len = std::min(kSwiGluChunk, f - j0);
      ExpRow</*kNegate=*/true>(a + j0, e, len);  // e = exp(-a)
      int64_t k = 0;
      for (; k + n <= len; k += n) {
        const int64_t j = j0 + k;
        const auto av = hn::LoadU(d, a + j), bv = hn::LoadU(d, b + j);
        const auto s = hn::Div(one, hn::Add(one, hn::Load(d, e + k)));
        if constexpr (kBackward) {
          const auto gv = hn::LoadU(d, g + j);
          const auto silu = hn::Mul(av, s);
          hn::StoreU(hn::Mul(hn::Mul(gv, bv), hn::Add(s, hn::Mul(silu, hn::Sub(one, s)))), d,
                     o + j);
          hn::StoreU(hn::Mul(gv, silu), d, o + f + j);
        } else {
          hn::StoreU(hn::Mul(hn::Mul(av, s), bv), d, o + j);
        }
      }
      for (; k < len; ++k) {  // the scalar loop itself
        const int64_t j = j0 + k;
        const float s = 1.0f / (1.0f + e[k]);
        if constexpr (kBackward) {
          const float silu = a[j] * s;
          o[j] = g[j] * b[j] * (s + silu * (1.0f - s));
          o[f + j] = g[j] * silu;
        } else {
          o[j] = a[j] * s * b[j];
        }
      }
    }
  }
}

void SwiGluImpl(const float* gu, int64_t rows, int64_t f, float* h) {
  SwiGluRows<false>(gu, nullptr, rows, f, h);
}
void SwiGluBackwardImpl(const float* dh, const float* gu, int64_t rows, int64_t f, float* dgu) {
  SwiGluRows<true>(gu, dh, rows, f, dgu);
}

}  // namespace HWY_NAMESPACE
}  // namespace mxtrain::internal
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace mxtrain {
namespace internal {
HWY_EXPORT(SwiGluImpl);
HWY_EXPORT(SwiGluBackwardImpl);

namespace {

// Whether [p, p + n) and [q, q + m) share no float.
bool Disjoint(const float* p, size_t n, const float* q, size_t m) {
  return p + n <= q || q + m <= p;
}

// The rows of a SwiGLU input of `size` floats and width 2f.
int64_t SwiGluRowsOf(size_t size, int64_t f, const char* op) {
  MXTRAIN_CHECK(f >= 1, op, ": width f must be >= 1, got ", f);
  MXTRAIN_CHECK(size % static_cast<size_t>(2 * f) == 0, op, ": input of ", size,
                " values is not rows of 2f = ", 2 * f);
  return static_cast<int64_t>(size) / (2 * f);
}

}  // namespace
}  // namespace internal

void SwiGluF32(std::span<const float> gu, int64_t f, std::span<float> h) {
  const int64_t rows = internal::SwiGluRowsOf(gu.size(), f, "SwiGluF32");
  MXTRAIN_CHECK(static_cast<int64_t>(h.size()) == rows * f, "SwiGluF32: output of ", h.size(),
                " values for ", rows, " rows of f = ", f);
  MXTRAIN_CHECK(internal::Disjoint(gu.data(), gu.size(), h.data(), h.size()),
                "SwiGluF32: input and output overlap");
  const internal::ScopedFpEnv fp_env;
  internal::EnsureSimdTargetChosen();
  HWY_DYNAMIC_DISPATCH(internal::SwiGluImpl)(gu.data(), rows, f, h.data());
}

void SwiGluBackwardF32(std::span<const float> dh, std::span<const float> gu, int64_t f,
                       std::span<float> dgu) {
  const int64_t rows = internal::SwiGluRowsOf(gu.size(), f, "SwiGluBackwardF32");
  MXTRAIN_CHECK(static_cast<int64_t>(dh.size()) == rows * f && dgu.size() == gu.size(),
                "SwiGluBackwardF32: ", dh.size(), " gradient and ", dgu.size(),
                " output values for ", rows, " rows of f = ", f);
  MXTRAIN_CHECK(internal::Disjoint(gu.data(), gu.size(), dgu.data(), dgu.size()) &&
                    internal::Disjoint(dh.data(), dh.size(), dgu.data(), dgu.size()),
                "SwiGluBackwardF32: inputs and output overlap");
  const internal::ScopedFpEnv fp_env;
  internal::EnsureSimdTargetChosen();
  HWY_DYNAMIC_DISPATCH(internal::SwiGluBackwardImpl)(dh.data(), gu.data(), rows, f, dgu.data());
}

}  // namespace mxtrain
#endif
