// Which SIMD target the kernels run. By default the best one the CPU supports; tests and
// benchmarks can force any compiled target (AVX3_DL = AVX-512 with VBMI, AVX3 = AVX-512,
// AVX2, SSE4, SSSE3, SCALAR: the portable path) to check each of them on one machine.
#pragma once

#include <string>
#include <vector>

namespace mxtrain {

// Targets compiled into the library and supported by this CPU, best first ("AVX3_DL",
// "AVX3", ...).
std::vector<std::string> AvailableSimdTargets();
// The target the next kernel call will use.
std::string CurrentSimdTarget();
// Restricts dispatch to one target from AvailableSimdTargets() (case-insensitive); throws
// Error for an unknown or unsupported name. Not thread-safe: call between kernel calls.
void ForceSimdTarget(const std::string& name);
// Back to the best supported target.
void ResetSimdTarget();

}  // namespace mxtrain
