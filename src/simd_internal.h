// Internal: makes sure Highway has chosen its target before a kernel table is read, so that
// HWY_DYNAMIC_DISPATCH can be resolved once, outside parallel regions.
#pragma once

namespace mxtrain::internal {

void EnsureSimdTargetChosen();

}  // namespace mxtrain::internal
