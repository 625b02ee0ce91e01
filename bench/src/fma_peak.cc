// The fp32 FMA peak loop (mxtrain/bench.h): what the current Highway target's FMA units do
// when nothing else runs, the ceiling of the "simd-f32" and "portable" GEMM paths.

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "fma_peak.cc"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

#include <cstdint>

HWY_BEFORE_NAMESPACE();
namespace mxtrain::internal {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// 12 independent accumulator chains: FMA latency 4 cycles x 2 ports needs at least 8 in
// flight (Zen 2 to Sapphire Rapids), and 12 leaves room for the loop's own uops. Returns
// the flops done; the sum is written to `sink` so that no chain is dead code.
double FmaLoop(int64_t iterations, float* sink) {
  const hn::ScalableTag<float> d;
  using V = hn::Vec<decltype(d)>;
  constexpr int kChains = 12;
  // acc += 2^-10 * 2^-10 per step stays exact and finite for 2^40 steps. Read through a
  // volatile, so that the compiler cannot fold the exact constant product into an add.
  volatile float factor = 0x1p-10f;
  const V x = hn::Set(d, factor);
  V acc[kChains];
  for (int c = 0; c < kChains; ++c) acc[c] = hn::Set(d, static_cast<float>(c));
  for (int64_t i = 0; i < iterations; ++i) {
    for (int c = 0; c < kChains; ++c) acc[c] = hn::MulAdd(x, x, acc[c]);
  }
  V sum = acc[0];
  for (int c = 1; c < kChains; ++c) sum = hn::Add(sum, acc[c]);
  *sink = hn::GetLane(sum);
  return 2.0 * kChains * static_cast<double>(hn::Lanes(d)) * static_cast<double>(iterations);
}

}  // namespace HWY_NAMESPACE
}  // namespace mxtrain::internal
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
#include "simd_internal.h"

namespace mxtrain::internal {

HWY_EXPORT(FmaLoop);

double FmaPeakThread(int64_t iterations, float* sink) {
  EnsureSimdTargetChosen();
  return HWY_DYNAMIC_DISPATCH(FmaLoop)(iterations, sink);
}

}  // namespace mxtrain::internal
#endif
