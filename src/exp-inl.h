// The vector expf of ExpF32 (elementwise.h) as an inline per-target function, for the
// kernels that take exponentials on the way (exp_simd.cc, swiglu_simd.cc): glibc's algorithm
// (2.28 and later, sysdeps/ieee754/flt-32/e_expf.c) as its FMA build evaluates it, so that
// every result is the bits std::exp(float) gives on Debian.
//
// The algorithm: x / ln2 * 32 = k + r with k an integer (by adding 1.5 * 2^52) and r in
// [-1/2, 1/2]; exp(x) = 2^(k/32) * 2^(r/32), the first from a 32-entry table with k / 32
// added to its exponent, the second a cubic in r, all in double, rounded once to float.
// glibc's FMA build (chosen by its ifunc on every CPU with FMA and AVX2) fuses five of
// the operations; so do the vectors here, in the same places. Targets without FMA, the
// scalar target, |x| >= 88 (overflow, underflow to subnormals and zero), infinities and
// NaN go to std::exp itself.
// Included once per Highway target, hence the toggling guard of Highway's own -inl.h files.
#if defined(MXTRAIN_EXP_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef MXTRAIN_EXP_INL_H_
#undef MXTRAIN_EXP_INL_H_
#else
#define MXTRAIN_EXP_INL_H_
#endif

#include <hwy/highway.h>

#include <cmath>
#include <cstdint>

#ifndef MXTRAIN_EXP_TABLE_ONCE
#define MXTRAIN_EXP_TABLE_ONCE
namespace mxtrain::internal {
// glibc's __exp2f_data: tab[i] = bits(2^(i/32)) - (i << 47), so that adding k << 47 puts
// k / 32 into the exponent; and the constants, each read back from Debian's libm.
alignas(64) inline constexpr uint64_t kExp2Table[32] = {
    0x3ff0000000000000, 0x3fefd9b0d3158574, 0x3fefb5586cf9890f, 0x3fef9301d0125b51,
    0x3fef72b83c7d517b, 0x3fef54873168b9aa, 0x3fef387a6e756238, 0x3fef1e9df51fdee1,
    0x3fef06fe0a31b715, 0x3feef1a7373aa9cb, 0x3feedea64c123422, 0x3feece086061892d,
    0x3feebfdad5362a27, 0x3feeb42b569d4f82, 0x3feeab07dd485429, 0x3feea47eb03a5585,
    0x3feea09e667f3bcd, 0x3fee9f75e8ec5f74, 0x3feea11473eb0187, 0x3feea589994cce13,
    0x3feeace5422aa0db, 0x3feeb737b0cdc5e5, 0x3feec49182a3f090, 0x3feed503b23e255d,
    0x3feee89f995ad3ad, 0x3feeff76f2fb5e47, 0x3fef199bdd85529c, 0x3fef3720dcef9069,
    0x3fef5818dcfba487, 0x3fef7c97337b9b5f, 0x3fefa4afa2a490da, 0x3fefd0765b6e4540,
};
inline constexpr double kInvLn2x32 = 0x1.71547652b82fep+5;  // 32 / ln 2
inline constexpr double kShift = 0x1.8p+52;                 // rounds to an integer
inline constexpr double kC0 = 0x1.c6af84b912394p-20;        // the cubic for 2^(r/32)
inline constexpr double kC1 = 0x1.ebfce50fac4f3p-13;
inline constexpr double kC2 = 0x1.62e42ff0c52d6p-6;
// Bits of |x| from which glibc leaves its main path (|x| >= 88, infinities, NaN).
inline constexpr uint32_t kExpSpecialAbs = 0x42b00000;
}  // namespace mxtrain::internal
#endif

HWY_BEFORE_NAMESPACE();
namespace mxtrain::internal {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

#if HWY_TARGET != HWY_SCALAR && HWY_NATIVE_FMA && HWY_HAVE_FLOAT64
// kExp2Table[ki & 31] per 64-bit lane, as bits. AVX-512: the table is four vectors, held in
// registers; two two-register permutes (index bits 0-3) and a select on bit 4. Elsewhere a
// gather, which on AVX-512 took most of the loop's time (one thread, 2^19 values on Zen 4:
// 0.8 ns a value) and on Intel CPUs with the Gather Data Sampling fix is slower still.
template <class DU>
struct Exp2TableLookup {
#if HWY_TARGET <= HWY_AVX3
  __m512i t0, t1, t2, t3;
  Exp2TableLookup()
      : t0(_mm512_load_si512(kExp2Table)),
        t1(_mm512_load_si512(kExp2Table + 8)),
        t2(_mm512_load_si512(kExp2Table + 16)),
        t3(_mm512_load_si512(kExp2Table + 24)) {}
  hn::Vec<DU> operator()(hn::Vec<DU> ki) const {
    const __m512i lo = _mm512_permutex2var_epi64(t0, ki.raw, t1);
    const __m512i hi = _mm512_permutex2var_epi64(t2, ki.raw, t3);
    const __mmask8 upper = _mm512_test_epi64_mask(ki.raw, _mm512_set1_epi64(16));
    return hn::Vec<DU>{_mm512_mask_blend_epi64(upper, lo, hi)};
  }
#else
  hn::Vec<DU> operator()(hn::Vec<DU> ki) const {
    const DU du;
    const hn::RebindToSigned<DU> di;
    const hn::RebindToFloat<DU> dd;
    const double* table = reinterpret_cast<const double*>(kExp2Table);  // gathered as bits
    return hn::BitCast(du,
                       hn::GatherIndex(dd, table, hn::BitCast(di, hn::And(ki, hn::Set(du, 31)))));
  }
#endif
};
#endif

// y[i] = std::exp(x[i]) for i < n, or std::exp(-x[i]) (kNegate: the negation is exact, so
// these are the bits of std::exp of the negated value). y may be x itself.
template <bool kNegate = false>
HWY_INLINE void ExpRow(const float* x, float* y, int64_t n) {
  int64_t j = 0;
#if HWY_TARGET != HWY_SCALAR && HWY_NATIVE_FMA && HWY_HAVE_FLOAT64
  const hn::ScalableTag<double> dd;
  const hn::RebindToUnsigned<decltype(dd)> du64;
  const hn::Rebind<float, decltype(dd)> df;     // as many floats as doubles
  const hn::RebindToSigned<decltype(df)> di32;  // |x|'s bits fit: signed compares
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(dd));
  const auto inv_ln2 = hn::Set(dd, kInvLn2x32), shift = hn::Set(dd, kShift);
  const auto c0 = hn::Set(dd, kC0), c1 = hn::Set(dd, kC1), c2 = hn::Set(dd, kC2);
  const auto one = hn::Set(dd, 1.0);
  const auto abs_mask = hn::Set(di32, 0x7fffffff);
  const auto normal_end = hn::Set(di32, static_cast<int32_t>(kExpSpecialAbs) - 1);
  const Exp2TableLookup<decltype(du64)> table;
  for (; j + lanes <= n; j += lanes) {
    const auto xf = hn::LoadU(df, x + j);
    if (!hn::AllFalse(di32, hn::Gt(hn::And(hn::BitCast(di32, xf), abs_mask), normal_end))) {
      for (int64_t i = j; i < j + lanes; ++i) y[i] = std::exp(kNegate ? -x[i] : x[i]);
      continue;
    }
    const auto xd = kNegate ? hn::Neg(hn::PromoteTo(dd, xf)) : hn::PromoteTo(dd, xf);
    const auto kd_shifted = hn::MulAdd(inv_ln2, xd, shift);  // fused, as glibc's FMA build
    const auto ki = hn::BitCast(du64, kd_shifted);
    const auto kd = hn::Sub(kd_shifted, shift);
    const auto r = hn::MulSub(inv_ln2, xd, kd);  // x / ln2 * 32 - k, fused
    const auto t = hn::Add(table(ki), hn::ShiftLeft<47>(ki));
    const auto s = hn::BitCast(dd, t);
    const auto z = hn::MulAdd(r, c0, c1);
    const auto r2 = hn::Mul(r, r);
    const auto p = hn::MulAdd(r, c2, one);
    const auto e = hn::Mul(hn::MulAdd(z, r2, p), s);
    hn::StoreU(hn::DemoteTo(df, e), df, y + j);
  }
#endif
  for (; j < n; ++j) y[j] = std::exp(kNegate ? -x[j] : x[j]);
}

}  // namespace HWY_NAMESPACE
}  // namespace mxtrain::internal
HWY_AFTER_NAMESPACE();

#endif  // MXTRAIN_EXP_INL_H_
