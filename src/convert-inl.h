// fp32 -> bf16 rounding on a vector (round to nearest even; a NaN stays a NaN, quieted), as
// F32ToBf16 (mxtrain/format/bf16.h) does element by element: the narrowing of convert.h
// and the GEMM kernels that write bf16 outputs share it.
// Included once per Highway target, hence the toggling guard of Highway's own -inl.h files.
#if defined(MXTRAIN_CONVERT_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef MXTRAIN_CONVERT_INL_H_
#undef MXTRAIN_CONVERT_INL_H_
#else
#define MXTRAIN_CONVERT_INL_H_
#endif

#include <hwy/highway.h>

HWY_BEFORE_NAMESPACE();
namespace mxtrain::internal {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

#if HWY_TARGET != HWY_SCALAR
// v rounded to bf16: the bf16 bits in the low half of each lane (the high half zero).
template <class DF>
HWY_INLINE hn::Vec<hn::RebindToUnsigned<DF>> Bf16Bits(DF /*df: the lanes' type*/, hn::Vec<DF> v) {
  const hn::RebindToSigned<DF> di;
  const hn::RebindToUnsigned<DF> du;
  const auto bits = hn::BitCast(di, v);
  // Logical shifts of the bits (as unsigned), as F32ToBf16's uint32_t arithmetic.
  const auto high = hn::BitCast(di, hn::ShiftRight<16>(hn::BitCast(du, bits)));
  const auto rounded = hn::BitCast(
      di, hn::ShiftRight<16>(hn::BitCast(
              du, hn::Add(bits, hn::Add(hn::Set(di, 0x7FFF), hn::And(high, hn::Set(di, 1)))))));
  const auto nan = hn::Gt(hn::And(bits, hn::Set(di, 0x7FFFFFFF)), hn::Set(di, 0x7F800000));
  return hn::BitCast(du, hn::IfThenElse(nan, hn::Or(high, hn::Set(di, 0x0040)), rounded));
}

// v rounded to bf16, stored as Lanes(df) uint16_t at dst.
template <class DF>
HWY_INLINE void StoreBf16(DF df, hn::Vec<DF> v, uint16_t* HWY_RESTRICT dst) {
  const hn::Rebind<uint16_t, DF> d16;
  hn::StoreU(hn::TruncateTo(d16, Bf16Bits(df, v)), d16, dst);
}

// v rounded to bf16 and widened back to fp32 (exact): Bf16ToF32(F32ToBf16(v)) per lane.
template <class DF>
HWY_INLINE hn::Vec<DF> RoundToBf16(DF df, hn::Vec<DF> v) {
  return hn::BitCast(df, hn::ShiftLeft<16>(Bf16Bits(df, v)));
}
#endif

}  // namespace HWY_NAMESPACE
}  // namespace mxtrain::internal
HWY_AFTER_NAMESPACE();

#endif  // MXTRAIN_CONVERT_INL_H_
