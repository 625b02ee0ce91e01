// MX GEMM: every path against the double-precision oracle within NUMERICS.md §7's bound,
// the three training GEMMs, remainders, exact paths for extreme scales, NaN propagation,
// bias, accumulation, bf16 output, grouped GEMM bit-identical to per-group dense GEMM, and
// the errors.
#include "mxtrain/gemm.h"

#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>
#include <vector>

#include "gemm/grouped.h"
#include "gemm/kernels.h"
#include "gemm/operand.h"
#include "gemm_test_util.h"
#include "mxtrain/elementwise.h"
#include "mxtrain/error.h"
#include "mxtrain/format/e8m0.h"
#include "mxtrain/format/element.h"
#include "mxtrain/quantize.h"
#include "mxtrain/simd.h"
#include "mxtrain/testing.h"
#include "per_target_test.h"
#include "test_util.h"

namespace mxtrain {
namespace {

using testing_util::ExpectWithinBound;
using testing_util::MakeF32;
using testing_util::RandomValues;

using Operands = testing_util::TrainingOperands;

Operands MakeTrainingOperands(int64_t m, int64_t n, int64_t k, uint64_t seed, int lo, int hi,
                              ElementFormat grad_format = ElementFormat::kE4M3, int w_lo = 999,
                              int w_hi = 999) {
  if (w_lo == 999) w_lo = lo, w_hi = hi;
  const Tensor x = MakeF32({m, k}, RandomValues(m * k, seed, lo, hi));
  const Tensor w = MakeF32({n, k}, RandomValues(n * k, seed + 1, w_lo, w_hi));
  const Tensor dy = MakeF32({m, n}, RandomValues(m * n, seed + 2, lo, hi));
  return testing_util::QuantizeTrainingOperands(x, w, dy, grad_format);
}

// The training GEMMs of o with `opts`: fprop, dgrad, wgrad, and wgrad accumulated into an
// [N, K] tensor holding `before`; with a bias, then fprop again to a bf16 result plus it.
std::vector<Tensor> TrainingGemmOutputs(const Operands& o, const GemmOptions& opts,
                                        const std::vector<float>& before,
                                        Tensor* bf16_bias = nullptr) {
  std::vector<Tensor> out;
  out.push_back(MxGemm(o.x_row, o.w_row, opts));
  out.push_back(MxGemm(o.dy_row, o.w_col, opts));
  out.push_back(MxGemm(o.dy_col, o.x_col, opts));
  Tensor acc = MakeF32(o.w_row.shape(), before);
  GemmOptions accumulate = opts;
  accumulate.accumulate = &acc;
  MxGemm(o.dy_col, o.x_col, accumulate);
  out.push_back(acc);
  if (bf16_bias != nullptr) {
    GemmOptions bf16 = opts;
    bf16.out_dtype = DType::kBF16;
    bf16.bias = bf16_bias;
    out.push_back(MxGemm(o.x_row, o.w_row, bf16));
  }
  return out;
}

// The tests of a GemmPerPath or GroupedGemmPerPath run once per GEMM path of this machine
// (per_target_test.h), the path forced for the whole test.
class GemmPerPath : public testing_util::GemmPathTest {};
MXTRAIN_INSTANTIATE_PER_GEMM_PATH(GemmPerPath);

TEST_P(GemmPerPath, TrainingGemmsWithinBound) {
  const std::string& path = GetParam();
  for (auto [lo, hi] : {std::pair{-3, 3}, std::pair{-60, -40}, std::pair{30, 50}}) {
    const Operands o = MakeTrainingOperands(37, 45, 70, 7 + lo, lo, hi);
    const std::string tag = path + " exps " + std::to_string(lo);
    ExpectWithinBound(MxGemm(o.x_row, o.w_row), o.x_row, o.w_row, "fprop " + tag);
    ExpectWithinBound(MxGemm(o.dy_row, o.w_col), o.dy_row, o.w_col, "dgrad " + tag);
    ExpectWithinBound(MxGemm(o.dy_col, o.x_col), o.dy_col, o.x_col, "wgrad " + tag);
  }
}

TEST_P(GemmPerPath, ShapeSweepRemainders) {
  uint64_t seed = 100;
  const std::string& path = GetParam();
  for (int64_t m : {1, 2, 15, 16, 17, 33, 70}) {
    for (int64_t n : {1, 3, 16, 31, 48, 70}) {
      for (int64_t k : {1, 5, 31, 32, 33, 64, 70}) {
        const Tensor a = MakeF32({m, k}, RandomValues(m * k, ++seed, -2, 2));
        const Tensor b = MakeF32({n, k}, RandomValues(n * k, ++seed, -2, 2));
        const MxTensor qa = QuantizeRowwise(a, {}), qb = QuantizeRowwise(b, {});
        ExpectWithinBound(MxGemm(qa, qb), qa, qb,
                          StrCat(path, " ", m, "x", n, "x", k, " seed ", seed));
      }
    }
  }
}

TEST_P(GemmPerPath, ExtremeScalesTakeTheExactPath) {
  // Scale bytes below ~10 make decoded values bf16/fp32 subnormal, which AMX would flush.
  const std::string& path = GetParam();
  // x and w magnitudes: both tiny (decoded values and products subnormal), both large
  // (products overflow to Inf), one near the top of fp32 and one near the bottom (decoded
  // values overflow or underflow though the products are ordinary).
  const int ranges[][4] = {{-125, -118, -125, -118},
                           {-135, -125, -10, 0},
                           {100, 110, 20, 30},
                           {118, 126, -126, -118},
                           {-60, -50, -70, -60}};
  for (const auto& r : ranges) {
    const Operands o =
        MakeTrainingOperands(20, 40, 96, 55, r[0], r[1], ElementFormat::kE4M3, r[2], r[3]);
    ExpectWithinBound(MxGemm(o.x_row, o.w_row), o.x_row, o.w_row,
                      StrCat(path, " fprop ", r[0], " ", r[2]));
    ExpectWithinBound(MxGemm(o.x_row, o.w_row), o.x_row, o.w_row, StrCat(path, " fprop ", r[0]));
    // Columnwise operands (their scale statistics take the other branch).
    ExpectWithinBound(MxGemm(o.dy_row, o.w_col), o.dy_row, o.w_col,
                      StrCat(path, " dgrad ", r[0], " ", r[2]));
    ExpectWithinBound(MxGemm(o.dy_col, o.x_col), o.dy_col, o.x_col,
                      StrCat(path, " wgrad ", r[0], " ", r[2]));
  }
  // One tiny row among normal ones: only its tiles go exact, results still in bound.
  std::vector<float> v = RandomValues(32 * 64, 9, -1, 1);
  for (int k = 0; k < 64; ++k) v[5 * 64 + k] = std::ldexp(v[5 * 64 + k], -125);
  const MxTensor a = QuantizeRowwise(MakeF32({32, 64}, v), {});
  const MxTensor b = QuantizeRowwise(MakeF32({24, 64}, RandomValues(24 * 64, 10, -1, 1)), {});
  ExpectWithinBound(MxGemm(a, b), a, b, path + " mixed");
}

// The whole-operand check (AllTilesSafe) lets a GEMM skip the per-row statistics. Without
// NaN or zero blocks it must answer exactly what the statistics answer for every tile
// together (the minimum of a sum over tile pairs is the sum of the minima); with one it
// must say no, the statistics handling those blocks.
TEST(Gemm, WholeOperandScaleRangeAgreesWithEveryTile) {
  struct Case {
    const char* name;
    int lo, hi;      // x's exponents
    int row_shift;   // added to row 5's exponents (0: none)
    bool nan, zero;  // a NaN element; zero blocks
  };
  const Case cases[] = {{"ordinary", -3, 3, 0, false, false},
                        {"wide", -40, 40, 0, false, false},
                        {"one tiny row", -1, 1, -125, false, false},
                        {"one huge row", -1, 1, 118, false, false},
                        {"tiny", -125, -118, 0, false, false},
                        {"huge", 110, 120, 0, false, false},
                        {"a NaN", -1, 1, 0, true, false},
                        {"a zero block", -1, 1, 0, false, true}};
  int all_safe = 0, not_all_safe = 0;
  for (const Case& c : cases) {
    std::vector<float> v = RandomValues(48 * 96, 61, c.lo, c.hi);
    for (int k = 0; k < 96; ++k) v[5 * 96 + k] = std::ldexp(v[5 * 96 + k], c.row_shift);
    if (c.nan) v[9 * 96 + 50] = NAN;
    if (c.zero) {  // rows 0-31 x columns 32-63: a zero block in either layout
      for (int r = 0; r < 32; ++r) std::fill_n(v.begin() + r * 96 + 32, 32, 0.0f);
    }
    const Tensor x = MakeF32({48, 96}, v);
    const Tensor w = MakeF32({40, 96}, RandomValues(40 * 96, 62, -2, 2));
    for (bool columnwise : {false, true}) {
      // Rowwise: x . w^T. Columnwise: x^T . x (wgrad's layouts, contracting x's rows).
      const MxTensor a = columnwise ? QuantizeColumnwise(x, {}) : QuantizeRowwise(x, {});
      const MxTensor b = columnwise ? QuantizeColumnwise(x, {}) : QuantizeRowwise(w, {});
      const internal::GemmOperand oa = internal::GemmOperand::Of(a, "a");
      const internal::GemmOperand ob = internal::GemmOperand::Of(b, "b");
      const internal::RowScaleStats sa = internal::RowScaleStats::Of(oa, 1);
      const internal::RowScaleStats sb = internal::RowScaleStats::Of(ob, 1);
      const internal::GemmProblem p{oa, ob, &sa, &sb, nullptr, true, 1};
      const internal::TileSafety tiles(p);
      bool every = true;
      for (int64_t ti = 0; ti < CeilDiv(oa.free, internal::kGemmTile); ++ti) {
        for (int64_t tj = 0; tj < CeilDiv(ob.free, internal::kGemmTile); ++tj) {
          every = every && tiles(ti, tj);
        }
      }
      const bool all = internal::AllTilesSafe(oa, ob);
      const std::string tag = StrCat(c.name, columnwise ? " columnwise" : " rowwise");
      if (c.nan || c.zero) {
        EXPECT_FALSE(all) << tag;
      } else {
        EXPECT_EQ(all, every) << tag;
      }
      (all ? all_safe : not_all_safe) += 1;
    }
  }
  // Both answers occur.
  EXPECT_GE(all_safe, 4);
  EXPECT_GE(not_all_safe, 6);
}

// An all-zero MX block takes scale byte 0 (NUMERICS.md) without making its row or column
// unsafe, so the fast paths decode it beside normal blocks: a columnwise K step whose vector
// of scale bytes holds a 0 among normal ones must still decode the normal lanes. Columns
// (and rows) with a zero block here and there, in every training layout, against the
// oracle.
TEST_P(GemmPerPath, ZeroBlocksBesideNormalOnes) {
  const int64_t m = 70, n = 53, k = 96;
  std::vector<float> x = RandomValues(m * k, 4100, -3, 3), w = RandomValues(n * k, 4101, -3, 3),
                     dy = RandomValues(m * n, 4102, -3, 3);
  // x [m, k]: rowwise blocks of rows 5 and 40 (K 32..63) and columnwise blocks of columns
  // 3 and 17 (M 32..63) zero; w [n, k] and dy [m, n] alike.
  const auto zero = [](std::vector<float>& v, int64_t cols, int64_t r0, int64_t r1, int64_t c0,
                       int64_t c1) {
    for (int64_t r = r0; r < r1; ++r) {
      for (int64_t c = c0; c < c1; ++c) v[r * cols + c] = 0.0f;
    }
  };
  for (const int64_t r : {5, 40}) zero(x, k, r, r + 1, 32, 64);
  for (const int64_t c : {3, 17}) zero(x, k, 32, 64, c, c + 1);
  for (const int64_t r : {2, 30}) zero(w, k, r, r + 1, 0, 32);
  for (const int64_t c : {7, 50}) zero(w, k, 32, 53, c, c + 1);
  for (const int64_t r : {9, 61}) zero(dy, n, r, r + 1, 0, 32);
  for (const int64_t c : {1, 44}) zero(dy, n, 32, 64, c, c + 1);
  const Operands o = testing_util::QuantizeTrainingOperands(
      MakeF32({m, k}, x), MakeF32({n, k}, w), MakeF32({m, n}, dy), ElementFormat::kE4M3);
  testing_util::BoundOracle(o.x_row, o.w_row).Check(MxGemm(o.x_row, o.w_row), "fprop");
  testing_util::BoundOracle(o.dy_row, o.w_col).Check(MxGemm(o.dy_row, o.w_col), "dgrad");
  testing_util::BoundOracle(o.dy_col, o.x_col).Check(MxGemm(o.dy_col, o.x_col), "wgrad");
}

TEST_P(GemmPerPath, NaNBlocksPropagate) {
  std::vector<float> v = RandomValues(40 * 96, 21, -1, 1);
  v[7 * 96 + 40] = NAN;  // row 7, block 1
  const MxTensor a = QuantizeRowwise(MakeF32({40, 96}, v), {});
  const MxTensor b = QuantizeRowwise(MakeF32({20, 96}, RandomValues(20 * 96, 22, -1, 1)), {});
  const std::string& path = GetParam();
  const Tensor c = MxGemm(a, b);
  for (int64_t i = 0; i < 40; ++i) {
    for (int64_t j = 0; j < 20; ++j) {
      EXPECT_EQ(std::isnan(c.data<float>()[i * 20 + j]), i == 7) << path << " " << i << "," << j;
    }
  }
  // Columnwise: the NaN block (rows 0-31 of column 40) makes column 40 of the wgrad NaN.
  const MxTensor x_col = QuantizeColumnwise(MakeF32({40, 96}, v), {});
  const MxTensor dy_col =
      QuantizeColumnwise(MakeF32({40, 20}, RandomValues(40 * 20, 23, -1, 1)), {});
  const Tensor dw = MxGemm(dy_col, x_col);
  for (int64_t j = 0; j < 20; ++j) {
    for (int64_t k = 0; k < 96; ++k) {
      EXPECT_EQ(std::isnan(dw.data<float>()[j * 96 + k]), k == 40) << path << " " << j << "," << k;
    }
  }
}

TEST_P(GemmPerPath, HybridFormatsBiasAccumulateBf16) {
  const Operands o = MakeTrainingOperands(33, 50, 64, 31, -4, 4, ElementFormat::kE5M2);
  Tensor bias = MakeF32({50}, RandomValues(50, 5, -2, 2));
  const std::string& path = GetParam();
  // E5M2 gradients times E4M3 weights (HYBRID).
  ExpectWithinBound(MxGemm(o.dy_row, o.w_col), o.dy_row, o.w_col, path + " hybrid dgrad");
  GemmOptions with_bias;
  with_bias.bias = &bias;
  ExpectWithinBound(MxGemm(o.x_row, o.w_row, with_bias), o.x_row, o.w_row, path + " bias", &bias);
  GemmOptions bf16;
  bf16.out_dtype = DType::kBF16;
  const Tensor yb = MxGemm(o.x_row, o.w_row, bf16);
  EXPECT_EQ(yb.dtype(), DType::kBF16);
  ExpectWithinBound(yb, o.x_row, o.w_row, path + " bf16");
  // Accumulate into main_grad twice: C = before + dW.
  Tensor main_grad = MakeF32({50, 64}, RandomValues(50 * 64, 6, -1, 1));
  const Tensor before = MakeF32(
      {50, 64}, std::vector<float>(main_grad.data<float>(), main_grad.data<float>() + 50 * 64));
  GemmOptions acc;
  acc.accumulate = &main_grad;
  const Tensor r = MxGemm(o.dy_col, o.x_col, acc);
  EXPECT_EQ(r.raw(), main_grad.raw());  // in place
  ExpectWithinBound(main_grad, o.dy_col, o.x_col, path + " accumulate", nullptr, &before);
}

// A bf16 result is the fp32 result (bias included) rounded once, bit for bit, whichever
// code rounds it: FinishGemm after most kernels, the simd-f32 kernel itself for the tiles
// it computes and the driver for the exact path's. A row of A small enough for the exact
// path, K over three chunks of the simd-f32 kernel and not a multiple of 16, edge tiles,
// the three layouts, with and without bias, on two threads; K over two chunks of the bf16
// kernels (the last one rounds what the first left in C); sums that are exact ties
// between two bf16 values (1 + odd * 2^-8: half-way cases, rounded to even).
void ExpectBf16IsRoundedF32(const std::string& what) {
  std::vector<float> v = RandomValues(45 * 600, 41, -2, 2);
  for (int k = 0; k < 600; ++k) v[17 * 600 + k] = std::ldexp(v[17 * 600 + k], -125);
  const MxTensor a = QuantizeRowwise(MakeF32({45, 600}, v), {});
  const MxTensor b = QuantizeRowwise(MakeF32({37, 600}, RandomValues(37 * 600, 42, -2, 2)), {});
  const Operands o = MakeTrainingOperands(45, 37, 600, 43, -3, 3);
  const Operands deep = MakeTrainingOperands(40, 70, 2200, 46, -2, 2);
  std::vector<float> tie_a(40 * 64, 0.0f), tie_b(70 * 64, 0.0f);
  for (int i = 0; i < 40; ++i) {
    tie_a[i * 64] = 1.0f;
    tie_a[i * 64 + 1] = std::ldexp(static_cast<float>(2 * (i % 8) + 1), -8);
  }
  for (int j = 0; j < 70; ++j) tie_b[j * 64] = tie_b[j * 64 + 1] = 1.0f;
  const MxTensor ties_a = QuantizeRowwise(MakeF32({40, 64}, tie_a), {});
  const MxTensor ties_b = QuantizeRowwise(MakeF32({70, 64}, tie_b), {});
  Tensor bias37 = MakeF32({37}, RandomValues(37, 44, -1, 1));
  Tensor bias600 = MakeF32({600}, RandomValues(600, 45, -1, 1));
  Tensor bias70 = MakeF32({70}, RandomValues(70, 47, -1, 1));
  Tensor bias2200 = MakeF32({2200}, RandomValues(2200, 48, -1, 1));
  Tensor zeros70 = Tensor::Zeros(DType::kF32, {70});
  const struct {
    const char* name;
    const MxTensor &x, &y;
    Tensor* bias;
  } cases[] = {{"fprop with an exact row", a, b, &bias37},
               {"fprop", o.x_row, o.w_row, &bias37},
               {"dgrad", o.dy_row, o.w_col, &bias600},
               {"wgrad", o.dy_col, o.x_col, &bias600},
               {"fprop, K 2200", deep.x_row, deep.w_row, &bias70},
               {"dgrad, 2200 columns", deep.dy_row, deep.w_col, &bias2200},
               {"half-way sums", ties_a, ties_b, &zeros70}};
  for (const auto& c : cases) {
    for (const bool with_bias : {false, true}) {
      GemmOptions f32;
      f32.threads = 2;
      f32.bias = with_bias ? c.bias : nullptr;
      GemmOptions bf16 = f32;
      bf16.out_dtype = DType::kBF16;
      const Tensor c32 = MxGemm(c.x, c.y, f32);
      const Tensor c16 = MxGemm(c.x, c.y, bf16);
      ASSERT_EQ(c16.dtype(), DType::kBF16);
      ASSERT_EQ(c16.shape(), c32.shape());
      int64_t differ = 0;
      for (int64_t i = 0; i < c32.NumElements(); ++i) {
        differ += c16.data<uint16_t>()[i] != F32ToBf16(c32.data<float>()[i]);
      }
      EXPECT_EQ(differ, 0) << what << " " << c.name << (with_bias ? " with bias" : "");
    }
  }
}

TEST_P(GemmPerPath, Bf16ResultIsTheRoundedF32Result) { ExpectBf16IsRoundedF32(GetParam()); }

TEST(Gemm, FastPathsMatchReferenceClosely) {
  // The oracle function in the library agrees with the in-test bound check.
  const Operands o = MakeTrainingOperands(30, 20, 100, 77, -3, 3);
  ExpectWithinBound(ref::MxGemm(o.x_row, o.w_row), o.x_row, o.w_row, "ref fprop");
  ExpectWithinBound(ref::MxGemm(o.dy_col, o.x_col), o.dy_col, o.x_col, "ref wgrad");
}

TEST(Gemm, MismatchesRaise) {
  const Operands o = MakeTrainingOperands(32, 48, 64, 1, -1, 1);
  EXPECT_THROW(MxGemm(o.x_row, o.w_col), Error);   // contracts 64 vs 48
  EXPECT_THROW(MxGemm(o.dy_row, o.w_row), Error);  // contracts 48 vs 64
  const MxTensor three = QuantizeRowwise(Tensor::Zeros(DType::kF32, {2, 4, 64}), {});
  EXPECT_THROW(MxGemm(three, o.w_row), Error);
  Tensor bad_bias = Tensor::Zeros(DType::kF32, {47});
  GemmOptions ob;
  ob.bias = &bad_bias;
  EXPECT_THROW(MxGemm(o.x_row, o.w_row, ob), Error);
  Tensor bad_acc = Tensor::Zeros(DType::kF32, {32, 47});
  GemmOptions oa;
  oa.accumulate = &bad_acc;
  EXPECT_THROW(MxGemm(o.x_row, o.w_row, oa), Error);
  GemmOptions ou;
  ou.out_dtype = DType::kU8;
  EXPECT_THROW(MxGemm(o.x_row, o.w_row, ou), Error);
  EXPECT_THROW(ForceGemmPath("tpu"), Error);
}

TEST_P(GemmPerPath, LongContractionAndWideOutput) {
  // S > 2048 takes the AMX kernel's chunk-outer order; 70 columns make edge blocks.
  const std::string& path = GetParam();
  const Operands o = MakeTrainingOperands(2200, 70, 48, 81, -2, 2);
  ExpectWithinBound(MxGemm(o.dy_col, o.x_col), o.dy_col, o.x_col, path + " wgrad S=2200");
  const MxTensor a = QuantizeRowwise(MakeF32({33, 2200}, RandomValues(33 * 2200, 82, -2, 2)), {});
  const MxTensor b = QuantizeRowwise(MakeF32({70, 2200}, RandomValues(70 * 2200, 83, -2, 2)), {});
  Tensor acc = MakeF32({33, 70}, RandomValues(33 * 70, 84, -1, 1));
  const Tensor before =
      MakeF32({33, 70}, std::vector<float>(acc.data<float>(), acc.data<float>() + 33 * 70));
  GemmOptions o2;
  o2.accumulate = &acc;
  MxGemm(a, b, o2);
  ExpectWithinBound(acc, a, b, path + " fprop S=2200 accumulate", nullptr, &before);
}

// A GEMM's bytes do not depend on its thread count (the grouped GEMM relies on it): on 1,
// 2 and 3 threads, the three layouts, a bf16 result with bias and an accumulated one give
// the same bytes, and the one-thread results are within the oracle's bound. The shapes
// take the bf16 kernels' schedules: operands packed inside the compute region (each thread
// its own rows of A) or packed first with streamed stores (the last shape's fprop: over
// 1 MiB of A a thread; its oracle only for fprop, the double loops being the test's cost),
// rows split between the threads or column items, and edge blocks of 1-31 rows.
TEST_P(GemmPerPath, AnyThreadCountGivesTheSameBytes) {
  const std::string& path = GetParam();
  struct Shape3 {
    int64_t m, n, k;
  };
  std::vector<Shape3> shapes{{130, 70, 96}, {300, 100, 200}, {97, 33, 64}};
  if (path != "portable") shapes.push_back({520, 40, 2100});  // (too slow there)
  for (const Shape3& s : shapes) {
    const bool big = s.k > 1000;
    const Operands o = MakeTrainingOperands(s.m, s.n, s.k, static_cast<uint64_t>(s.m + s.k), -3, 3);
    Tensor bias = MakeF32({s.n}, RandomValues(s.n, 7, -1, 1));
    const std::vector<float> before_values = RandomValues(s.n * s.k, 8, -1, 1);
    const auto run = [&](int threads) {
      GemmOptions opts;
      opts.threads = threads;
      return TrainingGemmOutputs(o, opts, before_values, &bias);
    };
    const std::string shape = StrCat(path, " ", s.m, "x", s.n, "x", s.k);
    const std::vector<Tensor> one = run(1);
    ExpectWithinBound(one[0], o.x_row, o.w_row, shape + " fprop");
    for (const int threads : {2, 3}) {
      const std::vector<Tensor> got = run(threads);
      for (size_t i = 0; i < got.size(); ++i) {
        EXPECT_TRUE(testing_util::BytesEqual(got[i], one[i]))
            << shape << " output " << i << " threads " << threads;
      }
    }
    if (big) continue;
    ExpectWithinBound(one[1], o.dy_row, o.w_col, shape + " dgrad");
    ExpectWithinBound(one[2], o.dy_col, o.x_col, shape + " wgrad");
    const Tensor before = MakeF32({s.n, s.k}, before_values);
    ExpectWithinBound(one[3], o.dy_col, o.x_col, shape + " accumulate", nullptr, &before);
    ExpectWithinBound(one[4], o.x_row, o.w_row, shape + " bf16 with bias", &bias);
  }
}

TEST_P(GemmPerPath, WritesIntoAGivenOutput) {
  const Operands o = MakeTrainingOperands(40, 24, 64, 91, -2, 2);
  const std::string& path = GetParam();
  const Tensor expected = MxGemm(o.x_row, o.w_row);
  Tensor big = MakeF32({50, 24}, std::vector<float>(50 * 24, -7.0f));
  Tensor view = big.Slice(5, 45);  // rows 5..44 of a larger tensor
  GemmOptions opts;
  opts.out = &view;
  const Tensor r = MxGemm(o.x_row, o.w_row, opts);
  EXPECT_EQ(r.raw(), view.raw());
  EXPECT_EQ(std::memcmp(view.raw(), expected.raw(), expected.NumBytes()), 0) << path;
  EXPECT_EQ(big.data<float>()[4 * 24 + 3], -7.0f);  // rows outside untouched
  EXPECT_EQ(big.data<float>()[45 * 24], -7.0f);
  Tensor bf = Tensor::Empty(DType::kBF16, {40, 24});
  GemmOptions ob;
  ob.out = &bf;
  ob.out_dtype = DType::kBF16;
  MxGemm(o.x_row, o.w_row, ob);
  for (int64_t i = 0; i < 40 * 24; ++i) {
    ASSERT_EQ(bf.data<uint16_t>()[i], F32ToBf16(expected.data<float>()[i])) << path << " " << i;
  }
  Tensor wrong = Tensor::Empty(DType::kF32, {40, 23});
  GemmOptions ow;
  ow.out = &wrong;
  EXPECT_THROW(MxGemm(o.x_row, o.w_row, ow), Error);
}

TEST_P(GemmPerPath, EmptyShapes) {
  const std::string& path = GetParam();
  const MxTensor a = QuantizeRowwise(Tensor::Zeros(DType::kF32, {3, 0}), {});
  const MxTensor b = QuantizeRowwise(Tensor::Zeros(DType::kF32, {4, 0}), {});
  const Tensor c = MxGemm(a, b);  // empty contraction: zeros
  ASSERT_EQ(c.shape(), (Shape{3, 4}));
  for (int i = 0; i < 12; ++i) EXPECT_EQ(c.data<float>()[i], 0.0f) << path;
  Tensor acc = MakeF32({3, 4}, std::vector<float>(12, 2.5f));
  GemmOptions o;
  o.accumulate = &acc;
  MxGemm(a, b, o);
  for (int i = 0; i < 12; ++i) EXPECT_EQ(acc.data<float>()[i], 2.5f) << path;
  const MxTensor none = QuantizeRowwise(Tensor::Zeros(DType::kF32, {0, 64}), {});
  const MxTensor w = QuantizeRowwise(Tensor::Zeros(DType::kF32, {5, 64}), {});
  EXPECT_EQ(MxGemm(none, w).shape(), (Shape{0, 5}));
}

// The simd-f32 path on every Highway target this machine has, one instance per target
// (gemm_test's other tests run only the best one): remainders of its register tile (6 or
// 14 rows x 2 vectors) and of its 256-long K chunks, partial MX blocks, an odd large shape,
// the three training layouts, accumulation and bias, each against the double-precision
// oracle.
class GemmSimdF32PerTarget : public testing_util::SimdTargetTest {
 protected:
  void TearDown() override {
    ForceGemmPath("");
    testing_util::SimdTargetTest::TearDown();
  }
};
MXTRAIN_INSTANTIATE_PER_SIMD_TARGET(GemmSimdF32PerTarget);

TEST_P(GemmSimdF32PerTarget, AgainstOracle) {
  const std::vector<std::string> paths = AvailableGemmPaths();
  ASSERT_NE(std::find(paths.begin(), paths.end(), "simd-f32"), paths.end());
  ForceGemmPath("simd-f32");
  const std::string& target = GetParam();
  // Runs gemm() on this target and checks its result against the oracle.
  const auto every_target = [&](const testing_util::BoundOracle& oracle, const std::string& what,
                                auto&& gemm) { oracle.Check(gemm(), target + " " + what); };
  uint64_t seed = 1000;
  for (int64_t m : {1, 5, 6, 7, 13, 14, 15, 29, 70}) {
    for (int64_t n : {1, 9, 16, 17, 31, 33, 64, 70}) {
      for (int64_t k : {1, 31, 32, 33, 70, 257}) {
        const Tensor a = MakeF32({m, k}, RandomValues(m * k, ++seed, -3, 3));
        const Tensor b = MakeF32({n, k}, RandomValues(n * k, ++seed, -3, 3));
        const MxTensor qa = QuantizeRowwise(a, {}), qb = QuantizeRowwise(b, {});
        every_target(testing_util::BoundOracle(qa, qb), StrCat(m, "x", n, "x", k, " seed ", seed),
                     [&] { return MxGemm(qa, qb); });
      }
    }
  }
  // The three layouts over K = 600 (three K chunks, the last partial) on 2 threads.
  const Operands o = MakeTrainingOperands(200, 70, 600, 2024, -4, 4);
  GemmOptions two;
  two.threads = 2;
  every_target(testing_util::BoundOracle(o.x_row, o.w_row), "fprop",
               [&] { return MxGemm(o.x_row, o.w_row, two); });
  every_target(testing_util::BoundOracle(o.dy_row, o.w_col), "dgrad",
               [&] { return MxGemm(o.dy_row, o.w_col, two); });
  every_target(testing_util::BoundOracle(o.dy_col, o.x_col), "wgrad",
               [&] { return MxGemm(o.dy_col, o.x_col, two); });
  // An odd large operand with a bias.
  const MxTensor big_a =
      QuantizeRowwise(MakeF32({993, 512}, RandomValues(993 * 512, 2025, -2, 2)), {});
  const MxTensor big_b =
      QuantizeRowwise(MakeF32({77, 512}, RandomValues(77 * 512, 2026, -2, 2)), {});
  Tensor bias = MakeF32({77}, RandomValues(77, 2027, -1, 1));
  GemmOptions with_bias = two;
  with_bias.bias = &bias;
  every_target(testing_util::BoundOracle(big_a, big_b, &bias), "993x512 bias",
               [&] { return MxGemm(big_a, big_b, with_bias); });
  // Accumulate (C += A.B^T) on one thread and on two: the same bytes.
  const std::vector<float> before_values = RandomValues(70 * 600, 2028, -1, 1);
  const Tensor before = MakeF32({70, 600}, before_values);
  for (int threads : {1, 2}) {
    every_target(testing_util::BoundOracle(o.dy_col, o.x_col, nullptr, &before),
                 StrCat("wgrad accumulate, threads ", threads), [&] {
                   Tensor acc = MakeF32({70, 600}, before_values);
                   GemmOptions ao;
                   ao.threads = threads;
                   ao.accumulate = &acc;
                   MxGemm(o.dy_col, o.x_col, ao);
                   GemmOptions one = two;
                   one.threads = 3 - threads;
                   Tensor other = MakeF32({70, 600}, before_values);
                   one.accumulate = &other;
                   MxGemm(o.dy_col, o.x_col, one);
                   EXPECT_TRUE(testing_util::BytesEqual(acc, other)) << threads;
                   return acc;
                 });
  }
}

// A tile that needs the exact path (here: a row of A scaled to ~2^-125) makes the kernel
// leave every register block touching it, and each such block's other tiles go to the
// exact path too, and so on until blocks and 16-row tiles align (48 rows for the 6-row
// blocks of AVX2, 112 for AVX-512's 14). Every row must then be computed by one or the
// other: rows past the first tile's neighbours were once left to no one (zeros, or the
// accumulator). Tiny rows at and across such boundaries, overwriting and accumulating,
// on 1 and 2 threads, each against the oracle.
TEST_P(GemmSimdF32PerTarget, ExactTilesCoverEveryRowOfTheirBlocks) {
  ForceGemmPath("simd-f32");
  const std::string& target = GetParam();
  uint64_t seed = 4000;
  for (const int64_t m : {43, 64, 100, 130}) {
    for (const int64_t tiny : {0, 7, 47, 60, 111}) {
      if (tiny >= m) continue;
      const int64_t n = 50, k = 96;
      std::vector<float> v = RandomValues(m * k, ++seed, -2, 2);
      for (int64_t j = 0; j < k; ++j) v[tiny * k + j] = std::ldexp(v[tiny * k + j], -125);
      const MxTensor a = QuantizeRowwise(MakeF32({m, k}, v), {});
      const MxTensor b = QuantizeRowwise(MakeF32({n, k}, RandomValues(n * k, ++seed, -2, 2)), {});
      const std::vector<float> before_values = RandomValues(m * n, ++seed, -1, 1);
      const Tensor before = MakeF32({m, n}, before_values);
      for (const int threads : {1, 2}) {
        const std::string what =
            StrCat(target, " ", m, " rows, row ", tiny, " tiny, threads ", threads);
        GemmOptions o;
        o.threads = threads;
        ExpectWithinBound(MxGemm(a, b, o), a, b, what);
        Tensor acc = MakeF32({m, n}, before_values);
        o.accumulate = &acc;
        MxGemm(a, b, o);
        ExpectWithinBound(acc, a, b, what + " accumulating", nullptr, &before);
      }
    }
  }
}

// Small outputs over a long K split the K chunks between the threads (gemm_simd.cc,
// RunGemmSplitK): the first thread adds its chunks into C, the others sum theirs into
// partials that are added after, in chunk order. Every element must be the one-thread
// schedule's, bit for bit: wgrad over 1100 tokens (five chunks, the last partial), fprop and
// dgrad over 600, edge rows and columns, a row of A that takes the exact path, overwriting
// and accumulating, on 2 and 3 threads; and each within the oracle's bound.
TEST_P(GemmSimdF32PerTarget, SplitKIsTheOneThreadSchedule) {
  ForceGemmPath("simd-f32");
  const std::string& target = GetParam();
  const Operands wide = MakeTrainingOperands(1100, 45, 70, 3030, -3, 3);  // wgrad: 45 x 70
  const Operands deep = MakeTrainingOperands(37, 600, 29, 3031, -3, 3);   // dgrad: 37 x 29
  std::vector<float> v = RandomValues(43 * 600, 3032, -2, 2);
  for (int k = 0; k < 600; ++k) v[7 * 600 + k] = std::ldexp(v[7 * 600 + k], -125);
  const MxTensor exact_row = QuantizeRowwise(MakeF32({43, 600}, v), {});
  const MxTensor b = QuantizeRowwise(MakeF32({50, 600}, RandomValues(50 * 600, 3033, -2, 2)), {});
  const struct {
    const char* name;
    const MxTensor &x, &y;
    int64_t rows, cols;
  } cases[] = {{"wgrad", wide.dy_col, wide.x_col, 45, 70},
               {"dgrad", deep.dy_row, deep.w_col, 37, 29},
               {"fprop with an exact row", exact_row, b, 43, 50}};
  for (const auto& c : cases) {
    const std::vector<float> before = RandomValues(c.rows * c.cols, 3034, -1, 1);
    for (const bool accumulate : {false, true}) {
      const auto run = [&](int threads) {
        Tensor out = MakeF32({c.rows, c.cols}, before);
        GemmOptions o;
        o.threads = threads;
        if (accumulate) {
          o.accumulate = &out;
          MxGemm(c.x, c.y, o);
          return out;
        }
        return MxGemm(c.x, c.y, o);
      };
      const Tensor one = run(1);
      const std::string what =
          StrCat(target, " ", c.name, accumulate ? " accumulating" : " overwriting");
      const Tensor* acc_before = nullptr;
      const Tensor before_t = MakeF32({c.rows, c.cols}, before);
      if (accumulate) acc_before = &before_t;
      testing_util::BoundOracle(c.x, c.y, nullptr, acc_before).Check(one, what);
      for (const int threads : {2, 3}) {
        EXPECT_TRUE(testing_util::BytesEqual(run(threads), one)) << what << " threads " << threads;
      }
    }
  }
}

// A rowwise A is packed row-major when C has at most 512 columns and k-major above that
// (gemm_simd.cc, kRowMajorMaxCols): both forms sum the same products in the same order, so
// the first 512 columns of a 600-column fprop or dgrad are the bytes of the 512-column
// one, with K over several 256-long chunks, an edge micro-panel of rows and a block of
// E5M2 codes, accumulating into C and rounding to bf16 as well.
TEST_P(GemmSimdF32PerTarget, RowMajorAndKMajorAPacksGiveTheSameBytes) {
  ForceGemmPath("simd-f32");
  const std::string& target = GetParam();
  constexpr int64_t kM = 47, kK = 600, kNarrow = 512, kWide = 600;
  const MxTensor a = QuantizeRowwise(MakeF32({kM, kK}, RandomValues(kM * kK, 3101, -3, 3)), {});
  const std::vector<float> b_values = RandomValues(kWide * kK, 3102, -3, 3);
  // fprop's B: rows [kWide, kK] and its first kNarrow rows; dgrad's B: [kK, kWide]
  // columnwise and its first kNarrow columns (column scales do not depend on the others).
  const Tensor fprop_wide = MakeF32({kWide, kK}, b_values);
  std::vector<float> dgrad_narrow_values;
  for (int64_t k = 0; k < kK; ++k) {
    dgrad_narrow_values.insert(dgrad_narrow_values.end(), b_values.begin() + k * kWide,
                               b_values.begin() + k * kWide + kNarrow);
  }
  const std::vector<float> before = RandomValues(kM * kWide, 3103, -1, 1);
  for (const ElementFormat b_format : {ElementFormat::kE4M3, ElementFormat::kE5M2}) {
    QuantizeOptions qo;
    qo.format = b_format;
    const struct {
      const char* name;
      MxTensor wide, narrow;
    } cases[] = {{"fprop", QuantizeRowwise(fprop_wide, qo),
                  QuantizeRowwise(fprop_wide.Slice(0, kNarrow), qo)},
                 {"dgrad", QuantizeColumnwise(MakeF32({kK, kWide}, b_values), qo),
                  QuantizeColumnwise(MakeF32({kK, kNarrow}, dgrad_narrow_values), qo)}};
    for (const auto& c : cases) {
      for (const int mode : {0, 1, 2}) {  // overwrite, accumulate, bf16 result
        const auto run = [&](const MxTensor& b, int64_t cols) {
          GemmOptions o;
          o.threads = 2;
          Tensor acc = Tensor::Zeros(DType::kF32, {kM, cols});
          if (mode == 1) {
            float* p = acc.mutable_data<float>();
            for (int64_t i = 0; i < kM; ++i) {
              for (int64_t j = 0; j < cols; ++j) p[i * cols + j] = before[i * kWide + j];
            }
            o.accumulate = &acc;
          }
          if (mode == 2) o.out_dtype = DType::kBF16;
          return CastTo(MxGemm(a, b, o), DType::kF32);
        };
        const Tensor wide = run(c.wide, kWide), narrow = run(c.narrow, kNarrow);
        const float* w = wide.data<float>();
        const float* n = narrow.data<float>();
        int64_t differ = 0;
        for (int64_t i = 0; i < kM; ++i) {
          differ += std::memcmp(w + i * kWide, n + i * kNarrow, kNarrow * sizeof(float)) != 0;
        }
        EXPECT_EQ(differ, 0) << target << " " << c.name << " B "
                             << (b_format == ElementFormat::kE5M2 ? "E5M2" : "E4M3") << " mode "
                             << mode << ": rows whose first 512 columns differ";
      }
    }
  }
}

// Every finite code of both formats, under scale bytes from 2^-7 to 2^8, decodes in every
// pack of the path in use to the tables' value times the scale: GEMMs against an identity
// operand (codes of 1.0, scale 2^0) give back each decoded element, a sum with exact zeros.
// The codes are A (rowwise, and columnwise: fprop's and wgrad's packs) and B (rowwise, and
// columnwise: fprop's and dgrad's packs), on one thread (B packed per column item on the
// bf16 paths) and two (B shared).
void ExpectPacksDecodeEveryFiniteCode(const std::string& what) {
  const int64_t rows = 64, k = 256;  // every row holds each of the 256 codes once
  for (const ElementFormat format : {ElementFormat::kE4M3, ElementFormat::kE5M2}) {
    const uint8_t one = format == ElementFormat::kE4M3 ? 0x38 : 0x3C;
    ASSERT_EQ(DecodeElement(format, one), 1.0f);
    const auto code_at = [&](int64_t r, int64_t c) {
      const auto code = static_cast<uint8_t>((r * 37 + c) % 256);
      return std::isfinite(DecodeElement(format, code)) ? code : uint8_t{0};
    };
    const auto scale_at = [](int64_t r, int64_t block) {
      return static_cast<uint8_t>(120 + (r + 3 * block) % 16);
    };
    Tensor codes = Tensor::Empty(DType::kU8, {rows, k});
    Tensor scales = Tensor::Empty(DType::kU8, {rows, k / 32});
    Tensor codes_t = Tensor::Empty(DType::kU8, {k, rows});  // the same values, columnwise
    Tensor scales_t = Tensor::Empty(DType::kU8, {k / 32, rows});
    Tensor eye = Tensor::Empty(DType::kU8, {k, k});
    Tensor eye_scales = Tensor::Empty(DType::kU8, {k, k / 32});
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t c = 0; c < k; ++c) {
        codes.mutable_data<uint8_t>()[r * k + c] = code_at(r, c);
        codes_t.mutable_data<uint8_t>()[c * rows + r] = code_at(r, c);
      }
      for (int64_t b = 0; b < k / 32; ++b) {
        scales.mutable_data<uint8_t>()[r * (k / 32) + b] = scale_at(r, b);
        scales_t.mutable_data<uint8_t>()[b * rows + r] = scale_at(r, b);
      }
    }
    for (int64_t i = 0; i < k * k; ++i) eye.mutable_data<uint8_t>()[i] = i / k == i % k ? one : 0;
    std::fill_n(eye_scales.mutable_data<uint8_t>(), k * k / 32, uint8_t{127});
    const MxTensor a(codes, scales, format, ScaleRule::kRceil, BlockAxis::kRowwise);
    const MxTensor a_t(codes_t, scales_t, format, ScaleRule::kRceil, BlockAxis::kColumnwise);
    const MxTensor e_row(eye, eye_scales, format, ScaleRule::kRceil, BlockAxis::kRowwise);
    const MxTensor e_col(eye, eye_scales.Reshape({k / 32, k}), format, ScaleRule::kRceil,
                         BlockAxis::kColumnwise);
    for (const int threads : {1, 2}) {
      GemmOptions g;
      g.threads = threads;
      const struct {
        const char* name;
        Tensor c;
        bool transposed;                                       // [k, rows] rather than [rows, k]
      } cases[] = {{"A rowwise", MxGemm(a, e_row, g), false},  // A E^T
                   {"A columnwise", MxGemm(a_t, e_col, g), false},  // A_t^T E
                   {"B rowwise", MxGemm(e_row, a, g), true},        // E A^T
                   {"B columnwise", MxGemm(e_row, a_t, g), true}};  // E (A_t^T)^T
      for (const auto& c : cases) {
        ASSERT_EQ(c.c.shape(), c.transposed ? Shape({k, rows}) : Shape({rows, k}));
        int checked = 0;
        for (int64_t r = 0; r < rows; ++r) {
          for (int64_t col = 0; col < k; ++col) {
            const float want =
                DecodeElement(format, code_at(r, col)) * DecodeE8M0(scale_at(r, col / 32));
            const float got = c.c.data<float>()[c.transposed ? col * rows + r : r * k + col];
            ASSERT_EQ(got, want) << what << " " << Name(format) << " " << c.name << " threads "
                                 << threads << " row " << r << " code " << int{code_at(r, col)};
            ++checked;
          }
        }
        EXPECT_EQ(checked, rows * k);
      }
    }
  }
}

TEST_P(GemmPerPath, PacksDecodeEveryFiniteCodeAsTheTables) {
  ExpectPacksDecodeEveryFiniteCode(GetParam());
}

TEST_P(GemmSimdF32PerTarget, PacksDecodeEveryFiniteCodeAsTheTables) {
  ForceGemmPath("simd-f32");
  ExpectPacksDecodeEveryFiniteCode("simd-f32 " + GetParam());
}

TEST_P(GemmSimdF32PerTarget, Bf16ResultIsTheRoundedF32Result) {
  ForceGemmPath("simd-f32");
  ExpectBf16IsRoundedF32("simd-f32 " + GetParam());
}

// The simd-f32 path sums each element K chunk by K chunk in a fixed order with fused
// multiply-adds, however many chunks a group holds (two on AVX-512, one on AVX2) and
// however the threads split the work: every FMA target gives the AVX2 target's bytes. The
// shapes cover groups with a partial last chunk, a lone last chunk, tile and column-block
// remainders, both thread splits (rows, and columns for few rows), the three training
// layouts and accumulation. (A machine with one FMA target has nothing to compare; the SSE
// targets have no FMA and round twice.)
TEST(GemmSimdF32, SameBytesOnEveryFmaTarget) {
  std::vector<std::string> fma_targets;
  for (const std::string& target : AvailableSimdTargets()) {
    if (target.rfind("AVX", 0) == 0) fma_targets.push_back(target);
  }
  if (fma_targets.size() < 2) return;  // one FMA target: nothing to compare
  ForceGemmPath("simd-f32");
  struct Case {
    int64_t m, n, k;
    int threads;
  };
  int compared = 0;
  for (const Case& c : {Case{100, 70, 1100, 2}, Case{100, 70, 1100, 1}, Case{20, 4200, 600, 2},
                        Case{45, 33, 257, 2}, Case{29, 64, 512, 2}}) {
    const Operands o =
        MakeTrainingOperands(c.m, c.n, c.k, static_cast<uint64_t>(c.m * c.n + c.k), -3, 3);
    const std::vector<float> before_values = RandomValues(c.n * c.k, 77, -1, 1);
    GemmOptions opts;
    opts.threads = c.threads;
    // fprop, dgrad, wgrad, wgrad accumulating into a given C, on the current target.
    const auto run = [&] { return TrainingGemmOutputs(o, opts, before_values); };
    std::vector<Tensor> expected;
    {
      const ScopedSimdTarget reference(fma_targets.back());  // the narrowest: AVX2
      expected = run();
    }
    for (const std::string& target : fma_targets) {
      if (target == fma_targets.back()) continue;
      const ScopedSimdTarget scoped(target);
      const std::vector<Tensor> got = run();
      for (size_t i = 0; i < got.size(); ++i) {
        EXPECT_TRUE(testing_util::BytesEqual(got[i], expected[i]))
            << target << " " << c.m << "x" << c.n << "x" << c.k << " threads " << c.threads
            << " output " << i;
        ++compared;
      }
    }
  }
  ForceGemmPath("");
  RecordProperty("outputs_compared", compared);
}

// --- Grouped ---------------------------------------------------------------------------

class GroupedGemmPerPath : public testing_util::GemmPathTest {};
MXTRAIN_INSTANTIATE_PER_GEMM_PATH(GroupedGemmPerPath);

TEST_P(GroupedGemmPerPath, FpropAndDgradEqualDensePerGroup) {
  const int64_t m = 150, k = 96, n = 40, experts = 5;
  const std::vector<int64_t> counts{31, 0, 64, 1, 54};
  const GroupList groups = GroupList::Make(counts, GroupListType::kCounts, m);
  const Tensor x = MakeF32({m, k}, RandomValues(m * k, 41, -2, 2));
  const Tensor w = MakeF32({experts, n, k}, RandomValues(experts * n * k, 42, -2, 2));
  const Tensor dy = MakeF32({m, n}, RandomValues(m * n, 43, -2, 2));
  const MxTensor xq = QuantizeRowwise(x, {});
  const DualMx wq = QuantizeDual(w, {});
  const MxTensor dyq = QuantizeRowwise(dy, {});
  Tensor bias = MakeF32({experts, n}, RandomValues(experts * n, 44, -1, 1));
  const std::string& path = GetParam();
  GemmOptions ob;
  ob.bias = &bias;
  const Tensor y = MxGroupedGemm(xq, wq.rowwise, groups, ob);
  const Tensor dx = MxGroupedGemm(dyq, wq.columnwise, groups);
  ASSERT_EQ(y.shape(), (Shape{m, n}));
  ASSERT_EQ(dx.shape(), (Shape{m, k}));
  for (int e = 0; e < experts; ++e) {
    if (groups.size(e) == 0) continue;
    Tensor be = bias.Slice(e, e + 1).Reshape({n});
    GemmOptions oe;
    oe.bias = &be;
    const Tensor ye = MxGemm(xq.Rows(groups.begin(e), groups.end(e)), wq.rowwise.Matrix(e), oe);
    const Tensor dxe = MxGemm(dyq.Rows(groups.begin(e), groups.end(e)), wq.columnwise.Matrix(e));
    EXPECT_EQ(std::memcmp(ye.raw(), y.data<float>() + groups.begin(e) * n, ye.NumBytes()), 0) << e;
    EXPECT_EQ(std::memcmp(dxe.raw(), dx.data<float>() + groups.begin(e) * k, dxe.NumBytes()), 0)
        << e;
    ExpectWithinBound(dxe, dyq.Rows(groups.begin(e), groups.end(e)), wq.columnwise.Matrix(e),
                      path + " grouped dgrad");
  }
}

TEST(GroupedGemm, SeedLayoutEKN) {
  // W stored [E, K, N]: fprop contracts K, its axis -2, so W goes in columnwise.
  const int64_t m = 70, k = 64, n = 33, experts = 2;
  const GroupList groups = GroupList::Make(std::vector<int64_t>{30, 40}, GroupListType::kCounts, m);
  const std::vector<float> wv = RandomValues(experts * n * k, 52, -1, 1);
  std::vector<float> w_ekn(wv.size());
  for (int64_t e = 0; e < experts; ++e)
    for (int64_t r = 0; r < n; ++r)
      for (int64_t c = 0; c < k; ++c) w_ekn[(e * k + c) * n + r] = wv[(e * n + r) * k + c];
  const MxTensor xq = QuantizeRowwise(MakeF32({m, k}, RandomValues(m * k, 51, -1, 1)), {});
  const MxTensor w_enk = QuantizeRowwise(MakeF32({experts, n, k}, wv), {});
  const MxTensor w_kn = QuantizeColumnwise(MakeF32({experts, k, n}, w_ekn), {});
  const Tensor a = MxGroupedGemm(xq, w_enk, groups);
  const Tensor b = MxGroupedGemm(xq, w_kn, groups);
  // Same blocks (32 along K) hold the same values, so the quantized operands are equal and
  // so are the products.
  EXPECT_EQ(std::memcmp(a.raw(), b.raw(), a.NumBytes()), 0);
}

TEST_P(GroupedGemmPerPath, WgradPerGroupAndEmptyGroups) {
  const int64_t m = 130, k = 48, n = 36;
  const std::vector<int64_t> counts{40, 0, 57, 33};
  const GroupList groups = GroupList::Make(counts, GroupListType::kCounts, m);
  const MxTensor dyq = QuantizeGrouped(MakeF32({m, n}, RandomValues(m * n, 61, -2, 2)), groups, {});
  const MxTensor xq = QuantizeGrouped(MakeF32({m, k}, RandomValues(m * k, 62, -2, 2)), groups, {});
  const std::string& path = GetParam();
  const Tensor dw = MxGroupedWgrad(dyq, xq);
  ASSERT_EQ(dw.shape(), (Shape{4, n, k}));
  for (int e = 0; e < 4; ++e) {
    const float* got = dw.data<float>() + e * n * k;
    if (groups.size(e) == 0) {
      for (int64_t i = 0; i < n * k; ++i) ASSERT_EQ(got[i], 0.0f);
      continue;
    }
    const Tensor dense = MxGemm(dyq.Group(e), xq.Group(e));
    EXPECT_EQ(std::memcmp(dense.raw(), got, dense.NumBytes()), 0) << path << " expert " << e;
    ExpectWithinBound(dense, dyq.Group(e), xq.Group(e), path + " grouped wgrad");
  }
  // Accumulating: the empty group's slice stays untouched.
  Tensor main_grad = Tensor::Empty(DType::kF32, {4, n, k});
  for (int64_t i = 0; i < 4 * n * k; ++i) main_grad.data<float>()[i] = 1.5f;
  GemmOptions acc;
  acc.accumulate = &main_grad;
  MxGroupedWgrad(dyq, xq, acc);
  for (int64_t i = 0; i < n * k; ++i) ASSERT_EQ(main_grad.data<float>()[1 * n * k + i], 1.5f);
}

// Groups that balance across 2 threads run concurrently, one thread each; others run one
// after another with both threads. Either way every group equals its own dense GEMM with
// all threads, and 1 and 2 threads give the same bytes.
TEST_P(GroupedGemmPerPath, ConcurrentGroupsEqualDensePerGroup) {
  const std::string& path = GetParam();
  const int64_t k = 64, n = 48, experts = 6;
  const std::vector<std::vector<int64_t>> lists{{37, 0, 45, 18, 40, 60}, {150, 3, 0, 5, 1, 41}};
  const std::vector<bool> concurrent{true, false};
  for (size_t l = 0; l < lists.size(); ++l) {
    const int64_t m = std::accumulate(lists[l].begin(), lists[l].end(), int64_t{0});
    const GroupList groups = GroupList::Make(lists[l], GroupListType::kCounts, m);
    EXPECT_EQ(internal::PlanGroups(groups, 2, internal::GroupThreads::kAnyCount).concurrent,
              concurrent[l]);
    EXPECT_FALSE(internal::PlanGroups(groups, 2, internal::GroupThreads::kAllThreads).concurrent);
    EXPECT_FALSE(internal::PlanGroups(groups, 1, internal::GroupThreads::kAnyCount).concurrent);
    const MxTensor xq = QuantizeRowwise(MakeF32({m, k}, RandomValues(m * k, 71, -2, 2)), {});
    const MxTensor wq =
        QuantizeRowwise(MakeF32({experts, n, k}, RandomValues(experts * n * k, 72, -2, 2)), {});
    const MxTensor dyq =
        QuantizeGrouped(MakeF32({m, n}, RandomValues(m * n, 73, -2, 2)), groups, {});
    const MxTensor xg =
        QuantizeGrouped(MakeF32({m, k}, RandomValues(m * k, 74, -2, 2)), groups, {});
    std::vector<Tensor> y(3), dw(3);
    for (int threads : {1, 2}) {
      GemmOptions o;
      o.threads = threads;
      y[threads] = MxGroupedGemm(xq, wq, groups, o);
      Tensor acc = Tensor::Empty(DType::kF32, {experts, n, k});
      for (int64_t i = 0; i < acc.NumElements(); ++i) acc.data<float>()[i] = 0.25f;
      o.accumulate = &acc;
      dw[threads] = MxGroupedWgrad(dyq, xg, o);
    }
    EXPECT_EQ(std::memcmp(y[1].raw(), y[2].raw(), y[1].NumBytes()), 0) << path;
    EXPECT_EQ(std::memcmp(dw[1].raw(), dw[2].raw(), dw[1].NumBytes()), 0) << path;
    for (int e = 0; e < experts; ++e) {
      const float* got_dw = dw[2].data<float>() + e * n * k;
      if (groups.size(e) == 0) {
        for (int64_t i = 0; i < n * k; ++i) ASSERT_EQ(got_dw[i], 0.25f) << path << " " << e;
        continue;
      }
      const Tensor ye = MxGemm(xq.Rows(groups.begin(e), groups.end(e)), wq.Matrix(e));
      EXPECT_EQ(std::memcmp(ye.raw(), y[2].data<float>() + groups.begin(e) * n, ye.NumBytes()), 0)
          << path << " " << e;
      Tensor acc_e = Tensor::Empty(DType::kF32, {n, k});
      for (int64_t i = 0; i < n * k; ++i) acc_e.data<float>()[i] = 0.25f;
      GemmOptions o;
      o.accumulate = &acc_e;
      MxGemm(dyq.Group(e), xg.Group(e), o);
      EXPECT_EQ(std::memcmp(acc_e.raw(), got_dw, acc_e.NumBytes()), 0) << path << " " << e;
    }
  }
}

// On two threads the concurrent schedule splits the groups' rows as evenly as any split
// can (checked against every assignment; exact while the rows fit its 4096 units, within a
// unit per group past that), every group with rows has one owner and empty ones none. The
// MoE bench layer's experts: 4098 of 8192 rows at most, where largest-first gave 4180.
TEST(GroupedGemm, TwoThreadScheduleIsTheEvenestSplit) {
  std::mt19937_64 rng(2026);
  for (int trial = 0; trial < 300; ++trial) {
    const int n = 1 + static_cast<int>(rng() % 12);
    const int64_t max_rows = trial % 3 == 0 ? 40 : trial % 3 == 1 ? 700 : 5000;
    std::vector<int64_t> counts(static_cast<size_t>(n));
    for (int64_t& c : counts) c = rng() % 5 == 0 ? 0 : static_cast<int64_t>(rng() % max_rows);
    const int64_t m = std::accumulate(counts.begin(), counts.end(), int64_t{0});
    if (m == 0) continue;
    const GroupList groups = GroupList::Make(counts, GroupListType::kCounts, m);
    const internal::GroupSchedule plan =
        internal::PlanGroups(groups, 2, internal::GroupThreads::kAnyCount);
    int64_t load[2] = {0, 0}, with_rows = 0;
    for (int e = 0; e < n; ++e) {
      if (counts[e] == 0) {
        EXPECT_EQ(plan.owner[e], -1);
        continue;
      }
      ++with_rows;
      ASSERT_TRUE(plan.owner[e] == 0 || plan.owner[e] == 1) << plan.owner[e];
      load[plan.owner[e]] += counts[e];
    }
    EXPECT_EQ(static_cast<int64_t>(plan.order.size()), with_rows);
    EXPECT_TRUE(std::is_sorted(plan.order.begin(), plan.order.end(),
                               [&](int x, int y) { return counts[x] > counts[y]; }));
    int64_t best = m;
    for (uint32_t mask = 0; mask < (1u << n); ++mask) {
      int64_t a = 0;
      for (int e = 0; e < n; ++e) a += (mask >> e & 1) ? counts[e] : 0;
      best = std::min(best, std::max(a, m - a));
    }
    const int64_t unit = (m + 4095) / 4096;
    EXPECT_LE(std::max(load[0], load[1]), best + (unit > 1 ? n * unit : 0))
        << "trial " << trial << " m " << m;
  }
  const std::vector<int64_t> moe{1720, 409, 1392, 0, 1064, 1556, 737, 1314};
  const internal::GroupSchedule plan = internal::PlanGroups(
      GroupList::Make(moe, GroupListType::kCounts, 8192), 2, internal::GroupThreads::kAnyCount);
  int64_t load[2] = {0, 0};
  for (size_t e = 0; e < moe.size(); ++e) {
    if (moe[e] > 0) load[plan.owner[e]] += moe[e];
  }
  EXPECT_EQ(std::max(load[0], load[1]), 4098);
  EXPECT_TRUE(plan.concurrent);
}

// Called from inside a parallel region (nested regions get one thread), the concurrent
// schedule's groups owned by the missing thread must still run.
TEST(GroupedGemm, ConcurrentScheduleInsideAParallelRegion) {
  const int64_t k = 64, n = 48, experts = 6;
  const std::vector<int64_t> counts{37, 0, 45, 18, 40, 60};
  const int64_t m = std::accumulate(counts.begin(), counts.end(), int64_t{0});
  const GroupList groups = GroupList::Make(counts, GroupListType::kCounts, m);
  ASSERT_TRUE(internal::PlanGroups(groups, 2, internal::GroupThreads::kAnyCount).concurrent);
  const MxTensor xq = QuantizeRowwise(MakeF32({m, k}, RandomValues(m * k, 81, -2, 2)), {});
  const MxTensor wq =
      QuantizeRowwise(MakeF32({experts, n, k}, RandomValues(experts * n * k, 82, -2, 2)), {});
  GemmOptions o;
  o.threads = 2;
  const Tensor want = MxGroupedGemm(xq, wq, groups, o);
  std::vector<Tensor> got(2);
#pragma omp parallel num_threads(2)
  got[omp_get_thread_num()] = MxGroupedGemm(xq, wq, groups, o);
  for (const Tensor& g : got) {
    if (!g.defined()) continue;  // a team of one
    EXPECT_EQ(std::memcmp(g.raw(), want.raw(), want.NumBytes()), 0);
  }
  EXPECT_TRUE(got[0].defined());
}

TEST(GroupedGemm, BadInputsRaise) {
  const GroupList g2 = GroupList::Make(std::vector<int64_t>{10, 22}, GroupListType::kCounts, 32);
  const MxTensor xq = QuantizeRowwise(Tensor::Zeros(DType::kF32, {32, 64}), {});
  const MxTensor w3 = QuantizeRowwise(Tensor::Zeros(DType::kF32, {3, 16, 64}), {});
  EXPECT_THROW(MxGroupedGemm(xq, w3, g2), Error);  // 2 groups, 3 experts
  const MxTensor w2k = QuantizeRowwise(Tensor::Zeros(DType::kF32, {2, 16, 32}), {});
  EXPECT_THROW(MxGroupedGemm(xq, w2k, g2), Error);  // contracts 64 vs 32
  const GroupList other = GroupList::Make(std::vector<int64_t>{16, 16}, GroupListType::kCounts, 32);
  const MxTensor a = QuantizeGrouped(Tensor::Zeros(DType::kF32, {32, 8}), g2, {});
  const MxTensor b = QuantizeGrouped(Tensor::Zeros(DType::kF32, {32, 8}), other, {});
  EXPECT_THROW(MxGroupedWgrad(a, b), Error);
  EXPECT_THROW(MxGroupedWgrad(xq, xq), Error);  // not token-grouped
}

}  // namespace
}  // namespace mxtrain
