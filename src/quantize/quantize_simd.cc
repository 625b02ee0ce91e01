// The SIMD quantization kernels, written once over vector width with Google Highway and
// compiled for every x86 target (AVX3_DL = AVX-512 with VBMI, AVX3, AVX2, SSE4, SSSE3) plus
// the portable SCALAR one; simd.h picks among them at run time.
//
// Bit-exactness with the scalar reference (minifloat.h) rests on three facts:
// - scaling is the same fp32 multiply x * fl32(2^(127-b)) (NUMERICS.md §5);
// - the vector encoder rounds normal values with integer arithmetic on the fp32 bits
//   (add 2^(22-m) - 1 plus the lowest kept bit, then shift: round half to even) and
//   subnormal ones by an fp32 add of 2^(23 + min_subnormal_exp), which puts the fp8
//   subnormal step at one fp32 ulp, so the hardware's round-to-nearest-even does the
//   rounding; this is checked against the reference over all 2^32 inputs;
// - a NaN block gets the multiplier NaN, so every element of it encodes to 0x7F.
// Partial blocks and column tails use the scalar encoder itself.
//
// On every target but SCALAR, full blocks go through a second encoder on 16-bit lanes
// (twice the lanes per instruction; docs/decisions.md "16-bit quantization lanes"): a bf16
// value times 2^(127-b) is its bit pattern plus (127-b) << 7 while the result is an element
// normal (taken as one saturating subtraction that also rebases the exponent to the
// element's bias, so zeros stay zero), and rounding those 7 mantissa bits to 3 (or 2) is
// the same integer rounding as above. An fp32 input is first narrowed to 16 bits with
// round-to-odd (the low 16 bits OR-ed into the lowest kept bit), which keeps
// round-to-nearest-even to the 3 or 2 bits exact (4 spare bits, where 2 suffice). A vector holding
// any lane that would be an element subnormal, or an input subnormal, is encoded again by the fp32
// encoder from the source; zeros stay on the fast path.
//
// The kernel families live in one -inl.h each (encode, encode16, prefetch, rowwise,
// colwise, dual), all compiled here for every target; this file holds the run-time
// dispatch to their templates and the exported table of kernels.

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "quantize/quantize_simd.cc"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

#include "quantize/colwise-inl.h"
#include "quantize/dual-inl.h"
#include "quantize/encode-inl.h"
#include "quantize/encode16-inl.h"
#include "quantize/kernels.h"
#include "quantize/prefetch-inl.h"
#include "quantize/rowwise-inl.h"

HWY_BEFORE_NAMESPACE();
namespace mxtrain::internal {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// Whether a rule's elements can exceed the largest element once scaled (floor and even:
// blocks whose amax mantissa is large); rceil and ceil cannot (docs/decisions.md "rceil and
// saturation", checked by Exhaustive.RceilAndCeilNeverRoundPastTheLargestElement), so
// their kernels leave the clamp out.
HWY_INLINE bool RuleSaturates(ScaleRule rule) {
  return rule != ScaleRule::kRceil && rule != ScaleRule::kCeil;
}

// Run-time (bf16, format, saturation) to template dispatch, once per kernel call.
#define MXTRAIN_DISPATCH_SAT(FN, BF16, FORMAT, SRC, ...) \
  do {                                                   \
    if (RuleSaturates((SRC).rule))                       \
      FN<BF16, FORMAT, true>(__VA_ARGS__);               \
    else                                                 \
      FN<BF16, FORMAT, false>(__VA_ARGS__);              \
  } while (0)
#define MXTRAIN_DISPATCH_TYPES(FN, SRC, ...)                                     \
  do {                                                                           \
    if ((SRC).bf16) {                                                            \
      if ((SRC).format == ElementFormat::kE4M3) {                                \
        MXTRAIN_DISPATCH_SAT(FN, true, ElementFormat::kE4M3, SRC, __VA_ARGS__);  \
      } else {                                                                   \
        MXTRAIN_DISPATCH_SAT(FN, true, ElementFormat::kE5M2, SRC, __VA_ARGS__);  \
      }                                                                          \
    } else {                                                                     \
      if ((SRC).format == ElementFormat::kE4M3) {                                \
        MXTRAIN_DISPATCH_SAT(FN, false, ElementFormat::kE4M3, SRC, __VA_ARGS__); \
      } else {                                                                   \
        MXTRAIN_DISPATCH_SAT(FN, false, ElementFormat::kE5M2, SRC, __VA_ARGS__); \
      }                                                                          \
    }                                                                            \
  } while (0)

void Rowwise(const QuantSource& src, int64_t row0, int64_t row1, RowwiseOut out) {
  DCheckRowwise(src, row0, row1, out);
  MXTRAIN_DISPATCH_TYPES(RowwiseT, src, src, row0, row1, out);
}
void Colwise(const QuantSource& src, const ColStrip& strip, ColwiseOut out, Workspace workspace) {
  DCheckColwise(src, strip, out, workspace);
  MXTRAIN_DISPATCH_TYPES(ColwiseT, src, src, strip, out, workspace.data);
}
void Dual(const QuantSource& src, const ColStrip& strip, RowwiseOut row_out, ColwiseOut col_out,
          Workspace workspace) {
  DCheckDual(src, strip, row_out, col_out, workspace);
  MXTRAIN_DISPATCH_TYPES(DualT, src, src, strip, row_out, col_out, workspace.data);
}
#undef MXTRAIN_DISPATCH_TYPES
#undef MXTRAIN_DISPATCH_SAT

template <ElementFormat kFormat>
void EncodeT(const float* in, uint8_t* out, size_t count) {
  const size_t n = hn::Lanes(DF());
  size_t i = 0;
  for (; i + n <= count; i += n) {
    StoreCodes(EncodeV<kFormat, /*kFinite=*/false>(hn::LoadU(DF(), in + i)), out + i);
  }
  for (; i < count; ++i) out[i] = EncodeElement(kFormat, in[i]);
}

void Encode(ElementFormat format, const float* in, uint8_t* out, size_t count) {
  MXTRAIN_DCHECK(count == 0 || (in != nullptr && out != nullptr));
  if (format == ElementFormat::kE4M3) {
    EncodeT<ElementFormat::kE4M3>(in, out, count);
  } else {
    EncodeT<ElementFormat::kE5M2>(in, out, count);
  }
}

const QuantKernels* GetQuantKernels() {
  static const QuantKernels kernels = {
      hwy::TargetName(HWY_TARGET), &Rowwise, &Colwise, &Dual, &Encode, kDualStreamsRows};
  return &kernels;
}

}  // namespace HWY_NAMESPACE
}  // namespace mxtrain::internal
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
#include "mxtrain/error.h"
#include "simd_internal.h"

namespace mxtrain::internal {

HWY_EXPORT(GetQuantKernels);

const QuantKernels& CurrentQuantKernels() {
  EnsureSimdTargetChosen();
  return *HWY_DYNAMIC_DISPATCH(GetQuantKernels)();
}

namespace {

// One compiled target's table, called in that target's namespace (Highway's N_<TARGET>)
// rather than through the dispatch table: several threads may each hold another target's
// kernels at once, which the process-wide choice of simd.h cannot give.
const QuantKernels* KernelsOf(int64_t target) {
#define MXTRAIN_KERNELS_OF(TARGET, NS) \
  if (target == (TARGET)) return NS::GetQuantKernels();
#if HWY_TARGETS & HWY_AVX3_DL
  MXTRAIN_KERNELS_OF(HWY_AVX3_DL, N_AVX3_DL)
#endif
#if HWY_TARGETS & HWY_AVX3
  MXTRAIN_KERNELS_OF(HWY_AVX3, N_AVX3)
#endif
#if HWY_TARGETS & HWY_AVX2
  MXTRAIN_KERNELS_OF(HWY_AVX2, N_AVX2)
#endif
#if HWY_TARGETS & HWY_SSE4
  MXTRAIN_KERNELS_OF(HWY_SSE4, N_SSE4)
#endif
#if HWY_TARGETS & HWY_SSSE3
  MXTRAIN_KERNELS_OF(HWY_SSSE3, N_SSSE3)
#endif
#if HWY_TARGETS & HWY_EMU128
  MXTRAIN_KERNELS_OF(HWY_EMU128, N_EMU128)
#endif
#if HWY_TARGETS & HWY_SCALAR
  MXTRAIN_KERNELS_OF(HWY_SCALAR, N_SCALAR)
#endif
#undef MXTRAIN_KERNELS_OF
  return nullptr;
}

}  // namespace

const QuantKernels& QuantKernelsForTarget(const std::string& name) {
  for (int64_t target : hwy::SupportedAndGeneratedTargets()) {
    if (name != hwy::TargetName(target)) continue;
    if (const QuantKernels* kernels = KernelsOf(target)) return *kernels;
  }
  Fail("unknown or unsupported SIMD target '", name, "'");
}

}  // namespace mxtrain::internal
#endif  // HWY_ONCE
