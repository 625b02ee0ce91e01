// ExpF32 (elementwise.h): expf a vector at a time (exp-inl.h), the bits std::exp(float)
// gives on Debian. The softmax of attention called the scalar expf once an element (~5% of
// a training step on an AVX2 Zen 3, and the loops around the calls could not vectorize).
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

HWY_BEFORE_NAMESPACE();
namespace mxtrain::internal {
namespace HWY_NAMESPACE {

void ExpF32Impl(const float* x, float* y, int64_t n) { ExpRow(x, y, n); }

}  // namespace HWY_NAMESPACE
}  // namespace mxtrain::internal
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace mxtrain {
namespace internal {
HWY_EXPORT(ExpF32Impl);
}  // namespace internal

void ExpF32(std::span<const float> x, std::span<float> y) {
  MXTRAIN_CHECK(x.size() == y.size(), "ExpF32: ", x.size(), " inputs for ", y.size(), " outputs");
  MXTRAIN_CHECK(
      x.data() == y.data() || x.data() + x.size() <= y.data() || y.data() + y.size() <= x.data(),
      "ExpF32: input and output overlap without being the same array");
  const internal::ScopedFpEnv fp_env;
  internal::EnsureSimdTargetChosen();
  HWY_DYNAMIC_DISPATCH(internal::ExpF32Impl)(x.data(), y.data(), static_cast<int64_t>(x.size()));
}

}  // namespace mxtrain
#endif
