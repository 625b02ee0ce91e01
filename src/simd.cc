#include "mxtrain/simd.h"

#include <hwy/targets.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cstdlib>
#include <mutex>

#include "mxtrain/error.h"
#include "mxtrain/testing.h"
#include "simd_internal.h"

namespace mxtrain {
namespace {

std::string Upper(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::toupper(c); });
  return s;
}

std::mutex g_mutex;
// Set (release) once a target is chosen; read without the lock on every kernel call.
std::atomic<bool> g_chosen{false};
bool g_capped = false;
int64_t g_cap = 0;  // the best target MXTRAIN_MAX_SIMD_TARGET allows; 0: no cap

// MXTRAIN_MAX_SIMD_TARGET=NAME (e.g. AVX2): the kernels behave as on a CPU whose best target
// is NAME. Read once, before the first choice of target; ChooseLocked applies it.
void CapTargetsLocked() {
  if (g_capped) return;
  const char* env = std::getenv("MXTRAIN_MAX_SIMD_TARGET");
  if (env != nullptr && *env != '\0') {
    const std::string wanted = Upper(env);
    // Highway numbers its targets so that a lower bit is a better target.
    int64_t cap = 0;
    std::string known;
    for (int bit = 0; bit < 63; ++bit) {
      const int64_t target = int64_t{1} << bit;
      if ((target & HWY_TARGETS) == 0) continue;
      if (wanted == hwy::TargetName(target)) cap = target;
      known += (known.empty() ? "" : ", ") + std::string(hwy::TargetName(target));
    }
    MXTRAIN_CHECK(cap != 0, "MXTRAIN_MAX_SIMD_TARGET='", env,
                  "' names no SIMD target of this build (", known, ")");
    g_cap = cap;
  }
  g_capped = true;
}

// The targets this CPU supports, detected once (0: not yet).
int64_t g_detected = 0;

// Makes `best` (an HWY_* bit; 0: the best the CPU and the cap allow) the target the kernels
// use. The allowed set is kept as Highway's target mock (SetSupportedTargetsForTest), not as
// DisableTargets: without a mock, Highway 1.0.3's SupportedTargets() detects the CPU again
// and resets the chosen target to everything detected, so any later call that lists the
// targets (CurrentSimdTarget, AvailableSimdTargets) would undo a cap or a forced target.
// With the mock set, SupportedTargets() just returns it.
void ChooseLocked(int64_t best) {
  CapTargetsLocked();
  if (g_detected == 0) {
    hwy::SetSupportedTargetsForTest(0);
    g_detected = hwy::SupportedTargets();
  }
  int64_t allowed = g_detected;
  if (g_cap != 0) allowed &= ~(g_cap - 1);  // every target better than the cap
  hwy::SetSupportedTargetsForTest(best != 0 ? best : allowed);
  hwy::GetChosenTarget().Update(hwy::SupportedTargets());
  g_chosen.store(true, std::memory_order_release);
}

}  // namespace

namespace internal {
void EnsureSimdTargetChosen() {
  // Without the lock once chosen: small kernels (ExpF32 on one softmax row) call this from
  // every thread, and the mutex had become 0.8% of a training step.
  if (g_chosen.load(std::memory_order_acquire)) return;
  std::lock_guard<std::mutex> lock(g_mutex);
  if (!g_chosen.load(std::memory_order_relaxed)) ChooseLocked(0);
}

bool SimdCapAllows(int64_t target) {
  std::lock_guard<std::mutex> lock(g_mutex);
  CapTargetsLocked();
  return g_cap == 0 || target >= g_cap;
}

int64_t L2CacheBytes() {
  static const int64_t bytes = [] {
    const long l2 = sysconf(_SC_LEVEL2_CACHE_SIZE);
    return l2 > 0 ? static_cast<int64_t>(l2) : int64_t{1} << 20;
  }();
  return bytes;
}
}  // namespace internal

std::vector<std::string> AvailableSimdTargets() {
  internal::EnsureSimdTargetChosen();
  std::vector<std::string> names;
  for (int64_t t : hwy::SupportedAndGeneratedTargets()) names.emplace_back(hwy::TargetName(t));
  return names;
}

std::string CurrentSimdTarget() {
  internal::EnsureSimdTargetChosen();
  // The chosen target is the best one among those currently supported (and generated).
  const std::vector<int64_t> targets = hwy::SupportedAndGeneratedTargets();
  return targets.empty() ? "none" : hwy::TargetName(targets.front());
}

void ForceSimdTarget(const std::string& name) {
  const std::string wanted = Upper(name);
  std::lock_guard<std::mutex> lock(g_mutex);
  ChooseLocked(0);  // clear any earlier choice before looking the name up
  std::string known;
  for (int64_t t : hwy::SupportedAndGeneratedTargets()) {
    if (wanted == hwy::TargetName(t)) {
      ChooseLocked(t);
      return;
    }
    known += (known.empty() ? "" : ", ") + std::string(hwy::TargetName(t));
  }
  Fail("unknown or unsupported SIMD target '", name, "' (available: ", known, ")");
}

void ResetSimdTarget() {
  std::lock_guard<std::mutex> lock(g_mutex);
  ChooseLocked(0);
}

}  // namespace mxtrain
