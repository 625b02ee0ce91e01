// Which SIMD target the kernels run: the best one the CPU supports among those compiled
// (AVX3_DL = AVX-512 with VBMI, AVX3 = AVX-512, AVX2, SSE4, SSSE3, SCALAR: the portable
// path). Tests and benchmarks can force any of them to check each on one machine
// (ForceSimdTarget, testing.h).
//
// The environment variable MXTRAIN_MAX_SIMD_TARGET=NAME (e.g. AVX2), read once per
// process, makes the process behave as on a CPU whose best target is NAME: better targets
// are not available (to the kernels, to AvailableSimdTargets and to ForceSimdTarget), and
// neither are the GEMM paths that need AVX-512 (gemm.h). With ONEDNN_MAX_CPU_ISA=AVX2 and
// MXTRAIN_MAX_GEMM_PATH=simd-f32 it imitates an AVX2-only machine on a larger one (the ctest label
// `cpu_caps`).
#pragma once

#include <string>
#include <vector>

namespace mxtrain {

// Targets compiled into the library and supported by this CPU, best first ("AVX3_DL",
// "AVX3", ...).
std::vector<std::string> AvailableSimdTargets();
// The target the next kernel call will use.
std::string CurrentSimdTarget();

}  // namespace mxtrain
