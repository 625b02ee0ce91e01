// Same-run peaks of the units the GEMM paths run on (mxtrain/bench.h): AMX tiles
// (amx_peak.cc), VDPBF16PS, and fp32 FMA on the current Highway target (fma_peak.cc). The
// MX GEMM's peak_fraction is its GFLOP/s over the peak of the path that actually ran.
#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <mutex>
#include <utility>

#include "gemm/amx.h"
#include "mxtrain/bench/bench.h"
#include "mxtrain/simd.h"

namespace mxtrain {
namespace internal {
// One thread's FMA loop on the current Highway target (fma_peak.cc): the flops done.
double FmaPeakThread(int64_t iterations, float* sink);
}  // namespace internal

namespace {

// 12 independent VDPBF16PS chains (latency 5-6 cycles at up to 2 a cycle), 64 flops each
// (16 lanes x 2 bf16 products, each a multiply and an add). Small normal bf16 values keep
// the fp32 sums finite however long the loop runs.
__attribute__((target("avx512f,avx512bw,avx512bf16"))) double Dpbf16Loop(int64_t iterations,
                                                                         float* sink) {
  constexpr int kChains = 12;
  // Read through volatiles, so that the compiler cannot fold the constant products.
  volatile int16_t a_bits = 0x3B80, b_bits = 0x3B00;  // 2^-8, 2^-9
  const __m512bh a = (__m512bh)_mm512_set1_epi16(a_bits);
  const __m512bh b = (__m512bh)_mm512_set1_epi16(b_bits);
  __m512 acc[kChains];
  for (int c = 0; c < kChains; ++c) acc[c] = _mm512_set1_ps(static_cast<float>(c));
  for (int64_t i = 0; i < iterations; ++i) {
    for (int c = 0; c < kChains; ++c) acc[c] = _mm512_dpbf16_ps(acc[c], a, b);
  }
  __m512 sum = acc[0];
  for (int c = 1; c < kChains; ++c) sum = _mm512_add_ps(sum, acc[c]);
  // A store and a scalar sum: GCC 12's _mm512_reduce_add_ps warns of an uninitialized
  // temporary of its own.
  alignas(64) float lanes[16];
  _mm512_store_ps(lanes, sum);
  float total = 0;
  for (float v : lanes) total += v;
  *sink = total;
  return 64.0 * kChains * static_cast<double>(iterations);
}

// `loop` on every thread of a team of `threads`: the flops of all of them (counted, not
// assumed: OpenMP may give fewer threads than asked for).
double OnEveryThread(int threads, int64_t iterations, double (*loop)(int64_t, float*)) {
  double flops = 0;
  float sink = 0;
#pragma omp parallel num_threads(threads) reduction(+ : flops, sink)
  {
    float mine = 0;
    flops += loop(iterations, &mine);
    sink += mine;
  }
  return sink == sink ? flops : 0.0;  // never NaN; keeps the sums alive
}

}  // namespace

namespace internal {
double BestOfRuns(const std::function<double(int64_t)>& run, int64_t iterations) {
  using Clock = std::chrono::steady_clock;
  const auto warm_up_end = Clock::now() + std::chrono::milliseconds(200);
  while (Clock::now() < warm_up_end) run(iterations);
  double best = 0.0;
  for (int rep = 0; rep < 10; ++rep) {
    const auto t0 = Clock::now();
    const double flops = run(iterations);
    const double s = std::chrono::duration<double>(Clock::now() - t0).count();
    best = std::max(best, flops / s * 1e-9);
  }
  return best;
}
}  // namespace internal

double RunPeakLoop(const std::string& kind, int threads, int64_t iterations) {
  if (kind == "amx-bf16") return RunAmxPeakLoop(threads, iterations);
  if (kind == "avx512-bf16") {
    return internal::Avx512Bf16Available() ? OnEveryThread(threads, iterations, &Dpbf16Loop) : 0.0;
  }
  return OnEveryThread(threads, iterations, &internal::FmaPeakThread);
}

std::string PeakKind(const std::string& gemm_path) {
  if (gemm_path == "amx-bf16" || gemm_path == "avx512-bf16") return gemm_path;
  return "fma-f32-" + CurrentSimdTarget();
}

std::optional<PeakResult> PathPeak(const std::string& gemm_path, int threads, bool again) {
  const std::string kind = PeakKind(gemm_path);
  if (kind == "amx-bf16") {
    const std::optional<double> amx = AmxPeakGflops(threads, again);
    if (!amx) return std::nullopt;
    return PeakResult{kind, *amx};
  }
  if (kind == "avx512-bf16" && !internal::Avx512Bf16Available()) return std::nullopt;
  static std::mutex mutex;
  static std::map<std::pair<std::string, int>, double> cache;
  const std::lock_guard<std::mutex> lock(mutex);
  double& best = cache[{kind, threads}];  // 0 until measured
  if (best == 0.0 || again) {
    // 2^20 iterations x 12 instructions a thread: 2-6 ms at 2-4 GHz and 1-2 a cycle, long
    // enough to hide the fork and join, short enough to repeat.
    best = std::max(best,
                    internal::BestOfRuns([&](int64_t n) { return RunPeakLoop(kind, threads, n); },
                                         int64_t{1} << 20));
  }
  return PeakResult{kind, best};
}

}  // namespace mxtrain
