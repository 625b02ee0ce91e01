// Internal: makes sure Highway has chosen its target before a kernel table is read, so that
// HWY_DYNAMIC_DISPATCH can be resolved once, outside parallel regions.
#pragma once

namespace mxtrain::internal {

void EnsureSimdTargetChosen();

// Whether non-temporal stores of a large output beat ordinary ones on this CPU: measured
// on AMD Zen 4 (columnwise bf16 4096 x 4096, 2 threads: 1.50 -> 1.11 ms), not on the Intel
// Xeon (Sapphire Rapids: 1.07-1.15 -> 1.20-1.22 ms); so true on AMD CPUs only.
bool StreamingStoresPay();

}  // namespace mxtrain::internal
