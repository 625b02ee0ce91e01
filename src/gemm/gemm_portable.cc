// The portable GEMM path: operands decoded once to fp32 rows (scales folded in, exact for
// safe rows), then fp32 dot products per 16x16 tile, vectorized by the compiler.
#include <omp.h>

#include <algorithm>
#include <array>

#include "fp_env.h"
#include "gemm/kernels.h"
#include "mxtrain/tensor.h"

namespace mxtrain::internal {
Tensor DecodeRowsF32(const GemmOperand& op, int64_t rows, int64_t s_pad, int threads) {
  MXTRAIN_DCHECK(rows >= op.free && s_pad >= op.s);
  std::array<float, 256> table;
  for (int c = 0; c < 256; ++c) table[c] = DecodeElement(op.format, static_cast<uint8_t>(c));
  Tensor out = Tensor::Zeros(DType::kF32, {rows, s_pad}, MemoryCategory::kWorkspace);
  float* dst = out.mutable_data<float>();
#pragma omp parallel num_threads(threads)
  {
    const internal::ScopedFpEnv fp_env;
#pragma omp for schedule(static)
    for (int64_t f = 0; f < op.free; ++f) {
      for (int64_t k = 0; k < op.s; ++k) {
        dst[f * s_pad + k] = table[op.Code(f, k)] * DecodeE8M0(op.Scale(f, k / kMxBlock));
      }
    }
  }
  return out;
}

void GemmPortable(const GemmProblem& p, std::vector<uint8_t>& skipped) {
  DCheckGemmProblem(p, skipped);
  const int64_t s_pad = CeilDiv(p.a.s, 16) * 16;
  const Tensor a = DecodeRowsF32(p.a, p.a.free, s_pad, p.threads);
  const Tensor b = DecodeRowsF32(p.b, p.b.free, s_pad, p.threads);
  const int64_t tiles_i = CeilDiv(p.a.free, kGemmTile);
  const int64_t tiles_j = CeilDiv(p.b.free, kGemmTile);
  const int64_t cols = p.b.free;
  const TileSafety tile_safe(p);
#pragma omp parallel num_threads(p.threads)
  {
    const internal::ScopedFpEnv fp_env;
#pragma omp for schedule(dynamic)
    for (int64_t t = 0; t < tiles_i * tiles_j; ++t) {
      const int64_t ti = t / tiles_j, tj = t % tiles_j;
      if (!tile_safe(ti, tj)) {
        skipped[t] = 1;
        continue;
      }
      for (int64_t i = ti * kGemmTile; i < std::min(p.a.free, (ti + 1) * kGemmTile); ++i) {
        const float* ar = a.const_data<float>() + i * s_pad;
        for (int64_t j = tj * kGemmTile; j < std::min(cols, (tj + 1) * kGemmTile); ++j) {
          const float* br = b.const_data<float>() + j * s_pad;
          float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
          for (int64_t k = 0; k < s_pad; ++k) sum += ar[k] * br[k];
          p.c[i * cols + j] = (p.overwrite ? 0.0f : p.c[i * cols + j]) + sum;
        }
      }
    }
  }
}

}  // namespace mxtrain::internal
