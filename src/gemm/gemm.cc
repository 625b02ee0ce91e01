// MX GEMM drivers: validation, the choice of path, the exact path for tiles no fast path
// may take, bias, accumulation and output rounding; grouped GEMM as per-group dense GEMMs.
#include "mxtrain/gemm.h"

#include <omp.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <mutex>

#include "convert.h"
#include "fp_env.h"
#include "gemm/kernels.h"
#include "mxtrain/error.h"
#include "mxtrain/testing.h"
#include "omp_threads.h"
#include "simd_internal.h"

namespace mxtrain {
namespace {

using internal::GemmOperand;
using internal::GemmProblem;
using internal::RowScaleStats;

std::mutex g_path_mutex;
std::string g_forced_path;

// The value of element (f, k) of an operand as a double: element times 2^(scale - 127).
double Decoded(const GemmOperand& op, int64_t f, int64_t k) {
  const uint8_t b = op.Scale(f, k / kMxBlock);
  if (b == kE8M0NaN) return NAN;
  return std::ldexp(static_cast<double>(DecodeElement(op.format, op.Code(f, k))), b - 127);
}

// Exact dot product of row i of A and row j of B (double; exact for MX operands up to
// double's 53 bits, far beyond the fp32 result).
double ExactDot(const GemmOperand& a, const GemmOperand& b, int64_t i, int64_t j) {
  double sum = 0.0;
  for (int64_t k = 0; k < a.s; ++k) sum += Decoded(a, i, k) * Decoded(b, j, k);
  return sum;
}

struct Checked {
  GemmOperand a, b;
};

Checked CheckOperands(const MxTensor& a, const MxTensor& b, const GemmOptions& o) {
  Checked c{GemmOperand::Of(a, "A"), GemmOperand::Of(b, "B")};
  MXTRAIN_CHECK(c.a.s == c.b.s, "gemm: contraction lengths differ: A (", Name(a.axis()), " ",
                a.shape().ToString(), ") contracts ", c.a.s, ", B (", Name(b.axis()), " ",
                b.shape().ToString(), ") contracts ", c.b.s);
  internal::CheckGemmOutputOptions(c.a.free, c.b.free, o, "gemm");
  return c;
}

Tensor ResultBuffer(const Checked& c, const GemmOptions& o) {
  return internal::GemmResultBuffer(c.a.free, c.b.free, c.a.s == 0, o);
}

internal::GemmKernel ChooseKernel() {
  const std::string path = CurrentGemmPath();
  if (path == "amx-bf16") return &internal::GemmAmx;
  if (path == "amx-bf16-emulated") return &internal::GemmAmxEmulated;
  if (path == "avx512-bf16") return &internal::GemmAvx512Bf16;
  if (path == "simd-f32") return &internal::GemmSimd;
  return &internal::GemmPortable;
}

}  // namespace

namespace internal {

void CheckGemmOutputOptions(int64_t rows, int64_t cols, const GemmOptions& o, const char* op) {
  MXTRAIN_CHECK(o.out_dtype == DType::kF32 || o.out_dtype == DType::kBF16, op,
                ": output dtype must be f32 or bf16, got ", Name(o.out_dtype));
  const Shape c_shape{rows, cols};
  if (o.bias != nullptr) {
    MXTRAIN_CHECK(
        o.bias->defined() && o.bias->dtype() == DType::kF32 && o.bias->shape() == Shape{cols}, op,
        ": bias must be f32 of shape [", cols, "]");
  }
  if (o.accumulate != nullptr) {
    MXTRAIN_CHECK(o.accumulate->defined() && o.accumulate->dtype() == DType::kF32 &&
                      o.accumulate->shape() == c_shape,
                  op, ": accumulator must be f32 of shape ", c_shape.ToString());
    MXTRAIN_CHECK(o.out_dtype == DType::kF32, op, ": accumulation needs an f32 output");
  }
  if (o.out != nullptr) {
    MXTRAIN_CHECK(o.accumulate == nullptr, op, ": give an output or an accumulator, not both");
    MXTRAIN_CHECK(o.out->defined() && o.out->dtype() == o.out_dtype && o.out->shape() == c_shape,
                  op, ": output must be ", Name(o.out_dtype), " of shape ", c_shape.ToString());
  }
}

Tensor GemmResultBuffer(int64_t rows, int64_t cols, bool empty_contraction, const GemmOptions& o) {
  if (o.accumulate != nullptr) return *o.accumulate;
  Tensor buffer = o.out != nullptr && o.out_dtype == DType::kF32
                      ? *o.out
                      : Tensor::Empty(DType::kF32, {rows, cols}, o.category);
  if (empty_contraction) std::memset(buffer.raw(), 0, buffer.NumBytes());
  return buffer;
}

Tensor FinishGemm(Tensor c32, const GemmOptions& o, int threads) {
  const int64_t rows = c32.shape()[0], cols = c32.shape()[1];
  float* c = c32.mutable_data<float>();
  const float* bias = o.bias != nullptr ? o.bias->const_data<float>() : nullptr;
  if (o.out_dtype == DType::kF32) {
    if (bias == nullptr) return c32;
#pragma omp parallel num_threads(threads)
    {
      const internal::ScopedFpEnv fp_env;
#pragma omp for schedule(static)
      for (int64_t i = 0; i < rows; ++i) {
        for (int64_t j = 0; j < cols; ++j) c[i * cols + j] += bias[j];
      }
    }
    return c32;
  }
  // bf16: C + bias rounded once, a row at a time, in one pass.
  Tensor out = o.out != nullptr ? *o.out : Tensor::Empty(DType::kBF16, c32.shape(), o.category);
  uint16_t* dst = out.mutable_data<uint16_t>();
  EnsureSimdTargetChosen();
#pragma omp parallel num_threads(threads)
  {
    const internal::ScopedFpEnv fp_env;
#pragma omp for schedule(static)
    for (int64_t i = 0; i < rows; ++i) NarrowToBf16(c + i * cols, cols, bias, dst + i * cols);
  }
  return out;
}

std::vector<TileSafety::Range> TileSafety::TileRanges(const RowScaleStats& stats, int64_t rows) {
  std::vector<Range> tiles(static_cast<size_t>(CeilDiv(rows, kGemmTile)));
  for (int64_t i = 0; i < rows; ++i) {
    Range& t = tiles[i / kGemmTile];
    t.nan = t.nan || stats.has_nan[i];
    t.min = std::min(t.min, stats.min_scale[i]);
    t.max = std::max(t.max, stats.max_scale[i]);
  }
  return tiles;
}

TileSafety::TileSafety(const GemmProblem& p)
    : all_safe_(p.all_safe),
      format_a_(p.a.format),
      format_b_(p.b.format),
      a_(p.all_safe ? std::vector<Range>() : TileRanges(*p.a_stats, p.a.free)),
      b_(p.all_safe ? std::vector<Range>() : TileRanges(*p.b_stats, p.b.free)) {}

bool TileSafety::operator()(int64_t ti, int64_t tj) const {
  if (all_safe_) return true;
  const Range& a = a_[ti];
  const Range& b = b_[tj];
  return !a.nan && !b.nan && ProductsAreExact(format_a_, a.min, a.max, format_b_, b.min, b.max);
}

std::vector<uint8_t> PlanBlocks(const GemmProblem& p, int64_t block_rows, int64_t block_cols,
                                std::vector<uint8_t>& skipped) {
  const int64_t tiles_i = CeilDiv(p.a.free, kGemmTile), tiles_j = CeilDiv(p.b.free, kGemmTile);
  MXTRAIN_DCHECK(block_rows > 0 && block_cols > 0);
  MXTRAIN_DCHECK(static_cast<int64_t>(skipped.size()) == tiles_i * tiles_j);
  const int64_t blocks_i = CeilDiv(p.a.free, block_rows), blocks_j = CeilDiv(p.b.free, block_cols);
  const auto is_set = [](uint8_t v) { return v != 0; };
  if (p.all_safe && std::none_of(skipped.begin(), skipped.end(), is_set)) {
    return std::vector<uint8_t>(static_cast<size_t>(blocks_i * blocks_j), 1);
  }
  const TileSafety tile_safe(p);
  std::vector<uint8_t> safe(static_cast<size_t>(tiles_i * tiles_j));
  for (int64_t ti = 0; ti < tiles_i; ++ti) {
    for (int64_t tj = 0; tj < tiles_j; ++tj) safe[ti * tiles_j + tj] = tile_safe(ti, tj);
  }
  // Calls fn(tile index) for every tile block (bi, bj) touches.
  const auto for_tiles = [&](int64_t bi, int64_t bj, auto&& fn) {
    const int64_t ti1 = std::min(tiles_i - 1, ((bi + 1) * block_rows - 1) / kGemmTile);
    const int64_t tj1 = std::min(tiles_j - 1, ((bj + 1) * block_cols - 1) / kGemmTile);
    for (int64_t ti = bi * block_rows / kGemmTile; ti <= ti1; ++ti) {
      for (int64_t tj = bj * block_cols / kGemmTile; tj <= tj1; ++tj) fn(ti * tiles_j + tj);
    }
  };
  std::vector<uint8_t> block_ok(static_cast<size_t>(blocks_i * blocks_j), 1);
  // The common case, every tile safe and none skipped yet: every block is ok (walking the
  // blocks' tiles cost ~1% of a small model's training step).
  if (std::all_of(safe.begin(), safe.end(), is_set) &&
      std::none_of(skipped.begin(), skipped.end(), is_set)) {
    return block_ok;
  }
  for (int64_t b = 0; b < blocks_i * blocks_j; ++b) {
    for_tiles(b / blocks_j, b % blocks_j, [&](int64_t t) { block_ok[b] &= safe[t]; });
  }
  // Every tile of a block the kernel leaves goes to the exact path, and every block touching
  // such a tile is left, until nothing changes: where blocks and tiles do not align (the
  // simd-f32 path's 6- or 14-row blocks over 16-row tiles) a left block reaches into the
  // next tile, whose other blocks then reach further, up to a row where both align (48 or
  // 112 rows). One round of each left rows of such a block to no one (their tile never
  // listed): zeros, or the accumulator, in the result.
  for (bool changed = true; changed;) {
    changed = false;
    for (int64_t b = 0; b < blocks_i * blocks_j; ++b) {
      if (block_ok[b]) continue;
      for_tiles(b / blocks_j, b % blocks_j, [&](int64_t t) {
        changed |= skipped[t] == 0;
        skipped[t] = 1;
      });
    }
    for (int64_t b = 0; b < blocks_i * blocks_j; ++b) {
      for_tiles(b / blocks_j, b % blocks_j, [&](int64_t t) { block_ok[b] &= !skipped[t]; });
    }
  }
  return block_ok;
}

}  // namespace internal

namespace {

constexpr std::array<const char*, 4> kGemmPathOrder{"amx-bf16", "avx512-bf16", "simd-f32",
                                                    "portable"};

// The index in kGemmPathOrder of the best path MXTRAIN_MAX_GEMM_PATH (read once) allows.
size_t FirstAllowedGemmPath() {
  static const size_t first = [] {
    const char* env = std::getenv("MXTRAIN_MAX_GEMM_PATH");
    if (env == nullptr || *env == '\0') return size_t{0};
    for (size_t i = 0; i < kGemmPathOrder.size(); ++i) {
      if (std::string(env) == kGemmPathOrder[i]) return i;
    }
    Fail("MXTRAIN_MAX_GEMM_PATH='", env,
         "' names no GEMM path (amx-bf16, avx512-bf16, simd-f32, portable)");
  }();
  return first;
}

}  // namespace

std::vector<std::string> AvailableGemmPaths() {
  // Best first. MXTRAIN_MAX_GEMM_PATH=NAME drops the paths better than NAME, and a SIMD cap
  // below AVX-512 (simd.h) the two that need it (gemm/amx.h): so a process can behave as on
  // a CPU without AMX or without bf16 dot products.
  const size_t first = FirstAllowedGemmPath();
  std::vector<std::string> paths;
  if (first <= 0 && internal::AmxAvailable()) paths.push_back(kGemmPathOrder[0]);
  if (first <= 1 && internal::Avx512Bf16Available()) paths.push_back(kGemmPathOrder[1]);
  if (first <= 2) paths.push_back(kGemmPathOrder[2]);
  paths.push_back(kGemmPathOrder[3]);
  return paths;
}

std::vector<std::string> TestableGemmPaths() {
  std::vector<std::string> paths = AvailableGemmPaths();
  // The AMX path on its tile unit's model stands in for AMX where the CPU has none, under
  // the same caps.
  if (FirstAllowedGemmPath() == 0 && internal::AmxEmulationAvailable()) {
    paths.push_back("amx-bf16-emulated");
  }
  return paths;
}

void ForceGemmPath(const std::string& name) {
  if (!name.empty()) {
    const std::vector<std::string> paths = TestableGemmPaths();
    MXTRAIN_CHECK(std::find(paths.begin(), paths.end(), name) != paths.end(),
                  "unknown or unavailable GEMM path '", name, "'");
  }
  std::lock_guard<std::mutex> lock(g_path_mutex);
  g_forced_path = name;
}

std::string CurrentGemmPath() {
  {
    std::lock_guard<std::mutex> lock(g_path_mutex);
    if (!g_forced_path.empty()) return g_forced_path;
  }
  return AvailableGemmPaths().front();
}

Tensor MxGemm(const MxTensor& a, const MxTensor& b, const GemmOptions& options) {
  const internal::ScopedFpEnv fp_env;
  const Checked c = CheckOperands(a, b, options);
  Tensor c32 = ResultBuffer(c, options);
  const int threads = internal::TeamSize(options.threads, "gemm");
  // Per-row statistics only where the operands' whole scale ranges leave some tile in
  // doubt: with the per-tile checks they cost a pass per row, serial below 16384 scales,
  // ~6% of a 1024 x 128 x 128 GEMM on two threads (190 -> 179 us without them).
  const bool all_safe = internal::AllTilesSafe(c.a, c.b);
  const RowScaleStats a_stats = all_safe ? RowScaleStats() : RowScaleStats::Of(c.a, threads);
  const RowScaleStats b_stats = all_safe ? RowScaleStats() : RowScaleStats::Of(c.b, threads);
  const bool overwrite = options.accumulate == nullptr;
  // A bf16 result: the kernel may round its tiles straight into it (GemmBf16Out).
  const bool bf16 = options.out_dtype == DType::kBF16;
  Tensor out16;
  internal::GemmBf16Out bf16_out{};
  if (bf16) {
    out16 = options.out != nullptr
                ? *options.out
                : Tensor::Empty(DType::kBF16, {c.a.free, c.b.free}, options.category);
    bf16_out.data = out16.mutable_data<uint16_t>();
    bf16_out.bias = options.bias != nullptr ? options.bias->const_data<float>() : nullptr;
  }
  const GemmProblem p{c.a,
                      c.b,
                      all_safe ? nullptr : &a_stats,
                      all_safe ? nullptr : &b_stats,
                      c32.mutable_data<float>(),
                      overwrite,
                      threads,
                      bf16 ? &bf16_out : nullptr,
                      all_safe};
  const int64_t tiles_i = CeilDiv(c.a.free, internal::kGemmTile);
  const int64_t tiles_j = CeilDiv(c.b.free, internal::kGemmTile);
  // With an empty contraction C is already final (zeros or the accumulator).
  std::vector<uint8_t> skipped(static_cast<size_t>(tiles_i * tiles_j), 0);
  if (c.a.free > 0 && c.b.free > 0 && c.a.s > 0) ChooseKernel()(p, skipped);
  // The exact path: tiles with NaN blocks or scales that leave fp32's normal range. Listed
  // first, so that threads share out only those (a dynamic loop over every tile of an
  // 8192 x 8192 output costs 7 ms of scheduling when none is skipped).
  std::vector<int64_t> exact_tiles;
  for (int64_t t = 0; t < tiles_i * tiles_j; ++t) {
    if (skipped[t]) exact_tiles.push_back(t);
  }
  const int64_t cols = c.b.free;
  const auto num_exact = static_cast<int64_t>(exact_tiles.size());
#pragma omp parallel num_threads(threads) if (num_exact > 0)
  {
    const internal::ScopedFpEnv fp_env;
#pragma omp for schedule(dynamic)
    for (int64_t x = 0; x < num_exact; ++x) {
      const int64_t t = exact_tiles[x];
      const int64_t ti = t / tiles_j, tj = t % tiles_j;
      for (int64_t i = ti * internal::kGemmTile;
           i < std::min(c.a.free, (ti + 1) * internal::kGemmTile); ++i) {
        for (int64_t j = tj * internal::kGemmTile;
             j < std::min(cols, (tj + 1) * internal::kGemmTile); ++j) {
          float& out = p.c[i * cols + j];
          const double before = overwrite ? 0.0 : static_cast<double>(out);
          out = static_cast<float>(before + ExactDot(c.a, c.b, i, j));
        }
        if (bf16_out.written) {  // the kernel rounded the other tiles; this one likewise
          const int64_t j0 = tj * internal::kGemmTile;
          const int64_t w = std::min(cols, j0 + internal::kGemmTile) - j0;
          internal::NarrowToBf16(p.c + i * cols + j0, w,
                                 bf16_out.bias != nullptr ? bf16_out.bias + j0 : nullptr,
                                 bf16_out.data + i * cols + j0);
        }
      }
    }
  }
  if (bf16_out.written) return out16;
  GemmOptions finish = options;
  if (bf16) finish.out = &out16;
  return internal::FinishGemm(std::move(c32), finish, threads);
}

namespace ref {

Tensor MxGemm(const MxTensor& a, const MxTensor& b, const GemmOptions& options) {
  const internal::ScopedFpEnv fp_env;
  const Checked c = CheckOperands(a, b, options);
  Tensor c32 = ResultBuffer(c, options);
  const int64_t rows = c.a.free, cols = c.b.free;
  float* out = c32.mutable_data<float>();
  for (int64_t i = 0; i < rows; ++i) {
    for (int64_t j = 0; j < cols; ++j) {
      const double before = options.accumulate != nullptr ? out[i * cols + j] : 0.0;
      double v = before + ExactDot(c.a, c.b, i, j);
      if (options.bias != nullptr) v += options.bias->const_data<float>()[j];
      out[i * cols + j] = static_cast<float>(v);  // rounded once
    }
  }
  if (options.out_dtype == DType::kF32) return c32;
  // bf16: from the double directly would round once; via fp32 it can differ only in a
  // double-rounding tie, far inside the test bound.
  Tensor bf = Tensor::Empty(DType::kBF16, c32.shape(), options.category);
  for (int64_t i = 0; i < rows * cols; ++i) bf.mutable_data<uint16_t>()[i] = F32ToBf16(out[i]);
  return bf;
}

}  // namespace ref
}  // namespace mxtrain
