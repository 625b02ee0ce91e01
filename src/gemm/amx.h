// Internal: AMX availability. Linux hands out the AMX tile state only to processes that
// ask for it (arch_prctl ARCH_REQ_XCOMP_PERM for XFEATURE_XTILEDATA); this asks once.
#pragma once

namespace mxtrain::internal {

// True when the CPU has AMX-TILE and AMX-BF16 and the OS granted the tile state.
bool AmxAvailable();

}  // namespace mxtrain::internal
