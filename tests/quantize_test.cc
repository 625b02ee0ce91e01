// The quantizers: golden blocks of NUMERICS.md §8, every fast path against the scalar
// reference byte for byte (every SIMD target, f32 and bf16, both formats, all rules, shape
// sweeps, 3-D, groups) and argument errors. Dequantization and MX layouts:
// dequantize_test.cc; memory accounting: memory_test.cc.
#include "mxtrain/quantize.h"

#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <initializer_list>
#include <optional>
#include <random>
#include <vector>

#include "mxtrain/error.h"
#include "mxtrain/simd.h"
#include "mxtrain/testing.h"
#include "per_target_test.h"
#include "quantize/scale_table.h"
#include "test_util.h"

namespace mxtrain {
namespace {

using testing_util::BytesEqual;
using testing_util::EdgeMix;
using testing_util::FirstDifference;
using testing_util::MakeBf16;
using testing_util::MakeF32;

using testing_util::kFormats;
using testing_util::kRules;

std::string Describe(const QuantizeOptions& o, const Tensor& x) {
  return StrCat(Name(o.format), "/", Name(o.rule), " ", Name(x.dtype()), " ", x.shape().ToString(),
                " target ", CurrentSimdTarget());
}

void ExpectSame(const MxTensor& fast, const MxTensor& ref, const std::string& what) {
  ASSERT_EQ(fast.axis(), ref.axis()) << what;
  ASSERT_TRUE(BytesEqual(fast.scales(), ref.scales()))
      << what << ": scales differ at byte " << FirstDifference(fast.scales(), ref.scales());
  ASSERT_TRUE(BytesEqual(fast.data(), ref.data()))
      << what << ": data differ at byte " << FirstDifference(fast.data(), ref.data());
}

// --- Golden blocks (NUMERICS.md §8) ----------------------------------------------------

struct Golden {
  const char* why;
  std::vector<uint32_t> bits;  // 32 fp32 patterns (or bf16 patterns when bf16)
  bool bf16;
  uint8_t floor_scale, floor_elem, rceil_scale, rceil_elem;
  int odd_index;  // element with a different expected code, or -1
  uint8_t odd_elem;
};

std::vector<uint32_t> Fill(uint32_t bits, int odd = -1, uint32_t odd_bits = 0) {
  std::vector<uint32_t> v(32, bits);
  if (odd >= 0) v[odd] = odd_bits;
  return v;
}

std::vector<Golden> GoldenCases() {
  return {
      {"all zero: scale 0", Fill(0), false, 0, 0x00, 0, 0x00, -1, 0},
      {"2^-126 with b = 0 reads 2.0", Fill(0x00800000), false, 0, 0x40, 0, 0x40, -1, 0},
      {"448 exactly fits at b = 127", Fill(0x43E00000), false, 127, 0x7E, 127, 0x7E, -1, 0},
      {"-448 keeps its sign", Fill(0xC3E00000), false, 127, 0xFE, 127, 0xFE, -1, 0},
      {"fp32 max: floor saturates, rceil rounds up", Fill(0x7F7FFFFF), false, 246, 0x7E, 247, 0x78,
       -1, 0},
      {"480 above max normal", Fill(0x43F00000), false, 127, 0x7E, 128, 0x77, -1, 0},
      {"just above 3.5: mantissa > 1.75", Fill(0x40600001), false, 120, 0x7E, 121, 0x76, -1, 0},
      {"just below 512", Fill(0x43FFFFFF), false, 127, 0x7E, 128, 0x78, -1, 0},
      {"a min subnormal beside 1.0 flushes to 0", Fill(0x3F800000, 5, 0x1), false, 119, 0x78, 119,
       0x78, 5, 0x00},
      {"all fp32 min subnormal", Fill(0x1), false, 0, 0x00, 0, 0x00, -1, 0},
      {"bf16 min subnormal 2^-133 -> 2^-6", Fill(0x0001), true, 0, 0x08, 0, 0x08, -1, 0},
      {"one NaN poisons the block", Fill(0x3F800000, 9, 0x7FC00000), false, 0xFF, 0x7F, 0xFF, 0x7F,
       -1, 0},
      {"one Inf poisons the block", Fill(0x3F800000, 31, 0xFF800000), false, 0xFF, 0x7F, 0xFF, 0x7F,
       -1, 0},
  };
}

Tensor GoldenInput(const Golden& g) {
  if (g.bf16) {
    Tensor t = Tensor::Empty(DType::kBF16, {1, 32});
    for (int i = 0; i < 32; ++i) t.data<uint16_t>()[i] = static_cast<uint16_t>(g.bits[i]);
    return t;
  }
  Tensor t = Tensor::Empty(DType::kF32, {1, 32});
  for (int i = 0; i < 32; ++i) t.data<float>()[i] = F32FromBits(g.bits[i]);
  return t;
}

void CheckGolden(const Golden& g, ScaleRule rule, const MxTensor& q, const std::string& path) {
  const bool floor = rule == ScaleRule::kFloor;
  const uint8_t scale = floor ? g.floor_scale : g.rceil_scale;
  const uint8_t elem = floor ? g.floor_elem : g.rceil_elem;
  ASSERT_EQ(q.scales().data<uint8_t>()[0], scale) << g.why << " " << Name(rule) << " " << path;
  for (int i = 0; i < 32; ++i) {
    const uint8_t want = i == g.odd_index ? g.odd_elem : elem;
    ASSERT_EQ(q.data().data<uint8_t>()[i], want)
        << g.why << " " << Name(rule) << " " << path << " element " << i;
  }
}

TEST(Golden, NumericsTableOnReference) {
  for (const Golden& g : GoldenCases()) {
    for (ScaleRule rule : {ScaleRule::kFloor, ScaleRule::kRceil}) {
      const QuantizeOptions o{ElementFormat::kE4M3, rule};
      const Tensor x = GoldenInput(g);
      CheckGolden(g, rule, ref::QuantizeRowwise(x, o), "reference rowwise");
      // The same block as a 32x1 column exercises the columnwise kernels.
      CheckGolden(g, rule, ref::QuantizeColumnwise(x.Reshape({32, 1}), o), "reference columnwise");
    }
  }
}

// The tests below run once per SIMD target of this machine (per_target_test.h), the target
// forced for the whole test.
class GoldenPerTarget : public testing_util::SimdTargetTest {};
MXTRAIN_INSTANTIATE_PER_SIMD_TARGET(GoldenPerTarget);

TEST_P(GoldenPerTarget, NumericsTable) {
  const std::string& target = GetParam();
  for (const Golden& g : GoldenCases()) {
    for (ScaleRule rule : {ScaleRule::kFloor, ScaleRule::kRceil}) {
      const QuantizeOptions o{ElementFormat::kE4M3, rule};
      const Tensor x = GoldenInput(g);
      const Tensor xt = x.Reshape({32, 1});
      CheckGolden(g, rule, QuantizeRowwise(x, o), "rowwise " + target);
      CheckGolden(g, rule, QuantizeColumnwise(xt, o), "columnwise " + target);
      CheckGolden(g, rule, QuantizeDual(x, o).rowwise, "dual " + target);
    }
  }
}

// --- Fast paths against the reference ---------------------------------------------------

// The columnwise code stores the kernels can use (CodeStores): both are checked wherever
// columnwise codes are, whatever kAuto picks on this machine.
constexpr CodeStores kCodeStores[] = {CodeStores::kCached, CodeStores::kStreaming};

QuantizeOptions WithStores(QuantizeOptions o, CodeStores stores) {
  o.code_stores = stores;
  return o;
}

void CheckAllPaths(const Tensor& x, const QuantizeOptions& o) {
  const std::string what = Describe(o, x);
  const MxTensor ref_row = ref::QuantizeRowwise(x, o);
  const MxTensor ref_col = ref::QuantizeColumnwise(x, o);
  ExpectSame(QuantizeRowwise(x, o), ref_row, "rowwise " + what);
  for (CodeStores stores : kCodeStores) {
    const QuantizeOptions os = WithStores(o, stores);
    const std::string how = stores == CodeStores::kStreaming ? " streamed" : " cached";
    ExpectSame(QuantizeColumnwise(x, os), ref_col, "columnwise " + what + how);
    const DualMx dual = QuantizeDual(x, os);
    ExpectSame(dual.rowwise, ref_row, "dual rowwise " + what + how);
    ExpectSame(dual.columnwise, ref_col, "dual columnwise " + what + how);
  }
}

class FastPathsPerTarget : public testing_util::SimdTargetTest {};
MXTRAIN_INSTANTIATE_PER_SIMD_TARGET(FastPathsPerTarget);

TEST_P(FastPathsPerTarget, ShapeSweep) {
  // Remainders in both dimensions: every size 1..70 against a few partners.
  uint64_t seed = 1000;
  for (int64_t m = 1; m <= 70; ++m) {
    for (int64_t k : {int64_t{1}, int64_t{17}, int64_t{32}, int64_t{33}, int64_t{70}}) {
      for (int size_swap = 0; size_swap < 2; ++size_swap) {
        const Shape shape = size_swap ? Shape{k, m} : Shape{m, k};
        const std::vector<float> v = EdgeMix(m * k, ++seed);
        const QuantizeOptions o{kFormats[seed % 2], kRules[seed % 4]};
        SCOPED_TRACE(StrCat("seed ", seed));
        CheckAllPaths(MakeF32(shape, v), o);
        CheckAllPaths(MakeBf16(shape, v), o);
      }
    }
  }
}

// CheckAllPaths on the current target, every format and rule, for each shape: f32 and
// bf16 of values(shape, seed), a new seed each time from `seed` on.
template <typename Values>
void CheckEveryFormatRule(std::initializer_list<Shape> shapes, uint64_t seed, Values values) {
  for (ElementFormat f : kFormats) {
    for (ScaleRule r : kRules) {
      for (const Shape& shape : shapes) {
        const std::vector<float> v = values(shape, ++seed);
        SCOPED_TRACE(StrCat("seed ", seed));
        CheckAllPaths(MakeF32(shape, v), {f, r});
        CheckAllPaths(MakeBf16(shape, v), {f, r});
      }
    }
  }
}

TEST_P(FastPathsPerTarget, EveryFormatRuleAndDtype) {
  CheckEveryFormatRule(
      {Shape{96, 160}, Shape{3, 45, 77}, Shape{2, 2, 33, 64}, Shape{5, 1056}}, 5000,
      [](const Shape& shape, uint64_t seed) { return EdgeMix(shape.NumElements(), seed); });
}

TEST(FastPaths, LargeOddShapeAndThreads) {
  const Shape shape{993, 512};
  const std::vector<float> v = EdgeMix(shape.NumElements(), 77);
  const Tensor x = MakeF32(shape, v);
  const QuantizeOptions o{ElementFormat::kE4M3, ScaleRule::kRceil};
  CheckAllPaths(x, o);
  // Thread count never changes a byte.
  for (int threads : {1, 2, 3}) {
    QuantizeOptions ot = o;
    ot.threads = threads;
    ExpectSame(QuantizeColumnwise(x, ot), QuantizeColumnwise(x, o), StrCat("threads ", threads));
    ExpectSame(QuantizeDual(x, ot).rowwise, QuantizeRowwise(x, o), StrCat("threads ", threads));
  }
  // Fewer strips than threads: the strips split by column (2 strips, 3 threads: 2 pieces
  // each), and one strip for 2 threads.
  const Tensor wide = MakeF32({40, 4100}, EdgeMix(40 * 4100, 78));
  CheckAllPaths(wide, {ElementFormat::kE5M2, ScaleRule::kEven, 3});
  CheckAllPaths(MakeBf16({20, 4100}, EdgeMix(20 * 4100, 79)),
                {ElementFormat::kE4M3, ScaleRule::kRceil, 2});
}

// Data like a training tensor's, where most blocks are finite and take the 16-bit
// encoders (EdgeMix puts a NaN or Inf in most 32x32 areas): Gaussian values whose
// magnitude changes every 8 rows, exact zeros, lone values 2^-6 .. 2^-30 of the rest
// (element subnormals and zeros: the exact-path redo) and three NaN or Inf.
std::vector<float> TrainingLike(const Shape& shape, uint64_t seed) {
  const int64_t cols = shape[-1], rows = shape.NumElements() / cols;
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_int_distribution<int> pick(0, 999);
  std::vector<float> v(static_cast<size_t>(rows * cols));
  for (int64_t r = 0; r < rows; ++r) {
    const int band_exp = static_cast<int>((r / 8) * 37 % 60) - 30;
    for (int64_t c = 0; c < cols; ++c) {
      float x = std::ldexp(normal(rng), band_exp);
      const int p = pick(rng);
      if (p < 10)
        x = 0.0f;
      else if (p < 15)
        x = std::ldexp(x, -6 * (p - 9));  // 2^-6 .. 2^-30 of the rest
      v[static_cast<size_t>(r * cols + c)] = x;
    }
  }
  std::uniform_int_distribution<size_t> pos(0, v.size() - 1);
  for (int j = 0; j < 3; ++j) v[pos(rng)] = j == 0 ? NAN : (j == 1 ? INFINITY : -INFINITY);
  return v;
}

TEST_P(FastPathsPerTarget, TrainingLikeData) {
  // Full strips and blocks, a partial last block and strip, a batch of two.
  CheckEveryFormatRule({Shape{96, 640}, Shape{64, 96}, Shape{70, 200}, Shape{2, 32, 128}}, 9000,
                       TrainingLike);
}

TEST(CodeStores, NamesRoundTripAndUnknownNamesRaise) {
  for (CodeStores c : {CodeStores::kAuto, CodeStores::kCached, CodeStores::kStreaming}) {
    EXPECT_EQ(ParseCodeStores(Name(c)), c);
  }
  EXPECT_EQ(Name(CodeStores::kStreaming), "streaming");
  EXPECT_THROW(ParseCodeStores("nontemporal"), Error);
}

TEST(CodeStores, ExplicitChoicesHoldAndAutoStreamsOnlyLargeTensors) {
  const Tensor small = Tensor::Empty(DType::kBF16, {256, 1024});
  // Input and codes together at exactly the threshold (bf16: 3 bytes per element).
  const Tensor large = Tensor::Empty(DType::kBF16, {kStreamCodesMinBytes / 3 / 1024 + 1, 1024});
  for (const Tensor* x : {&small, &large}) {
    EXPECT_FALSE(StreamsColumnwiseCodes(*x, WithStores({}, CodeStores::kCached)));
    EXPECT_TRUE(StreamsColumnwiseCodes(*x, WithStores({}, CodeStores::kStreaming)));
  }
  EXPECT_FALSE(StreamsColumnwiseCodes(small, {}));
  EXPECT_TRUE(StreamsColumnwiseCodes(large, {}));
  const Tensor just_below = Tensor::Empty(DType::kBF16, {kStreamCodesMinBytes / 3 / 1024, 1024});
  EXPECT_FALSE(StreamsColumnwiseCodes(just_below, {}));
  // Streamed or not, the bytes are the same.
  const Tensor x = MakeBf16({2048, 4096}, EdgeMix(2048 * 4096, 31));
  const MxTensor auto_q = QuantizeColumnwise(x, {});
  ExpectSame(auto_q, QuantizeColumnwise(x, WithStores({}, CodeStores::kCached)), "auto vs cached");
  ExpectSame(auto_q, QuantizeColumnwise(x, WithStores({}, CodeStores::kStreaming)),
             "auto vs streamed");
}

TEST(CodeStores, DualStreamsItsRowwiseCodesOnAvx512TargetsOnly) {
  const Tensor large = Tensor::Empty(DType::kBF16, {kStreamCodesMinBytes / 3 / 1024 + 1, 1024});
  const Tensor ragged = Tensor::Empty(DType::kF32, {4096, 1000});  // K not whole blocks
  const Tensor small = Tensor::Empty(DType::kBF16, {256, 1024});
  for (const std::string& t : AvailableSimdTargets()) {
    ScopedSimdTarget scoped(t);
    const bool avx512 = t.rfind("AVX3", 0) == 0;  // AVX3, AVX3_DL, AVX3_ZEN4, AVX3_SPR
    EXPECT_EQ(StreamsDualRowwiseCodes(large, {}), avx512) << t;
    EXPECT_EQ(StreamsDualRowwiseCodes(small, WithStores({}, CodeStores::kStreaming)), avx512) << t;
    EXPECT_FALSE(StreamsDualRowwiseCodes(small, {})) << t;
    EXPECT_FALSE(StreamsDualRowwiseCodes(large, WithStores({}, CodeStores::kCached))) << t;
    EXPECT_FALSE(StreamsDualRowwiseCodes(ragged, WithStores({}, CodeStores::kStreaming))) << t;
  }
}

TEST(FastPaths, EmptyTensors) {
  for (const Shape& shape : {Shape{0, 64}, Shape{64, 0}, Shape{0, 0}, Shape{3, 0, 5}}) {
    const Tensor x = Tensor::Empty(DType::kF32, shape);
    const MxTensor q = QuantizeDual(x, {}).columnwise;
    EXPECT_EQ(q.shape(), shape);
    EXPECT_EQ(q.scales().shape(),
              MxTensor::ScaleShape(shape, BlockAxis::kColumnwise, std::nullopt));
    EXPECT_EQ(QuantizeRowwise(x, {}).data().NumElements(), 0);
  }
}

// --- The vector kernels' scale table and 16-bit encoder --------------------------------

TEST(ScaleTable, EqualsBlockScaleAtEveryBinadeEdgeAndAtRandom) {
  std::mt19937 rng(404);
  std::uniform_int_distribution<uint32_t> mantissa(0, 0x7FFFFF);
  for (ScaleRule rule : kRules) {
    for (ElementFormat f : kFormats) {
      const internal::ScaleTable& t = internal::ScaleTableFor(rule, f);
      int steps = 0;
      for (uint32_t e = 0; e < 256; ++e) {
        const uint32_t keep = t.entry[e] & 0x7FFFFF;
        steps += keep != 0x7FFFFF;
        std::vector<uint32_t> ms = {0,        1,        2,        0x3FFFFF, 0x400000,
                                    0x400001, 0x7FFFFE, 0x7FFFFF, keep};
        if (keep > 0) ms.push_back(keep - 1);
        if (keep < 0x7FFFFF) ms.push_back(keep + 1);
        for (int i = 0; i < 64; ++i) ms.push_back(mantissa(rng));
        for (uint32_t m : ms) {
          const uint32_t bits = (e << 23) | m;
          ASSERT_EQ(internal::ScaleFromTable(t, bits), BlockScale(rule, f, bits))
              << Name(rule) << " " << Name(f) << " amax bits " << std::hex << bits;
        }
      }
      // floor changes byte only between binades; the other rules inside most of them.
      if (rule == ScaleRule::kFloor) {
        EXPECT_EQ(steps, 0) << Name(f);
      } else {
        EXPECT_GT(steps, 200) << Name(rule) << " " << Name(f);
      }
    }
  }
}

// The fp32 kernels narrow their input to 16 bits with round-to-odd (NarrowToOdd, the low
// 16 bits OR-ed into bit 16) and take the amax of the narrowed values in the binades the
// table marks narrow-exact, the affine range among them: there every rule must give a
// narrowed amax the byte of the full one. Every binade, every 7-bit top of the mantissa, low
// halves at both ends and between. The binades not marked (rceil's tiniest) do change a
// byte, so the kernels' exact fallback is needed (FastPathsPerTarget.Fp32AmaxAtEveryThreshold).
TEST(ScaleTable, Fp32AmaxNarrowedToOddKeepsItsByteWhereMarked) {
  const auto narrowed = [](uint32_t bits) {
    return ((bits >> 16) | ((bits & 0xFFFFu) != 0 ? 1u : 0u)) << 16;
  };
  std::mt19937 rng(405);
  for (ScaleRule rule : kRules) {
    for (ElementFormat f : kFormats) {
      const internal::ScaleTable& t = internal::ScaleTableFor(rule, f);
      int unmarked = 0, unmarked_differ = 0;
      for (uint32_t e = 0; e < 256; ++e) {
        const bool exact = internal::NarrowExact(t, e);
        if (e >= t.affine_lo && e <= t.affine_hi) {
          ASSERT_TRUE(exact) << Name(rule) << " " << e;
        }
        unmarked += !exact;
        bool differs = false;
        for (uint32_t top = 0; top < 128; ++top) {
          for (uint32_t low : {0u, 1u, 2u, 0x7FFFu, 0x8000u, 0xFFFEu, 0xFFFFu,
                               static_cast<uint32_t>(rng() & 0xFFFFu)}) {
            const uint32_t bits = (e << 23) | (top << 16) | low;
            const bool same = BlockScale(rule, f, narrowed(bits)) == BlockScale(rule, f, bits);
            if (exact) {
              ASSERT_TRUE(same) << Name(rule) << " " << Name(f) << " amax bits " << std::hex
                                << bits;
            }
            differs |= !same;
          }
        }
        unmarked_differ += !exact && differs;
      }
      // Only rceil, through its rounded quotient, has binades to fall back in.
      if (rule == ScaleRule::kRceil) {
        EXPECT_GT(unmarked, 0) << Name(f);
      } else {
        EXPECT_EQ(unmarked, 0) << Name(rule) << " " << Name(f);
      }
      EXPECT_EQ(unmarked_differ, unmarked) << Name(rule) << " " << Name(f);
    }
  }
}

// The affine range the kernels use instead of the gather: its entries are exactly the
// exponent plus the one offset, and it covers every binade a block amax is likely to have
// (the kernel tests below run both sides: zero blocks and subnormal or huge amax gather).
TEST(ScaleTable, AffineRangeMatchesEntriesAndCoversTheNormalBinades) {
  for (ScaleRule rule : kRules) {
    for (ElementFormat f : kFormats) {
      const internal::ScaleTable& t = internal::ScaleTableFor(rule, f);
      ASSERT_LE(t.affine_lo, t.affine_hi);
      for (uint32_t e = t.affine_lo; e <= t.affine_hi; ++e) {
        ASSERT_EQ(t.entry[e], (e << 23) + t.affine_delta)
            << Name(rule) << " " << Name(f) << " " << e;
      }
      // 2^-100 .. 2^100: exponent fields 27 .. 227.
      EXPECT_LE(t.affine_lo, 27u) << Name(rule) << " " << Name(f);
      EXPECT_GE(t.affine_hi, 227u) << Name(rule) << " " << Name(f);
      // Just outside, the entry breaks the pattern (else the run would be longer).
      if (t.affine_lo > 0) {
        EXPECT_NE(t.entry[t.affine_lo - 1], ((t.affine_lo - 1) << 23) + t.affine_delta);
      }
      if (t.affine_hi < 255) {
        EXPECT_NE(t.entry[t.affine_hi + 1], ((t.affine_hi + 1) << 23) + t.affine_delta);
      }
    }
  }
}

// Blocks whose first element sets the scale (a positive bf16 of exponent field es and a
// random mantissa) and whose other 31 run through every bf16 pattern of either sign with
// an exponent field in [es - 33, es] below it: every element pattern the 16-bit encoder
// can meet at every scale, zeros and input subnormals included. As rows ([blocks / 64,
// 64 * 32]) and as columns ([32, blocks]), so that every kernel sees each block whole.
std::pair<Tensor, Tensor> EveryBf16PatternInBlocks() {
  std::mt19937 rng(99);
  std::vector<std::array<uint16_t, 32>> blocks;
  for (int es = 1; es <= 254; ++es) {
    const uint16_t setter = static_cast<uint16_t>((es << 7) | (rng() & 0x7F));
    std::array<uint16_t, 32> block{};
    int fill = 0;
    block[fill++] = setter;
    for (int e = std::max(0, es - 33); e <= es; ++e) {
      for (int m = 0; m < 128; ++m) {
        for (uint16_t sign : {uint16_t{0}, uint16_t{0x8000}}) {
          const uint16_t mag = static_cast<uint16_t>((e << 7) | m);
          if (mag > setter) continue;
          block[fill++] = static_cast<uint16_t>(sign | mag);
          if (fill == 32) {
            blocks.push_back(block);
            fill = 1;
          }
        }
      }
    }
    if (fill > 1) {
      std::fill(block.begin() + fill, block.end(), uint16_t{0});
      blocks.push_back(block);
    }
  }
  // 64 blocks per row, so that the rowwise kernels take their batched paths.
  blocks.resize(CeilDiv(static_cast<int64_t>(blocks.size()), 64) * 64, std::array<uint16_t, 32>{});
  const int64_t n = static_cast<int64_t>(blocks.size());
  Tensor rows = Tensor::Empty(DType::kBF16, {n / 64, 64 * 32});
  Tensor cols = Tensor::Empty(DType::kBF16, {32, n});
  for (int64_t b = 0; b < n; ++b) {
    for (int64_t i = 0; i < 32; ++i) {
      rows.data<uint16_t>()[b * 32 + i] = blocks[b][i];
      cols.data<uint16_t>()[i * n + b] = blocks[b][i];
    }
  }
  return {std::move(rows), std::move(cols)};
}

TEST_P(FastPathsPerTarget, EveryBf16PatternAtEveryScale) {
  const auto [rows, cols] = EveryBf16PatternInBlocks();
  ASSERT_GT(cols.shape()[1], 50000);
  for (ElementFormat f : kFormats) {
    for (ScaleRule r : {ScaleRule::kRceil, ScaleRule::kFloor}) {
      const QuantizeOptions o{f, r};
      const MxTensor ref_row = ref::QuantizeRowwise(rows, o);
      const MxTensor ref_col = ref::QuantizeColumnwise(cols, o);
      const std::string what = Describe(o, rows);
      ExpectSame(QuantizeRowwise(rows, o), ref_row, "rowwise " + what);
      ExpectSame(QuantizeColumnwise(cols, o), ref_col, "columnwise " + what);
      ExpectSame(QuantizeDual(rows, o).rowwise, ref_row, "dual rowwise " + what);
      ExpectSame(QuantizeDual(cols, o).columnwise, ref_col, "dual columnwise " + what);
    }
  }
}

// fp32 inputs reach the 16-bit encoder narrowed with round-to-odd: values on a rounding
// tie of the element format, and a few ulp either side of it (sticky bits the low 16 bits
// alone carry), must round as the fp32 value does. Each block: a setter fixing the scale,
// then ties, tie +- 1, 2 and 2^16 ulp, and element values exactly.
TEST_P(FastPathsPerTarget, Fp32TiesAndStickyBits) {
  std::vector<float> v;
  for (int k = -120; k <= 120; k += 7) {
    const float setter = std::ldexp(448.0f, k);
    for (ElementFormat f : kFormats) {
      std::vector<float> companions;
      for (int code = 1; code < (f == ElementFormat::kE4M3 ? 0x7E : 0x7B); ++code) {
        const double lo = DecodeElement(f, static_cast<uint8_t>(code));
        const double hi = DecodeElement(f, static_cast<uint8_t>(code + 1));
        const float tie = static_cast<float>(std::ldexp((lo + hi) / 2, k));
        const uint32_t bits = F32Bits(tie);
        for (int64_t d : {0, 1, -1, 2, -2, 1 << 16, -(1 << 16), (1 << 16) - 1}) {
          companions.push_back(F32FromBits(static_cast<uint32_t>(bits + d)));
        }
        companions.push_back(static_cast<float>(-std::ldexp(lo, k)));
      }
      for (size_t i = 0; i < companions.size(); i += 31) {
        v.push_back(setter);
        for (size_t j = i; j < i + 31; ++j)
          v.push_back(j < companions.size() ? companions[j] : 0.0f);
      }
    }
  }
  v.resize(CeilDiv(static_cast<int64_t>(v.size()), 64 * 32) * 64 * 32, 0.0f);
  const int64_t n = static_cast<int64_t>(v.size()) / 32;
  std::vector<float> t(v.size());
  for (int64_t b = 0; b < n; ++b) {
    for (int64_t i = 0; i < 32; ++i) t[i * n + b] = v[b * 32 + i];
  }
  const Tensor rows = MakeF32({n / 64, 64 * 32}, v);
  const Tensor cols = MakeF32({32, n}, t);
  for (ElementFormat f : kFormats) {
    for (ScaleRule r : kRules) {
      const QuantizeOptions o{f, r};
      const MxTensor ref_row = ref::QuantizeRowwise(rows, o);
      const MxTensor ref_col = ref::QuantizeColumnwise(cols, o);
      ExpectSame(QuantizeRowwise(rows, o), ref_row, "rowwise " + Describe(o, rows));
      ExpectSame(QuantizeColumnwise(cols, o), ref_col, "columnwise " + Describe(o, cols));
      ExpectSame(QuantizeDual(rows, o).rowwise, ref_row, "dual " + Describe(o, rows));
      ExpectSame(QuantizeDual(cols, o).columnwise, ref_col, "dual columnwise " + Describe(o, cols));
    }
  }
}

// The dual kernel takes an fp32 strip's amax from its 16-bit copy (round-to-odd), which
// gives the full amax's scale only in the binades the table marks (NarrowExact); in the
// others, rceil's tiniest, it must take the fp32 amax again. Blocks and columns whose amax
// lies near the threshold of every unmarked binade (and of a few marked ones), with the low
// 16 bits that narrowing folds away, as rows (batched, lone and partial blocks) and columns
// (vector and scalar tails of the scale step).
TEST_P(FastPathsPerTarget, Fp32AmaxWhereNarrowingWouldChangeTheScale) {
  std::mt19937 rng(406);
  for (ElementFormat f : kFormats) {
    const internal::ScaleTable& t = internal::ScaleTableFor(ScaleRule::kRceil, f);
    std::vector<uint32_t> amax;
    int unmarked = 0;
    for (uint32_t e = 255; e-- > 0;) {  // the unmarked last: the columns' scalar tail
      const bool marked = internal::NarrowExact(t, e);
      if (marked && e != 100 && e != t.affine_lo) continue;
      unmarked += !marked;
      const uint32_t keep = t.entry[e] & 0x7FFFFF;
      for (int64_t d : {-0x10000, -2, -1, 0, 1, 2, 0xFFFF, 0x10000}) {
        const int64_t m = std::clamp<int64_t>(int64_t{keep} + d, 0, 0x7FFFFF);
        amax.push_back((e << 23) | static_cast<uint32_t>(m));
      }
    }
    ASSERT_GT(unmarked, 0) << Name(f);
    // Block b: its amax at a varying place, the rest of smaller magnitude.
    std::vector<float> blocks;
    for (size_t b = 0; b < amax.size(); ++b) {
      for (int i = 0; i < 32; ++i) {
        uint32_t bits = amax[b];
        if (i != static_cast<int>(b % 32)) bits -= std::min<uint32_t>(bits, 1 + rng() % 0x20000);
        if (rng() % 2) bits |= 0x80000000u;
        blocks.push_back(F32FromBits(bits));
      }
    }
    const int64_t n = static_cast<int64_t>(amax.size());
    for (int64_t width : {int64_t{18 * 32}, int64_t{18 * 32 - 5}}) {
      // As rows: the blocks end to end, zero-padded.
      const int64_t rows = CeilDiv(n * 32, width);
      std::vector<float> r(static_cast<size_t>(rows * width), 0.0f);
      std::copy(blocks.begin(), blocks.end(), r.begin());
      SCOPED_TRACE(StrCat("rows of ", width));
      CheckAllPaths(MakeF32({rows, width}, r), {f, ScaleRule::kRceil});
    }
    for (int64_t extra : {int64_t{0}, int64_t{3}}) {
      // As columns: block b down column extra + b of 32 rows (the last columns are the
      // scale step's scalar tail).
      const int64_t cols = n + extra;
      std::vector<float> c(static_cast<size_t>(32 * cols), 0.0f);
      for (int64_t b = 0; b < n; ++b) {
        for (int64_t i = 0; i < 32; ++i) c[i * cols + extra + b] = blocks[b * 32 + i];
      }
      SCOPED_TRACE(StrCat("columns ", cols));
      CheckAllPaths(MakeF32({32, cols}, c), {f, ScaleRule::kRceil});
    }
  }
}

// --- Token-grouped columnwise -------------------------------------------------------------

std::vector<std::vector<int64_t>> GroupCounts() {
  return {{100},           {0, 100},     {100, 0},          {1, 1, 1, 97},
          {31, 33, 0, 36}, {32, 32, 36}, {0, 0, 0, 100, 0}, {5, 0, 64, 0, 31}};
}

TEST(Grouped, ReferenceEqualsColumnwisePerGroup) {
  // Independent of the grouped code path: quantize each group's rows on their own.
  const int64_t m = 100, k = 45;
  const std::vector<float> v = EdgeMix(m * k, 31);
  const Tensor x = MakeF32({m, k}, v);
  for (const auto& counts : GroupCounts()) {
    const GroupList groups = GroupList::Make(counts, GroupListType::kCounts, m);
    const MxTensor q = ref::QuantizeGrouped(x, groups, {});
    ASSERT_EQ(q.scales().shape(), (Shape{groups.ScaleRows(), k}));
    for (int g = 0; g < groups.num_groups(); ++g) {
      if (groups.size(g) == 0) continue;
      std::vector<float> rows(v.begin() + groups.begin(g) * k, v.begin() + groups.end(g) * k);
      const MxTensor part = ref::QuantizeColumnwise(MakeF32({groups.size(g), k}, rows), {});
      ASSERT_EQ(std::memcmp(q.data().data<uint8_t>() + groups.begin(g) * k, part.data().raw(),
                            part.data().NumBytes()),
                0)
          << "group " << g;
      ASSERT_EQ(std::memcmp(q.scales().data<uint8_t>() + groups.ScaleRowBegin(g) * k,
                            part.scales().raw(), part.scales().NumBytes()),
                0)
          << "group " << g;
    }
  }
}

class GroupedPerTarget : public testing_util::SimdTargetTest {};
MXTRAIN_INSTANTIATE_PER_SIMD_TARGET(GroupedPerTarget);

TEST_P(GroupedPerTarget, FastAndDualEqualReference) {
  uint64_t seed = 300;
  for (const auto& counts : GroupCounts()) {
    for (int64_t k : {int64_t{7}, int64_t{64}, int64_t{129}, int64_t{320}, int64_t{2100}}) {
      const std::vector<float> v = EdgeMix(100 * k, ++seed);
      for (GroupListType type : {GroupListType::kCounts, GroupListType::kCumsum}) {
        std::vector<int64_t> list = counts;
        if (type == GroupListType::kCumsum) {
          for (size_t i = 1; i < list.size(); ++i) list[i] += list[i - 1];
        }
        const GroupList groups = GroupList::Make(list, type, 100);
        const QuantizeOptions o{kFormats[seed % 2], kRules[seed % 4]};
        for (const Tensor& x : {MakeF32({100, k}, v), MakeBf16({100, k}, v)}) {
          const std::string what =
              StrCat("grouped ", groups.ToString(), " ", Describe(o, x), " seed ", seed);
          const MxTensor want = ref::QuantizeGrouped(x, groups, o);
          for (CodeStores stores : kCodeStores) {
            const QuantizeOptions os = WithStores(o, stores);
            const std::string how = stores == CodeStores::kStreaming ? " streamed" : " cached";
            ExpectSame(QuantizeGrouped(x, groups, os), want, what + how);
            // The dual form (MoE forward / backward): both layouts from one pass.
            const DualMx dual = QuantizeDualGrouped(x, groups, os);
            ExpectSame(dual.columnwise, want, "dual " + what + how);
            ExpectSame(dual.rowwise, ref::QuantizeRowwise(x, o), "dual rowwise " + what + how);
          }
        }
      }
    }
  }
}

TEST(Grouped, BadGroupListsRaise) {
  const int64_t m = 10;
  auto make = [&](std::vector<int64_t> v, GroupListType t) { return GroupList::Make(v, t, m); };
  EXPECT_THROW(make({5, 3, 10}, GroupListType::kCumsum), Error);  // not monotonic
  EXPECT_THROW(make({5, 9}, GroupListType::kCumsum), Error);      // does not end at M
  EXPECT_THROW(make({-1, 10}, GroupListType::kCumsum), Error);    // negative end
  EXPECT_THROW(make({5, -1, 6}, GroupListType::kCounts), Error);  // negative count
  EXPECT_THROW(make({5, 4}, GroupListType::kCounts), Error);      // sums to 9
  EXPECT_THROW(make({5, 6}, GroupListType::kCounts), Error);      // sums to 11
  EXPECT_THROW(make({}, GroupListType::kCounts), Error);          // empty
  EXPECT_NO_THROW(make({0, 10, 10}, GroupListType::kCumsum));
  const Tensor x = Tensor::Zeros(DType::kF32, {10, 4});
  const GroupList other = GroupList::Make(std::vector<int64_t>{12}, GroupListType::kCounts, 12);
  EXPECT_THROW(QuantizeGrouped(x, other, {}), Error);
  EXPECT_THROW(QuantizeDualGrouped(x, other, {}), Error);
  EXPECT_THROW(
      QuantizeGrouped(Tensor::Zeros(DType::kF32, {2, 5, 4}),
                      GroupList::Make(std::vector<int64_t>{5}, GroupListType::kCounts, 5), {}),
      Error);
}

// --- Errors ----------------------------------------------------------------------------

TEST(Errors, BadInputsRaise) {
  EXPECT_THROW(QuantizeRowwise(Tensor::Zeros(DType::kF32, {32}), {}), Error);
  EXPECT_THROW(QuantizeColumnwise(Tensor::Zeros(DType::kU8, {32, 32}), {}), Error);
  EXPECT_THROW(QuantizeDual(Tensor(), {}), Error);
  EXPECT_THROW(Dequantize(QuantizeRowwise(Tensor::Zeros(DType::kF32, {2, 32}), {}), DType::kU8),
               Error);
  EXPECT_THROW(ForceSimdTarget("NEON9000"), Error);
  // A negative thread count is an error, not "all cores" (0 is all cores).
  QuantizeOptions o;
  o.threads = -1;
  EXPECT_THROW(QuantizeRowwise(Tensor::Zeros(DType::kF32, {2, 32}), o), Error);
  EXPECT_THROW(
      Dequantize(QuantizeRowwise(Tensor::Zeros(DType::kF32, {2, 32}), {}), DType::kF32, -2), Error);
  o.threads = 0;
  EXPECT_NO_THROW(QuantizeRowwise(Tensor::Zeros(DType::kF32, {2, 32}), o));
}

}  // namespace
}  // namespace mxtrain

#include "quantize/kernels.h"

namespace mxtrain {
namespace {

TEST(Simd, ForcingATargetSwitchesTheKernels) {
  const std::vector<std::string> targets = AvailableSimdTargets();
  ASSERT_FALSE(targets.empty());
  EXPECT_EQ(targets.back(), "SCALAR");  // the portable path is always compiled and runnable
  for (const std::string& t : targets) {
    ScopedSimdTarget scoped(t);
    EXPECT_EQ(CurrentSimdTarget(), t);
    EXPECT_EQ(std::string(internal::CurrentQuantKernels().target), t);
    EXPECT_EQ(std::string(internal::QuantKernelsForTarget(t).target), t);
  }
  EXPECT_EQ(CurrentSimdTarget(), targets.front());
  // Listing the targets must not move the kernels off the chosen one (under the cpu_caps
  // label: off the cap): Highway re-detects the CPU when asked without a target mock.
  EXPECT_EQ(AvailableSimdTargets(), targets);
  EXPECT_EQ(std::string(internal::CurrentQuantKernels().target), targets.front());
  for (const std::string& t : targets) {
    ScopedSimdTarget scoped(t);
    EXPECT_EQ(AvailableSimdTargets().front(), t);
    EXPECT_EQ(std::string(internal::CurrentQuantKernels().target), t);
  }
  EXPECT_EQ(std::string(internal::CurrentQuantKernels().target), targets.front());
}

}  // namespace
}  // namespace mxtrain
