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
// v rounded to bf16, stored as Lanes(df) uint16_t at dst.
template <class DF>
HWY_INLINE void StoreBf16(DF df, hn::Vec<DF> v, uint16_t* HWY_RESTRICT dst) {
  const hn::RebindToSigned<DF> di;
  const hn::RebindToUnsigned<DF> du;
  const hn::Rebind<uint16_t, DF> d16;
  const auto bits = hn::BitCast(di, v);
  // Logical shifts of the bits (as unsigned), as F32ToBf16's uint32_t arithmetic.
  const auto high = hn::BitCast(di, hn::ShiftRight<16>(hn::BitCast(du, bits)));
  const auto rounded = hn::BitCast(
      di, hn::ShiftRight<16>(hn::BitCast(
              du, hn::Add(bits, hn::Add(hn::Set(di, 0x7FFF), hn::And(high, hn::Set(di, 1)))))));
  const auto nan = hn::Gt(hn::And(bits, hn::Set(di, 0x7FFFFFFF)), hn::Set(di, 0x7F800000));
  const auto narrowed = hn::IfThenElse(nan, hn::Or(high, hn::Set(di, 0x0040)), rounded);
  hn::StoreU(hn::TruncateTo(d16, hn::BitCast(du, narrowed)), d16, dst);
}
#endif

}  // namespace HWY_NAMESPACE
}  // namespace mxtrain::internal
HWY_AFTER_NAMESPACE();

#endif  // MXTRAIN_CONVERT_INL_H_
