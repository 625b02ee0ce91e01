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

// Whether non-temporal stores of a large output beat ordinary ones on this CPU: measured
// on AMD Zen 4 (columnwise bf16 4096 x 4096, 2 threads: 1.50 -> 1.11 ms), not on the Intel
// Xeon (Sapphire Rapids: 1.07-1.15 -> 1.20-1.22 ms); so true on AMD CPUs only.
bool StreamingStoresPay();

// The L2 cache of one core in bytes (sysconf), or 1 MiB where the system does not say.
int64_t L2CacheBytes();

}  // namespace mxtrain::internal
