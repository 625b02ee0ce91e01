// Internal: fp32 -> bf16 narrowing a vector at a time (Highway, every target), for the
// GEMMs' bf16 outputs and CastTo. Each value is rounded as F32ToBf16 (format/bf16.h) does,
// bit for bit: to nearest, ties to even, NaN kept a quiet NaN with its sign.
#pragma once

#include <cstdint>

namespace mxtrain::internal {

// dst[j] = bf16(src[j] + bias[j]) for j < n (the fp32 sum rounded once), or bf16(src[j])
// without a bias. Call EnsureSimdTargetChosen() (simd_internal.h) before a parallel region
// that calls this.
void NarrowToBf16(const float* src, int64_t n, const float* bias, uint16_t* dst);

}  // namespace mxtrain::internal
