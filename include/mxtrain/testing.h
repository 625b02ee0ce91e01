// Test hooks: forcing a SIMD target or a GEMM path, and the raw element encoder. For tests,
// benchmarks and the CLI's --simd / --path flags, so that every kernel can be checked and
// timed on one machine; not a stable API, and no other public header includes it. A
// program that never calls these runs what simd.h, gemm.h and hp_gemm.h say it runs: the
// best target and path this CPU (and the MXTRAIN_MAX_* caps) allow.
//
// The forcing functions set process-wide state: not thread-safe, call them between kernel
// calls. The Scoped* guards undo a force when a test (or a benchmark) ends.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "mxtrain/format/element.h"

namespace mxtrain {

// Restricts dispatch to one target from AvailableSimdTargets() (simd.h; case-insensitive);
// throws Error for an unknown or unsupported name.
void ForceSimdTarget(const std::string& name);
// Back to the best supported target.
void ResetSimdTarget();

// AvailableGemmPaths() (gemm.h), and "amx-bf16-emulated" where the CPU has AVX-512BW but
// no AMX (and no cap excludes AMX): the AMX path's driver, packs and microkernel on a model
// of the tile unit that follows Intel's description of each tile instruction, orders of
// magnitude slower than the hardware. So the AMX code is tested on machines without AMX;
// what it proves is the code's logic, not the hardware's timing or the model's fidelity.
std::vector<std::string> TestableGemmPaths();

// Runs every MX GEMM on one path from TestableGemmPaths(); "" = the best one. Throws Error
// for an unknown or unavailable name.
void ForceGemmPath(const std::string& name);

// Runs every high-precision GEMM on one path from AvailableHpGemmPaths() (hp_gemm.h);
// "" = the best one. Throws Error for an unknown or unavailable name.
void ForceHpGemmPath(const std::string& name);

// Encodes n fp32 values to elements with the SIMD encoder of the current target (no
// scaling): the element encoder the quantizers use, so that it can be checked against
// EncodeE4M3 / EncodeE5M2 over every fp32 bit pattern.
void EncodeElements(ElementFormat format, const float* in, uint8_t* out, size_t n);

// ForceSimdTarget(name) for the guard's lifetime, then ResetSimdTarget().
class ScopedSimdTarget {
 public:
  explicit ScopedSimdTarget(const std::string& name) { ForceSimdTarget(name); }
  ~ScopedSimdTarget() { ResetSimdTarget(); }
  ScopedSimdTarget(const ScopedSimdTarget&) = delete;
  ScopedSimdTarget& operator=(const ScopedSimdTarget&) = delete;
};

// ForceGemmPath(name) for the guard's lifetime, then the best path again.
class ScopedGemmPath {
 public:
  explicit ScopedGemmPath(const std::string& name) { ForceGemmPath(name); }
  ~ScopedGemmPath() { ForceGemmPath(""); }
  ScopedGemmPath(const ScopedGemmPath&) = delete;
  ScopedGemmPath& operator=(const ScopedGemmPath&) = delete;
};

// ForceHpGemmPath(name) for the guard's lifetime, then the best path again.
class ScopedHpGemmPath {
 public:
  explicit ScopedHpGemmPath(const std::string& name) { ForceHpGemmPath(name); }
  ~ScopedHpGemmPath() { ForceHpGemmPath(""); }
  ScopedHpGemmPath(const ScopedHpGemmPath&) = delete;
  ScopedHpGemmPath& operator=(const ScopedHpGemmPath&) = delete;
};

}  // namespace mxtrain
