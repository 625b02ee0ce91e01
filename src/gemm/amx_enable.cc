#include <cpuid.h>
#include <hwy/detect_targets.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "gemm/amx.h"
#include "simd_internal.h"

namespace mxtrain::internal {
namespace {

constexpr int kArchReqXcompPerm = 0x1023;
constexpr int kXfeatureXtiledata = 18;

bool CheckAndRequest() {
  unsigned eax, ebx, ecx, edx;
  if (!__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx)) return false;
  const bool amx_bf16 = (edx >> 22) & 1;
  const bool amx_tile = (edx >> 24) & 1;
  if (!amx_bf16 || !amx_tile) return false;
  return syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0;
}

// AVX512F and AVX512BW on the CPU, and no SIMD cap below AVX-512 (simd.h): what the bf16
// packs need. __builtin_cpu_supports also checks that the OS saves the zmm state (XCR0).
bool Avx512BwAllowed() {
  return SimdCapAllows(HWY_AVX3) && __builtin_cpu_supports("avx512f") &&
         __builtin_cpu_supports("avx512bw");
}

}  // namespace

// Both units need AVX-512 around them, so a process capped below Highway's AVX3 target
// (MXTRAIN_MAX_SIMD_TARGET, simd.h) behaves as on a CPU without them.
bool AmxAvailable() {
  static const bool available = SimdCapAllows(HWY_AVX3) && CheckAndRequest();
  return available;
}

bool AmxEmulationAvailable() {
  static const bool available = Avx512BwAllowed() && !AmxAvailable();
  return available;
}

bool Avx512Bf16Available() {
  static const bool available = Avx512BwAllowed() && __builtin_cpu_supports("avx512bf16");
  return available;
}

}  // namespace mxtrain::internal
