// The SIMD fp32 GEMM path (Highway: AVX-512, AVX2, SSE4, ... FMA where the target has it),
// for machines without AMX. Operands are decoded once to fp32 with the scales folded in
// (exact for the exact-safe tiles this path computes): A as rows [I, S], B transposed to
// [S, J] so that a 4-row x 2-vector block of C accumulates A[i][k] * B^T[k][j..] in eight
// registers per K step.

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "gemm/gemm_simd.cc"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>
#include <omp.h>

#include <algorithm>
#include <array>

#include "gemm/kernels.h"

HWY_BEFORE_NAMESPACE();
namespace mxtrain::internal {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

constexpr int64_t kRows = 4;

// C[i0 .. i0 + rows, j0 .. j0 + 2 n) (+)= A . B^T over S, with bt = B^T [S, ld_bt].
void Block(const float* a, int64_t s, const float* bt, int64_t ld_bt, float* c, int64_t ldc,
           int64_t rows, int64_t width, bool overwrite) {
  const hn::ScalableTag<float> d;
  const int64_t n = static_cast<int64_t>(hn::Lanes(d));
  using V = hn::Vec<decltype(d)>;
  V acc[kRows][2];
  for (int64_t r = 0; r < kRows; ++r) acc[r][0] = acc[r][1] = hn::Zero(d);
  for (int64_t k = 0; k < s; ++k) {
    const V b0 = hn::LoadU(d, bt + k * ld_bt);
    const V b1 = hn::LoadU(d, bt + k * ld_bt + n);
    for (int64_t r = 0; r < kRows; ++r) {
      const V av = hn::Set(d, a[r * s + k]);
      acc[r][0] = hn::MulAdd(av, b0, acc[r][0]);
      acc[r][1] = hn::MulAdd(av, b1, acc[r][1]);
    }
  }
  alignas(64) float out[2 * 64];
  for (int64_t r = 0; r < rows; ++r) {
    hn::StoreU(acc[r][0], d, out);
    hn::StoreU(acc[r][1], d, out + n);
    for (int64_t j = 0; j < width; ++j)
      c[r * ldc + j] = (overwrite ? 0.0f : c[r * ldc + j]) + out[j];
  }
}

int64_t BlockWidth() { return 2 * static_cast<int64_t>(hn::Lanes(hn::ScalableTag<float>())); }

}  // namespace HWY_NAMESPACE
}  // namespace mxtrain::internal
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
#include "simd_internal.h"

namespace mxtrain::internal {

HWY_EXPORT(Block);
HWY_EXPORT(BlockWidth);

void GemmSimd(const GemmProblem& p, std::vector<uint8_t>& skipped) {
  EnsureSimdTargetChosen();
  auto* const block = &HWY_DYNAMIC_DISPATCH(Block);
  const int64_t width = HWY_DYNAMIC_DISPATCH(BlockWidth)();
  constexpr int64_t kBlockRows = 4;
  const int64_t rows = p.a.free, cols = p.b.free, s = p.a.s;
  const int64_t rows_pad = CeilDiv(rows, kBlockRows) * kBlockRows;
  const int64_t cols_pad = CeilDiv(cols, width) * width;

  const int64_t blocks_i = rows_pad / kBlockRows, blocks_j = cols_pad / width;
  const std::vector<uint8_t> block_ok = PlanBlocks(p, kBlockRows, width, skipped);

  const Tensor a = DecodeRowsF32(p.a, rows_pad, s, p.threads);
  const float* ad = a.data<float>();
  std::array<float, 256> table_b;
  for (int c = 0; c < 256; ++c) table_b[c] = DecodeElement(p.b.format, static_cast<uint8_t>(c));
  // B transposed to [S, J]: the microkernel loads a row of it per K step.
  Tensor bt = Tensor::Zeros(DType::kF32, {s, cols_pad}, MemoryCategory::kWorkspace);
  float* bd = bt.data<float>();
#pragma omp parallel for num_threads(p.threads) schedule(static)
  for (int64_t k = 0; k < s; ++k) {
    for (int64_t f = 0; f < cols; ++f) {
      bd[k * cols_pad + f] = table_b[p.b.Code(f, k)] * DecodeE8M0(p.b.Scale(f, k / kMxBlock));
    }
  }
#pragma omp parallel for num_threads(p.threads) schedule(dynamic)
  for (int64_t blk = 0; blk < blocks_i * blocks_j; ++blk) {
    if (!block_ok[blk]) continue;
    const int64_t bi = blk / blocks_j, bj = blk % blocks_j;
    const int64_t i0 = bi * kBlockRows, j0 = bj * width;
    if (i0 >= rows) continue;
    (*block)(ad + i0 * s, s, bd + j0, cols_pad, p.c + i0 * cols + j0, cols,
             std::min(kBlockRows, rows - i0), std::min(width, cols - j0), p.overwrite);
  }
}

}  // namespace mxtrain::internal
#endif
