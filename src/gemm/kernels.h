// Internal: the GEMM paths. Each computes C[I, J] (fp32, row-major) = A . B^T (overwrite)
// or C += A . B^T (accumulate) for every 16x16 output tile whose operand rows are all
// exact-safe (operand.h), and marks the tiles it skipped; the driver computes those with
// the exact path. S > 0 and I, J > 0 when a kernel is called.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "gemm/amx.h"
#include "gemm/operand.h"

namespace mxtrain::internal {

inline constexpr int64_t kGemmTile = 16;

struct GemmProblem {
  GemmOperand a;  // [I, S]
  GemmOperand b;  // [J, S]
  const RowScaleStats* a_stats;
  const RowScaleStats* b_stats;
  float* c;       // [I, J]
  bool overwrite; // C holds nothing to keep (no accumulator): kernels write, not add
  int threads;
};

// Whether output tile (ti, tj) may use a fast path (all its rows and columns exact-safe).
bool TileIsSafe(const GemmProblem& p, int64_t ti, int64_t tj);

// skipped[ti * tiles_j + tj] = 1 for tiles left to the exact path.
using GemmKernel = void (*)(const GemmProblem& p, std::vector<uint8_t>& skipped);

void GemmPortable(const GemmProblem& p, std::vector<uint8_t>& skipped);
// Highway fp32 FMA microkernels on the best SIMD target (simd.h).
void GemmSimd(const GemmProblem& p, std::vector<uint8_t>& skipped);
// AMX-BF16; only called when AmxAvailable() (gemm/amx.h).
void GemmAmx(const GemmProblem& p, std::vector<uint8_t>& skipped);

}  // namespace mxtrain::internal
