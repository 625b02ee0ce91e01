// The AMX-BF16 peak microbenchmark (mxtrain/bench.h): what the tile unit does when nothing
// but TDPBF16PS runs, the ceiling the MX GEMM's peak_fraction is measured against.
#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <mutex>

#include "gemm/amx.h"
#include "mxtrain/bench/bench.h"

namespace mxtrain {
namespace {

// The 64-byte LDTILECFG operand (palette 1).
struct alignas(64) TileConfig {
  uint8_t palette_id;
  uint8_t start_row;
  uint8_t reserved[14];
  uint16_t colsb[16];
  uint8_t rows[16];
};
static_assert(sizeof(TileConfig) == 64);

constexpr double kFlopsPerInstruction = 2.0 * 16 * 16 * 32;  // 16x16 fp32 += 16x32 . 32x16
constexpr int kInstructionsPerIteration = 4;

// Tiles 0-3 accumulate, 4-5 hold A, 6-7 hold B, all 16 rows x 64 bytes. Each accumulator
// is written every 4th instruction, which covers TDPBF16PS's latency at one instruction
// per 16 cycles, the unit's throughput; nothing is loaded inside the loop.
__attribute__((target("amx-tile,amx-bf16"))) void AmxLoop(int64_t iterations) {
  alignas(64) uint16_t a[2][16 * 32];
  alignas(64) uint16_t b[2][16 * 32];
  alignas(64) float c[4][16 * 16];
  // Small normal bf16 values (2^-8 and 2^-9), so the fp32 sums stay finite and normal
  // however long the loop runs.
  std::fill(&a[0][0], &a[0][0] + 2 * 16 * 32, uint16_t{0x3B80});
  std::fill(&b[0][0], &b[0][0] + 2 * 16 * 32, uint16_t{0x3B00});
  TileConfig cfg{};
  cfg.palette_id = 1;
  for (int t = 0; t < 8; ++t) {
    cfg.rows[t] = 16;
    cfg.colsb[t] = 64;
  }
  // GCC 12 declares _tile_loadconfig as reading only the first 8 bytes of its argument, so
  // the stores into cfg above may be dropped at -O2; an "m" operand on the whole struct
  // keeps them.
  asm volatile("ldtilecfg %0" : : "m"(cfg));
  // The tile intrinsics are asm statements without memory operands: this orders the fills
  // above before the tile loads, and the tile stores below before the reads of c.
  asm volatile("" : : : "memory");
  _tile_loadd(4, a[0], 64);
  _tile_loadd(5, a[1], 64);
  _tile_loadd(6, b[0], 64);
  _tile_loadd(7, b[1], 64);
  _tile_zero(0);
  _tile_zero(1);
  _tile_zero(2);
  _tile_zero(3);
  for (int64_t i = 0; i < iterations; ++i) {
    _tile_dpbf16ps(0, 4, 6);
    _tile_dpbf16ps(1, 4, 7);
    _tile_dpbf16ps(2, 5, 6);
    _tile_dpbf16ps(3, 5, 7);
  }
  _tile_stored(0, c[0], 64);
  _tile_stored(1, c[1], 64);
  _tile_stored(2, c[2], 64);
  _tile_stored(3, c[3], 64);
  asm volatile("" : : : "memory");
  _tile_release();
}

}  // namespace

double RunAmxPeakLoop(int threads, int64_t iterations) {
  if (!internal::AmxAvailable()) return 0.0;
  int team = 0;  // counted, not assumed: OpenMP may give fewer threads than asked for
#pragma omp parallel num_threads(threads) reduction(+ : team)
  {
    AmxLoop(iterations);
    team += 1;
  }
  return kFlopsPerInstruction * kInstructionsPerIteration * static_cast<double>(iterations) * team;
}

std::optional<double> AmxPeakGflops(int threads, bool again) {
  if (!internal::AmxAvailable()) return std::nullopt;
  static std::mutex mutex;
  static std::map<int, double> cache;
  const std::lock_guard<std::mutex> lock(mutex);
  double& best = cache[threads];  // 0 until measured
  if (best > 0.0 && !again) return best;
  // Measured, not computed from a clock rate: on the development VM the two-thread peak
  // has been both twice the one-thread peak (6.3 vs 3.2 TFLOP/s) and about equal to it at
  // different times, as the host places the two vCPUs on separate cores or on one.
  // 2^18 iterations = 2^20 instructions a thread, about 5 ms at 3.2 GHz: long enough to
  // hide the fork and join, short enough to repeat.
  constexpr int64_t kIterations = int64_t{1} << 18;
  best = std::max(best, internal::BestOfRuns([&](int64_t n) { return RunAmxPeakLoop(threads, n); },
                                             kIterations));
  return best;
}

}  // namespace mxtrain
