// The SwiGLU kernels of elementwise.h (SwiGluF32, SwiGluBackwardF32 and their bf16 forms):
// the gate's exponentials a chunk of a row at a time (exp-inl.h, the bits of std::exp) into
// a buffer in L1, then the rest of the formula a whole vector at a time. Every operation is
// an IEEE one in the order the scalar loop writes it (strict FP: nothing fused), so each
// lane gives that loop's bits whatever the vector width; bf16 values are widened exactly
// on load and rounded once on store. The model's loops had called ExpF32 once a row and
// left the division to the compiler's vectors of the baseline ISA (SSE2): SwiGLU was ~10%
// of a default `mxtrain train` MXFP8 step on Zen 4.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "swiglu_simd.cc"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

#include <algorithm>
#include <cstdint>
#include <span>
#include <type_traits>

#include "convert-inl.h"
#include "exp-inl.h"
#include "fp_env.h"
#include "mxtrain/elementwise.h"
#include "mxtrain/error.h"
#include "mxtrain/format/bf16.h"
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

// Elements of type T (float, or uint16_t holding bf16) as fp32 and back: bf16 widens
// exactly and rounds to nearest even (F32ToBf16, convert-inl.h's StoreBf16) once, at the
// end.
template <typename T>
HWY_INLINE float ToF32(T v) {
  if constexpr (std::is_same_v<T, float>) {
    return v;
  } else {
    return Bf16ToF32(v);
  }
}
template <typename T>
HWY_INLINE T FromF32(float v) {
  if constexpr (std::is_same_v<T, float>) {
    return v;
  } else {
    return F32ToBf16(v);
  }
}

#if HWY_TARGET != HWY_SCALAR
template <typename T, class D>
HWY_INLINE hn::Vec<D> LoadAsF32(D d, const T* p) {
  if constexpr (std::is_same_v<T, float>) {
    return hn::LoadU(d, p);
  } else {
    const hn::RebindToUnsigned<D> du;
    const hn::Rebind<uint16_t, D> d16;
    return hn::BitCast(d, hn::ShiftLeft<16>(hn::PromoteTo(du, hn::LoadU(d16, p))));
  }
}
template <typename T, class D>
HWY_INLINE void StoreFromF32(D d, hn::Vec<D> v, T* p) {
  if constexpr (std::is_same_v<T, float>) {
    hn::StoreU(v, d, p);
  } else {
    StoreBf16(d, v, p);
  }
}
#endif

// Rows of SwiGLU (dh == nullptr: forward, out [rows, f]) or of its gradient (out [rows,
// 2f]); gu [rows, 2f], gate columns first; every array of element type T.
template <bool kBackward, typename T>
void SwiGluRows(const T* HWY_RESTRICT gu, const T* HWY_RESTRICT dh, int64_t rows, int64_t f,
                T* HWY_RESTRICT out) {
  constexpr bool kF32 = std::is_same_v<T, float>;
  HWY_ALIGN float e[kSwiGluChunk];
  HWY_ALIGN float wide[kF32 ? 1 : kSwiGluChunk];  // a chunk of gate values, widened (bf16)
  for (int64_t i = 0; i < rows; ++i) {
    const T* a = gu + i * 2 * f;
    const T* b = a + f;
    const T* g = kBackward ? dh + i * f : nullptr;
    T* o = out + i * (kBackward ? 2 * f : f);
    for (int64_t j0 = 0; j0 < f; j0 += kSwiGluChunk) {
      const int64_t len = std::min(kSwiGluChunk, f - j0);
      // The chunk's gate values as fp32, and e = exp(-a).
      const float* af;
      if constexpr (kF32) {
        af = a + j0;
      } else {
        for (int64_t k = 0; k < len; ++k) wide[k] = Bf16ToF32(a[j0 + k]);
        af = wide;
      }
      ExpRow</*kNegate=*/true>(af, e, len);
      int64_t k = 0;
#if HWY_TARGET != HWY_SCALAR
      const hn::ScalableTag<float> d;
      const int64_t n = static_cast<int64_t>(hn::Lanes(d));
      const auto one = hn::Set(d, 1.0f);
      for (; k + n <= len; k += n) {
        const int64_t j = j0 + k;
        const auto av = hn::LoadU(d, af + k), bv = LoadAsF32(d, b + j);
        const auto s = hn::Div(one, hn::Add(one, hn::Load(d, e + k)));
        if constexpr (kBackward) {
          const auto gv = LoadAsF32(d, g + j);
          const auto silu = hn::Mul(av, s);
          StoreFromF32(d, hn::Mul(hn::Mul(gv, bv), hn::Add(s, hn::Mul(silu, hn::Sub(one, s)))),
                       o + j);
          StoreFromF32(d, hn::Mul(gv, silu), o + f + j);
        } else {
          StoreFromF32(d, hn::Mul(hn::Mul(av, s), bv), o + j);
        }
      }
#endif
      for (; k < len; ++k) {  // the scalar loop itself
        const int64_t j = j0 + k;
        const float s = 1.0f / (1.0f + e[k]);
        const float av = af[k], bv = ToF32(b[j]);
        if constexpr (kBackward) {
          const float gv = ToF32(g[j]);
          const float silu = av * s;
          o[j] = FromF32<T>(gv * bv * (s + silu * (1.0f - s)));
          o[f + j] = FromF32<T>(gv * silu);
        } else {
          o[j] = FromF32<T>(av * s * bv);
        }
      }
    }
  }
}

void SwiGluImpl(const float* gu, int64_t rows, int64_t f, float* h) {
  SwiGluRows<false>(gu, static_cast<const float*>(nullptr), rows, f, h);
}
void SwiGluBackwardImpl(const float* dh, const float* gu, int64_t rows, int64_t f, float* dgu) {
  SwiGluRows<true>(gu, dh, rows, f, dgu);
}
void SwiGluBf16Impl(const uint16_t* gu, int64_t rows, int64_t f, uint16_t* h) {
  SwiGluRows<false>(gu, static_cast<const uint16_t*>(nullptr), rows, f, h);
}
void SwiGluBackwardBf16Impl(const uint16_t* dh, const uint16_t* gu, int64_t rows, int64_t f,
                            uint16_t* dgu) {
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
HWY_EXPORT(SwiGluBf16Impl);
HWY_EXPORT(SwiGluBackwardBf16Impl);

namespace {

// Whether [p, p + n) and [q, q + m) share no element.
template <typename T>
bool Disjoint(const T* p, size_t n, const T* q, size_t m) {
  return p + n <= q || q + m <= p;
}

// The rows of a SwiGLU input gu (rows of 2f values), after checking f and its size.
template <typename T>
int64_t InputRows(std::span<const T> gu, int64_t f, const char* op) {
  MXTRAIN_CHECK(f >= 1, op, ": width f must be >= 1, got ", f);
  MXTRAIN_CHECK(gu.size() % static_cast<size_t>(2 * f) == 0, op, ": input of ", gu.size(),
                " values is not rows of 2f = ", 2 * f);
  return static_cast<int64_t>(gu.size()) / (2 * f);
}

// The forward's checks (rows of 2f in, rows of f out, apart) and its rows.
template <typename T>
int64_t ForwardRows(std::span<const T> gu, int64_t f, std::span<T> h, const char* op) {
  const int64_t rows = InputRows(gu, f, op);
  MXTRAIN_CHECK(static_cast<int64_t>(h.size()) == rows * f, op, ": output of ", h.size(),
                " values for ", rows, " rows of f = ", f);
  MXTRAIN_CHECK(Disjoint(gu.data(), gu.size(), h.data(), h.size()), op,
                ": input and output overlap");
  return rows;
}

// The backward's: as the forward's with dgu (rows of 2f) for h, and dh (rows of f) apart.
template <typename T>
int64_t BackwardRows(std::span<const T> dh, std::span<const T> gu, int64_t f, std::span<T> dgu,
                     const char* op) {
  const int64_t rows = InputRows(gu, f, op);
  MXTRAIN_CHECK(static_cast<int64_t>(dh.size()) == rows * f && dgu.size() == gu.size(), op, ": ",
                dh.size(), " gradient and ", dgu.size(), " output values for ", rows,
                " rows of f = ", f);
  MXTRAIN_CHECK(Disjoint(gu.data(), gu.size(), dgu.data(), dgu.size()) &&
                    Disjoint(dh.data(), dh.size(), dgu.data(), dgu.size()),
                op, ": inputs and output overlap");
  return rows;
}

}  // namespace
}  // namespace internal

void SwiGluF32(std::span<const float> gu, int64_t f, std::span<float> h) {
  const int64_t rows = internal::ForwardRows(gu, f, h, "SwiGluF32");
  const internal::ScopedFpEnv fp_env;
  internal::EnsureSimdTargetChosen();
  HWY_DYNAMIC_DISPATCH(internal::SwiGluImpl)(gu.data(), rows, f, h.data());
}

void SwiGluBf16(std::span<const uint16_t> gu, int64_t f, std::span<uint16_t> h) {
  const int64_t rows = internal::ForwardRows(gu, f, h, "SwiGluBf16");
  const internal::ScopedFpEnv fp_env;
  internal::EnsureSimdTargetChosen();
  HWY_DYNAMIC_DISPATCH(internal::SwiGluBf16Impl)(gu.data(), rows, f, h.data());
}

void SwiGluBackwardF32(std::span<const float> dh, std::span<const float> gu, int64_t f,
                       std::span<float> dgu) {
  const int64_t rows = internal::BackwardRows(dh, gu, f, dgu, "SwiGluBackwardF32");
  const internal::ScopedFpEnv fp_env;
  internal::EnsureSimdTargetChosen();
  HWY_DYNAMIC_DISPATCH(internal::SwiGluBackwardImpl)(dh.data(), gu.data(), rows, f, dgu.data());
}

void SwiGluBackwardBf16(std::span<const uint16_t> dh, std::span<const uint16_t> gu, int64_t f,
                        std::span<uint16_t> dgu) {
  const int64_t rows = internal::BackwardRows(dh, gu, f, dgu, "SwiGluBackwardBf16");
  const internal::ScopedFpEnv fp_env;
  internal::EnsureSimdTargetChosen();
  HWY_DYNAMIC_DISPATCH(internal::SwiGluBackwardBf16Impl)(dh.data(), gu.data(), rows, f, dgu.data());
}

}  // namespace mxtrain
#endif
