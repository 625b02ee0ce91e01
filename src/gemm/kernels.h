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
#include "mxtrain/error.h"
#include "mxtrain/gemm.h"
#include "mxtrain/tensor.h"

namespace mxtrain::internal {

// What every GEMM driver (MxGemm, HpGemm) does around its kernel, in one place:
// checks bias, accumulator and output of `o` against an [rows, cols] result (throws Error
// prefixed with `op`);
void CheckGemmOutputOptions(int64_t rows, int64_t cols, const GemmOptions& o, const char* op);
// the fp32 result buffer: the accumulator itself, the given f32 output, or a new tensor
// (zeroed only when no kernel will write it: an empty contraction);
Tensor GemmResultBuffer(int64_t rows, int64_t cols, bool empty_contraction, const GemmOptions& o);
// adds the bias and rounds to the output dtype once (into o.out when given).
Tensor FinishGemm(Tensor c32, const GemmOptions& o, int threads);

inline constexpr int64_t kGemmTile = 16;

// The largest packed B that each thread of a GEMM whose threads split C's rows packs whole
// for itself (gemm_bf16.cc and gemm_simd.cc), rather than a share of one pack that every
// thread then reads: a shared pack's lines, read by the other thread, are in its cache when
// the next call writes them again, and every store then waits for them (a 128 x 128 wgrad
// over 1024 tokens: its bf16 B pack took six times as long on two threads as on one, and
// two threads ran it 1.1x as fast as one). Own copies also need no barrier.
inline constexpr int64_t kPrivateBPackBytes = 512 << 10;

// A bf16 result a kernel may write in place of C's final fp32 values: C + bias rounded
// once (FinishGemm's rounding), for every tile it computes, leaving those tiles of C
// unwritten; it sets `written` when it did. The driver rounds the tiles the kernel skipped.
struct GemmBf16Out {
  uint16_t* data;     // [I, J]
  const float* bias;  // [J], or null
  bool written = false;
};

struct GemmProblem {
  GemmOperand a;  // [I, S]
  GemmOperand b;  // [J, S]
  // Per-row scale statistics; null when all_safe.
  const RowScaleStats* a_stats;
  const RowScaleStats* b_stats;
  float* c;        // [I, J]
  bool overwrite;  // C holds nothing to keep (no accumulator): kernels write, not add
  int threads;
  GemmBf16Out* bf16_out = nullptr;  // null: C only (a kernel may also ignore it)
  bool all_safe = false;            // every tile is exact-safe (AllTilesSafe)
};

// Whether output tile (ti, tj) may use a fast path (all its rows and columns exact-safe).
// The scale ranges of each 16-row tile of A and of B are gathered once, so that a query
// costs O(1) rather than a pass over 32 rows (262144 tiles at 8192 x 8192).
class TileSafety {
 public:
  explicit TileSafety(const GemmProblem& p);
  bool operator()(int64_t ti, int64_t tj) const;

 private:
  struct Range {
    uint8_t min = 255, max = 0;  // min > max: the tile's rows are all zero
    bool nan = false;
  };
  static std::vector<Range> TileRanges(const RowScaleStats& stats, int64_t rows);
  bool all_safe_;
  ElementFormat format_a_, format_b_;
  std::vector<Range> a_, b_;
};

// The blocks of block_rows x block_cols outputs (a grid over C from (0, 0)) that a fast
// path may compute: a block runs only if every 16x16 tile it touches is exact-safe, and
// every tile touched by a block that does not run is marked in `skipped` (so no tile is
// half computed). Returns block_ok, row-major over the block grid.
std::vector<uint8_t> PlanBlocks(const GemmProblem& p, int64_t block_rows, int64_t block_cols,
                                std::vector<uint8_t>& skipped);

// skipped[ti * tiles_j + tj] = 1 for tiles left to the exact path.
using GemmKernel = void (*)(const GemmProblem& p, std::vector<uint8_t>& skipped);

// What every kernel may assume (above), checked at its entry in debug builds
// (MXTRAIN_DCHECK: the dev preset; nothing in release). MxGemm establishes it.
inline void DCheckGemmProblem(const GemmProblem& p, const std::vector<uint8_t>& skipped) {
  MXTRAIN_DCHECK(p.a.s > 0 && p.a.s == p.b.s);
  MXTRAIN_DCHECK(p.a.free > 0 && p.b.free > 0);
  MXTRAIN_DCHECK(p.a.blocks == CeilDiv(p.a.s, kMxBlock) && p.b.blocks == p.a.blocks);
  MXTRAIN_DCHECK(p.a.data != nullptr && p.a.scales != nullptr);
  MXTRAIN_DCHECK(p.b.data != nullptr && p.b.scales != nullptr);
  MXTRAIN_DCHECK(p.all_safe || (p.a_stats != nullptr &&
                                static_cast<int64_t>(p.a_stats->min_scale.size()) == p.a.free));
  MXTRAIN_DCHECK(p.all_safe || (p.b_stats != nullptr &&
                                static_cast<int64_t>(p.b_stats->min_scale.size()) == p.b.free));
  MXTRAIN_DCHECK(p.c != nullptr && p.threads >= 1);
  MXTRAIN_DCHECK(static_cast<int64_t>(skipped.size()) ==
                 CeilDiv(p.a.free, kGemmTile) * CeilDiv(p.b.free, kGemmTile));
}

// Logical rows of an operand as fp32 [rows, s_pad] (scales folded in; rows >= op.free and
// s_pad >= op.s, the rest zero).
Tensor DecodeRowsF32(const GemmOperand& op, int64_t rows, int64_t s_pad, int threads);

void GemmPortable(const GemmProblem& p, std::vector<uint8_t>& skipped);
// Highway fp32 FMA microkernels on the best SIMD target (simd.h).
void GemmSimd(const GemmProblem& p, std::vector<uint8_t>& skipped);
// AMX-BF16; only called when AmxAvailable() (gemm/amx.h).
void GemmAmx(const GemmProblem& p, std::vector<uint8_t>& skipped);
// GemmAmx's driver, packs and microkernel on a model of the tile unit (EmulatedAmxTiles,
// gemm/amx_tiles.h): for tests on CPUs without AMX; only called when
// AmxEmulationAvailable().
void GemmAmxEmulated(const GemmProblem& p, std::vector<uint8_t>& skipped);
// AVX512-BF16 (VDPBF16PS) on the same bf16 packing; only called when
// Avx512Bf16Available() (gemm/amx.h).
void GemmAvx512Bf16(const GemmProblem& p, std::vector<uint8_t>& skipped);

}  // namespace mxtrain::internal
