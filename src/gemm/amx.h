// Internal: availability of the bf16 dot-product units. AMX: Linux hands out the AMX tile
// state only to processes that ask for it (arch_prctl ARCH_REQ_XCOMP_PERM for
// XFEATURE_XTILEDATA); this asks once.
#pragma once

namespace mxtrain::internal {

// True when the CPU has AMX-TILE and AMX-BF16 and the OS granted the tile state (and no
// SIMD cap below AVX-512 is set: simd.h).
bool AmxAvailable();
// True when the AMX path can run with its tile unit emulated (GemmAmxEmulated): the CPU has
// AVX512F and AVX512BW (the packs' ISA) but no AMX, and no SIMD cap below AVX-512 is set.
bool AmxEmulationAvailable();
// True when the CPU (and OS) has AVX512F, AVX512BW and AVX512-BF16 (VDPBF16PS).
bool Avx512Bf16Available();

}  // namespace mxtrain::internal
