// Internal: makes sure Highway has chosen its target before a kernel table is read, so that
// HWY_DYNAMIC_DISPATCH can be resolved once, outside parallel regions.
#pragma once

#include <cstdint>

namespace mxtrain::internal {

void EnsureSimdTargetChosen();

// Whether MXTRAIN_MAX_SIMD_TARGET (simd.h) leaves the Highway target `target` (an HWY_*
// bit) to this process: true without a cap. Kernels outside Highway that need an ISA (the
// AVX-512 GEMM paths) ask it, so that a capped process imitates a smaller CPU whole.
bool SimdCapAllows(int64_t target);

// The L2 cache of one core in bytes (sysconf), or 1 MiB where the system does not say.
int64_t L2CacheBytes();

}  // namespace mxtrain::internal
