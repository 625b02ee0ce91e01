// ExpF32 (elementwise.h): expf a vector at a time (exp-inl.h), the bits std::exp(float)
// gives on Debian. The softmax of attention called the scalar expf once an element (~5% of
// a training step on an AVX2 Zen 3, and the loops around the calls could not vectorize).
//
// ExpF64: exp (double) a vector at a time with glibc's algorithm (2.28 and later,
// sysdeps/ieee754/dbl-64/e_exp.c) as its FMA build (__exp_fma, chosen by the ifunc on every
// CPU with FMA and AVX2) evaluates it: x / ln2 * 128 = k + r' (by adding 1.5 * 2^52), r =
// x - k ln2 / 128 in two fused steps, exp(x) = 2^(k/128) (1 + tail) (1 + p(r)) from a
// 128-entry table of (tail, 2^(k/128) bits less k << 45) and a quintic, fused in the places
// that build's code fuses (read off its disassembly). |x| < 2^-54 gives 1 + x, as there;
// |x| >= 512, infinities and NaN go to std::exp itself, as do targets without FMA. The
// cross-entropy of the training model called the scalar exp once a logit (2.8% of a
// default MXFP8 step on Zen 4).
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "exp_simd.cc"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

#include <cstdint>
#include <span>

#include "exp-inl.h"
#include "fp_env.h"
#include "mxtrain/elementwise.h"
#include "mxtrain/error.h"
#include "simd_internal.h"

#ifndef MXTRAIN_EXP64_TABLE_ONCE
#define MXTRAIN_EXP64_TABLE_ONCE
namespace mxtrain::internal {
// glibc's __exp_data (N = 128): tab[2k] = bits of tail_k, tab[2k + 1] = bits of
// 2^(k/128) / (1 + tail_k) less k << 45; and its constants, each read back from Debian's
// libm.
alignas(64) inline constexpr uint64_t kExp64Table[256] = {
    0x0000000000000000, 0x3ff0000000000000, 0x3c9b3b4f1a88bf6e, 0x3feff63da9fb3335,
    0xbc7160139cd8dc5d, 0x3fefec9a3e778061, 0xbc905e7a108766d1, 0x3fefe315e86e7f85,
    0x3c8cd2523567f613, 0x3fefd9b0d3158574, 0xbc8bce8023f98efa, 0x3fefd06b29ddf6de,
    0x3c60f74e61e6c861, 0x3fefc74518759bc8, 0x3c90a3e45b33d399, 0x3fefbe3ecac6f383,
    0x3c979aa65d837b6d, 0x3fefb5586cf9890f, 0x3c8eb51a92fdeffc, 0x3fefac922b7247f7,
    0x3c3ebe3d702f9cd1, 0x3fefa3ec32d3d1a2, 0xbc6a033489906e0b, 0x3fef9b66affed31b,
    0xbc9556522a2fbd0e, 0x3fef9301d0125b51, 0xbc5080ef8c4eea55, 0x3fef8abdc06c31cc,
    0xbc91c923b9d5f416, 0x3fef829aaea92de0, 0x3c80d3e3e95c55af, 0x3fef7a98c8a58e51,
    0xbc801b15eaa59348, 0x3fef72b83c7d517b, 0xbc8f1ff055de323d, 0x3fef6af9388c8dea,
    0x3c8b898c3f1353bf, 0x3fef635beb6fcb75, 0xbc96d99c7611eb26, 0x3fef5be084045cd4,
    0x3c9aecf73e3a2f60, 0x3fef54873168b9aa, 0xbc8fe782cb86389d, 0x3fef4d5022fcd91d,
    0x3c8a6f4144a6c38d, 0x3fef463b88628cd6, 0x3c807a05b0e4047d, 0x3fef3f49917ddc96,
    0x3c968efde3a8a894, 0x3fef387a6e756238, 0x3c875e18f274487d, 0x3fef31ce4fb2a63f,
    0x3c80472b981fe7f2, 0x3fef2b4565e27cdd, 0xbc96b87b3f71085e, 0x3fef24dfe1f56381,
    0x3c82f7e16d09ab31, 0x3fef1e9df51fdee1, 0xbc3d219b1a6fbffa, 0x3fef187fd0dad990,
    0x3c8b3782720c0ab4, 0x3fef1285a6e4030b, 0x3c6e149289cecb8f, 0x3fef0cafa93e2f56,
    0x3c834d754db0abb6, 0x3fef06fe0a31b715, 0x3c864201e2ac744c, 0x3fef0170fc4cd831,
    0x3c8fdd395dd3f84a, 0x3feefc08b26416ff, 0xbc86a3803b8e5b04, 0x3feef6c55f929ff1,
    0xbc924aedcc4b5068, 0x3feef1a7373aa9cb, 0xbc9907f81b512d8e, 0x3feeecae6d05d866,
    0xbc71d1e83e9436d2, 0x3feee7db34e59ff7, 0xbc991919b3ce1b15, 0x3feee32dc313a8e5,
    0x3c859f48a72a4c6d, 0x3feedea64c123422, 0xbc9312607a28698a, 0x3feeda4504ac801c,
    0xbc58a78f4817895b, 0x3feed60a21f72e2a, 0xbc7c2c9b67499a1b, 0x3feed1f5d950a897,
    0x3c4363ed60c2ac11, 0x3feece086061892d, 0x3c9666093b0664ef, 0x3feeca41ed1d0057,
    0x3c6ecce1daa10379, 0x3feec6a2b5c13cd0, 0x3c93ff8e3f0f1230, 0x3feec32af0d7d3de,
    0x3c7690cebb7aafb0, 0x3feebfdad5362a27, 0x3c931dbdeb54e077, 0x3feebcb299fddd0d,
    0xbc8f94340071a38e, 0x3feeb9b2769d2ca7, 0xbc87deccdc93a349, 0x3feeb6daa2cf6642,
    0xbc78dec6bd0f385f, 0x3feeb42b569d4f82, 0xbc861246ec7b5cf6, 0x3feeb1a4ca5d920f,
    0x3c93350518fdd78e, 0x3feeaf4736b527da, 0x3c7b98b72f8a9b05, 0x3feead12d497c7fd,
    0x3c9063e1e21c5409, 0x3feeab07dd485429, 0x3c34c7855019c6ea, 0x3feea9268a5946b7,
    0x3c9432e62b64c035, 0x3feea76f15ad2148, 0xbc8ce44a6199769f, 0x3feea5e1b976dc09,
    0xbc8c33c53bef4da8, 0x3feea47eb03a5585, 0xbc845378892be9ae, 0x3feea34634ccc320,
    0xbc93cedd78565858, 0x3feea23882552225, 0x3c5710aa807e1964, 0x3feea155d44ca973,
    0xbc93b3efbf5e2228, 0x3feea09e667f3bcd, 0xbc6a12ad8734b982, 0x3feea012750bdabf,
    0xbc6367efb86da9ee, 0x3fee9fb23c651a2f, 0xbc80dc3d54e08851, 0x3fee9f7df9519484,
    0xbc781f647e5a3ecf, 0x3fee9f75e8ec5f74, 0xbc86ee4ac08b7db0, 0x3fee9f9a48a58174,
    0xbc8619321e55e68a, 0x3fee9feb564267c9, 0x3c909ccb5e09d4d3, 0x3feea0694fde5d3f,
    0xbc7b32dcb94da51d, 0x3feea11473eb0187, 0x3c94ecfd5467c06b, 0x3feea1ed0130c132,
    0x3c65ebe1abd66c55, 0x3feea2f336cf4e62, 0xbc88a1c52fb3cf42, 0x3feea427543e1a12,
    0xbc9369b6f13b3734, 0x3feea589994cce13, 0xbc805e843a19ff1e, 0x3feea71a4623c7ad,
    0xbc94d450d872576e, 0x3feea8d99b4492ed, 0x3c90ad675b0e8a00, 0x3feeaac7d98a6699,
    0x3c8db72fc1f0eab4, 0x3feeace5422aa0db, 0xbc65b6609cc5e7ff, 0x3feeaf3216b5448c,
    0x3c7bf68359f35f44, 0x3feeb1ae99157736, 0xbc93091fa71e3d83, 0x3feeb45b0b91ffc6,
    0xbc5da9b88b6c1e29, 0x3feeb737b0cdc5e5, 0xbc6c23f97c90b959, 0x3feeba44cbc8520f,
    0xbc92434322f4f9aa, 0x3feebd829fde4e50, 0xbc85ca6cd7668e4b, 0x3feec0f170ca07ba,
    0x3c71affc2b91ce27, 0x3feec49182a3f090, 0x3c6dd235e10a73bb, 0x3feec86319e32323,
    0xbc87c50422622263, 0x3feecc667b5de565, 0x3c8b1c86e3e231d5, 0x3feed09bec4a2d33,
    0xbc91bbd1d3bcbb15, 0x3feed503b23e255d, 0x3c90cc319cee31d2, 0x3feed99e1330b358,
    0x3c8469846e735ab3, 0x3feede6b5579fdbf, 0xbc82dfcd978e9db4, 0x3feee36bbfd3f37a,
    0x3c8c1a7792cb3387, 0x3feee89f995ad3ad, 0xbc907b8f4ad1d9fa, 0x3feeee07298db666,
    0xbc55c3d956dcaeba, 0x3feef3a2b84f15fb, 0xbc90a40e3da6f640, 0x3feef9728de5593a,
    0xbc68d6f438ad9334, 0x3feeff76f2fb5e47, 0xbc91eee26b588a35, 0x3fef05b030a1064a,
    0x3c74ffd70a5fddcd, 0x3fef0c1e904bc1d2, 0xbc91bdfbfa9298ac, 0x3fef12c25bd71e09,
    0x3c736eae30af0cb3, 0x3fef199bdd85529c, 0x3c8ee3325c9ffd94, 0x3fef20ab5fffd07a,
    0x3c84e08fd10959ac, 0x3fef27f12e57d14b, 0x3c63cdaf384e1a67, 0x3fef2f6d9406e7b5,
    0x3c676b2c6c921968, 0x3fef3720dcef9069, 0xbc808a1883ccb5d2, 0x3fef3f0b555dc3fa,
    0xbc8fad5d3ffffa6f, 0x3fef472d4a07897c, 0xbc900dae3875a949, 0x3fef4f87080d89f2,
    0x3c74a385a63d07a7, 0x3fef5818dcfba487, 0xbc82919e2040220f, 0x3fef60e316c98398,
    0x3c8e5a50d5c192ac, 0x3fef69e603db3285, 0x3c843a59ac016b4b, 0x3fef7321f301b460,
    0xbc82d52107b43e1f, 0x3fef7c97337b9b5f, 0xbc892ab93b470dc9, 0x3fef864614f5a129,
    0x3c74b604603a88d3, 0x3fef902ee78b3ff6, 0x3c83c5ec519d7271, 0x3fef9a51fbc74c83,
    0xbc8ff7128fd391f0, 0x3fefa4afa2a490da, 0xbc8dae98e223747d, 0x3fefaf482d8e67f1,
    0x3c8ec3bc41aa2008, 0x3fefba1bee615a27, 0x3c842b94c3a9eb32, 0x3fefc52b376bba97,
    0x3c8a64a931d185ee, 0x3fefd0765b6e4540, 0xbc8e37bae43be3ed, 0x3fefdbfdad9cbe14,
    0x3c77893b4d91cd9d, 0x3fefe7c1819e90d8, 0x3c5305c14160cc89, 0x3feff3c22b8f71f1,
};
inline constexpr double kExp64InvLn2N = 0x1.71547652b82fep+7;  // 128 / ln 2
inline constexpr double kExp64NegLn2HiN = -0x1.62e42fefa0000p-8;
inline constexpr double kExp64NegLn2LoN = -0x1.cf79abc9e3b3ap-47;
inline constexpr double kExp64Shift = 0x1.8p+52;
inline constexpr double kExp64C2 = 0x1.ffffffffffdbdp-2;  // the quintic's last four terms
inline constexpr double kExp64C3 = 0x1.555555555543cp-3;
inline constexpr double kExp64C4 = 0x1.55555cf172b91p-5;
inline constexpr double kExp64C5 = 0x1.1111167a4d017p-7;
// The top 12 bits of |x| (sign off) from which glibc leaves its main path: below kTiny x is
// tiny (1 + x), from kLarge on |x| >= 512, infinite or NaN.
inline constexpr uint64_t kExp64TopTiny = 0x3c9;   // 2^-54
inline constexpr uint64_t kExp64TopLarge = 0x408;  // 512
}  // namespace mxtrain::internal
#endif

HWY_BEFORE_NAMESPACE();
namespace mxtrain::internal {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

void ExpF32Impl(const float* x, float* y, int64_t n) { ExpRow(x, y, n); }

#if HWY_TARGET != HWY_SCALAR && HWY_NATIVE_FMA && HWY_HAVE_FLOAT64
// The table's (tail, head) pair k for each lane's k (< 128). AVX-512: the eight pairs are
// 16-byte loads from the lanes' offsets, put side by side and split into tails and heads
// by two permutes; two 8-lane gathers took most of the loop's time on Zen 4 (one thread,
// 2^18 values: 1.75 ns a value), and on Intel CPUs with the Gather Data Sampling fix they
// are slower still. Elsewhere two gathers.
template <class DD>
HWY_INLINE void Exp64TableEntries(DD dd, hn::Vec<hn::RebindToUnsigned<DD>> k, hn::Vec<DD>& tail,
                                  hn::Vec<hn::RebindToUnsigned<DD>>& head) {
  const hn::RebindToUnsigned<DD> du;
#if HWY_TARGET <= HWY_AVX3
  // The offsets moved to general registers by extracts: stored to memory and read back as
  // eight 8-byte loads they waited on store forwarding.
  const __m512i offsets = hn::ShiftLeft<4>(k).raw;  // bytes: 16 a pair
  const __m128i q0 = _mm512_castsi512_si128(offsets), q1 = _mm512_extracti64x2_epi64(offsets, 1);
  const __m128i q2 = _mm512_extracti64x2_epi64(offsets, 2),
                q3 = _mm512_extracti64x2_epi64(offsets, 3);
  const char* base = reinterpret_cast<const char*>(kExp64Table);
  const auto at = [&](int i) {
    const __m128i q = i < 2 ? q0 : i < 4 ? q1 : i < 6 ? q2 : q3;
    return i % 2 == 0 ? _mm_cvtsi128_si64(q) : _mm_extract_epi64(q, 1);
  };
  const auto pair = [&](int i) {
    return _mm_load_si128(reinterpret_cast<const __m128i*>(base + at(i)));
  };
  const auto four = [&](int i) {
    return _mm256_inserti128_si256(_mm256_castsi128_si256(pair(i)), pair(i + 1), 1);
  };
  const __m512i lo = _mm512_inserti64x4(_mm512_castsi256_si512(four(0)), four(2), 1);
  const __m512i hi = _mm512_inserti64x4(_mm512_castsi256_si512(four(4)), four(6), 1);
  tail = hn::BitCast(dd, hn::Vec<decltype(du)>{_mm512_permutex2var_epi64(
                             lo, _mm512_set_epi64(14, 12, 10, 8, 6, 4, 2, 0), hi)});
  head = hn::Vec<decltype(du)>{
      _mm512_permutex2var_epi64(lo, _mm512_set_epi64(15, 13, 11, 9, 7, 5, 3, 1), hi)};
#else
  const hn::RebindToSigned<DD> di;
  const auto index = hn::BitCast(di, hn::ShiftLeft<1>(k));
  tail = hn::GatherIndex(dd, reinterpret_cast<const double*>(kExp64Table), index);
  head = hn::GatherIndex(du, kExp64Table + 1, index);
#endif
}
#endif

void ExpF64Impl(const double* x, double* y, int64_t n) {
  int64_t j = 0;
#if HWY_TARGET != HWY_SCALAR && HWY_NATIVE_FMA && HWY_HAVE_FLOAT64
  const hn::ScalableTag<double> dd;
  const hn::RebindToUnsigned<decltype(dd)> du;
  const hn::RebindToSigned<decltype(dd)> di;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(dd));
  const auto inv_ln2 = hn::Set(dd, kExp64InvLn2N), shift = hn::Set(dd, kExp64Shift);
  const auto neg_ln2_hi = hn::Set(dd, kExp64NegLn2HiN), neg_ln2_lo = hn::Set(dd, kExp64NegLn2LoN);
  const auto c2 = hn::Set(dd, kExp64C2), c3 = hn::Set(dd, kExp64C3);
  const auto c4 = hn::Set(dd, kExp64C4), c5 = hn::Set(dd, kExp64C5);
  const auto one = hn::Set(dd, 1.0);
  const auto top_mask = hn::Set(du, 0x7ff);
  // Signed compares of the 11-bit tops (Highway 1.0.3 has no unsigned 64-bit ones on AVX2).
  const auto top_tiny = hn::Set(di, static_cast<int64_t>(kExp64TopTiny));
  const auto top_large = hn::Set(di, static_cast<int64_t>(kExp64TopLarge) - 1);
  const auto index_mask = hn::Set(du, 127);
  for (; j + lanes <= n; j += lanes) {
    const auto xv = hn::LoadU(dd, x + j);
    const auto top = hn::BitCast(di, hn::And(hn::ShiftRight<52>(hn::BitCast(du, xv)), top_mask));
    if (!hn::AllFalse(di, hn::Gt(top, top_large))) {
      for (int64_t i = j; i < j + lanes; ++i) y[i] = std::exp(x[i]);
      continue;
    }
    const auto kd_shifted = hn::MulAdd(xv, inv_ln2, shift);  // fused, as __exp_fma
    const auto ki = hn::BitCast(du, kd_shifted);
    const auto kd = hn::Sub(kd_shifted, shift);
    const auto r = hn::MulAdd(kd, neg_ln2_lo, hn::MulAdd(kd, neg_ln2_hi, xv));
    hn::Vec<decltype(dd)> tail;
    hn::Vec<decltype(du)> head;
    Exp64TableEntries(dd, hn::And(ki, index_mask), tail, head);
    const auto sbits = hn::Add(head, hn::ShiftLeft<45>(ki));
    const auto r2 = hn::Mul(r, r);
    const auto low = hn::MulAdd(hn::MulAdd(r, c3, c2), r2, hn::Add(r, tail));
    const auto tmp = hn::MulAdd(hn::Mul(r2, r2), hn::MulAdd(r, c5, c4), low);
    const auto scale = hn::BitCast(dd, sbits);
    const auto e = hn::MulAdd(scale, tmp, scale);
    hn::StoreU(hn::IfThenElse(hn::RebindMask(dd, hn::Lt(top, top_tiny)), hn::Add(xv, one), e), dd,
               y + j);
  }
#endif
  for (; j < n; ++j) y[j] = std::exp(x[j]);
}

}  // namespace HWY_NAMESPACE
}  // namespace mxtrain::internal
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace mxtrain {
namespace internal {
HWY_EXPORT(ExpF32Impl);
HWY_EXPORT(ExpF64Impl);
}  // namespace internal

namespace {

// y = exp(x) by `impl` (the dispatched kernel), after the span checks of elementwise.h.
template <typename T, typename Impl>
void ExpChecked(const char* op, std::span<const T> x, std::span<T> y, const Impl& impl) {
  MXTRAIN_CHECK(x.size() == y.size(), op, ": ", x.size(), " inputs for ", y.size(), " outputs");
  MXTRAIN_CHECK(
      x.data() == y.data() || x.data() + x.size() <= y.data() || y.data() + y.size() <= x.data(),
      op, ": input and output overlap without being the same array");
  const internal::ScopedFpEnv fp_env;
  internal::EnsureSimdTargetChosen();
  impl(x.data(), y.data(), static_cast<int64_t>(x.size()));
}

}  // namespace

void ExpF32(std::span<const float> x, std::span<float> y) {
  ExpChecked("ExpF32", x, y, [](const float* in, float* out, int64_t n) {
    HWY_DYNAMIC_DISPATCH(internal::ExpF32Impl)(in, out, n);
  });
}

void ExpF64(std::span<const double> x, std::span<double> y) {
  ExpChecked("ExpF64", x, y, [](const double* in, double* out, int64_t n) {
    HWY_DYNAMIC_DISPATCH(internal::ExpF64Impl)(in, out, n);
  });
}

}  // namespace mxtrain
#endif
