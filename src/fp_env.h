// Internal: the floating-point environment the kernels run in, whatever the caller's.
//
// NUMERICS.md fixes every bit of the quantizers' and the MX GEMMs' results, subnormals
// included, with round-to-nearest-even wherever a value is rounded. Callers often run with
// another SSE environment: flush-to-zero and denormals-are-zero (binaries linked with
// -ffast-math set both at start-up, torch.set_flush_denormal(True) sets them, inference
// runtimes set them on their threads), or a directed rounding mode (fesetround). Each
// would silently change codes, scales and sums: a block of fp32 subnormals quantized to
// zeros, a GEMM tile in the exact path flushed. So every public entry point and every
// OpenMP region body holds a ScopedFpEnv: the thread runs with the IEEE default (MXCSR
// 0x1F80: round to nearest even, no FTZ or DAZ, exceptions masked) and gets its own
// environment back at the end. The MXCSR is per thread and OpenMP's pool threads keep
// theirs from region to region (POSIX threads start with their creator's), hence the
// guard in each region and not only on the calling thread. When the environment is
// already the default, the guard only reads it.
#pragma once

#include <cstdint>

#if defined(__x86_64__) || defined(__i386__) || defined(_M_X64)
#include <xmmintrin.h>
#define MXTRAIN_HAS_MXCSR 1
#else
#define MXTRAIN_HAS_MXCSR 0
#endif

namespace mxtrain::internal {

#if MXTRAIN_HAS_MXCSR
// The control bits of the MXCSR (exception masks, rounding control, FTZ, DAZ) and their
// default; bits 0-5 are the sticky exception flags.
inline constexpr uint32_t kMxcsrControl = 0xFFC0;
inline constexpr uint32_t kMxcsrDefault = 0x1F80;

class ScopedFpEnv {
 public:
  ScopedFpEnv() : saved_(_mm_getcsr()) {
    if ((saved_ & kMxcsrControl) != kMxcsrDefault) {
      _mm_setcsr(kMxcsrDefault | (saved_ & ~kMxcsrControl));
      changed_ = true;
    }
  }
  // The caller's controls back; the flags keep whatever the kernel raised.
  ~ScopedFpEnv() {
    if (changed_) _mm_setcsr((saved_ & kMxcsrControl) | (_mm_getcsr() & ~kMxcsrControl));
  }
  ScopedFpEnv(const ScopedFpEnv&) = delete;
  ScopedFpEnv& operator=(const ScopedFpEnv&) = delete;

 private:
  uint32_t saved_;
  bool changed_ = false;
};
#else
// Other architectures: mxtrain's kernels target x86-64; the portable build runs in the
// caller's environment.
class ScopedFpEnv {
 public:
  ScopedFpEnv() {}  // user-provided: no unused-variable warning at the guards
  ScopedFpEnv(const ScopedFpEnv&) = delete;
  ScopedFpEnv& operator=(const ScopedFpEnv&) = delete;
};
#endif

}  // namespace mxtrain::internal
