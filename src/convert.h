// Internal: fp32 -> bf16 narrowing a vector at a time (Highway, every target), for the
// GEMMs' bf16 outputs and CastTo, and rounding to bf16 within fp32. Each value is rounded
// as F32ToBf16 (format/bf16.h) does, bit for bit: to nearest, ties to even, NaN kept a
// quiet NaN with its sign.
#pragma once

#include <cstdint>

namespace mxtrain::internal {

// dst[j] = bf16(src[j] + bias[j]) for j < n (the fp32 sum rounded once), or bf16(src[j])
// without a bias. Call EnsureSimdTargetChosen() (simd_internal.h) before a parallel region
// that calls this.
void NarrowToBf16(const float* src, int64_t n, const float* bias, uint16_t* dst);

// dst[j] = Bf16ToF32(F32ToBf16(src[j])) for j < n: fp32 values rounded to bf16's precision
// in one pass (the bf16 route's operands on an fp32 GEMM). The same call order rule as
// NarrowToBf16.
void RoundToBf16(const float* src, int64_t n, float* dst);

}  // namespace mxtrain::internal
