// The caller's floating-point environment changes no result (src/fp_env.h): with
// flush-to-zero, denormals-are-zero, round-toward-zero and trapping exceptions set on the
// calling thread and on OpenMP's pool threads, every quantizer (each SIMD target), every MX GEMM
// path, the dequantizer, the casts and row sums, and the portable high-precision GEMM give the
// bytes that the references give in the default environment, and the caller's environment is back
// afterwards. The inputs hold fp32 and bf16 subnormals, whole blocks of them, and GEMM operands
// whose products and sums fall below fp32's normal range (the exact path), so a flushed value shows
// up as a wrong byte.
#include <gtest/gtest.h>
#include <omp.h>
#include <xmmintrin.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "gemm_test_util.h"
#include "mxtrain/elementwise.h"
#include "mxtrain/gemm.h"
#include "mxtrain/hp_gemm.h"
#include "mxtrain/quantize.h"
#include "mxtrain/testing.h"
#include "per_target_test.h"
#include "test_util.h"

namespace mxtrain {
namespace {

using testing_util::BytesEqual;
using testing_util::EdgeMix;
using testing_util::FirstDifference;
using testing_util::MakeBf16;
using testing_util::MakeF32;
using testing_util::RandomValues;

// FTZ (bit 15), DAZ (bit 6), rounding toward zero (bits 13-14), and the invalid,
// divide-by-zero and overflow exceptions unmasked (bits 7, 9, 10 clear, as feenableexcept
// leaves them): an operation of the library on NaN or Inf inputs outside the guard would
// raise SIGFPE.
constexpr unsigned kHostile = (0x1F80u & ~0x0680u) | 0x8000u | 0x0040u | 0x6000u;
constexpr unsigned kDefault = 0x1F80u;
constexpr unsigned kControl = 0xFFC0u;
constexpr int kThreads = 3;  // more than the cores of CI: the pool holds at least 2 workers

// Every thread of a team of kThreads + 1 (the calling one and the pool's) with MXCSR
// controls `csr`.
void SetEveryThread(unsigned csr) {
#pragma omp parallel num_threads(kThreads + 1)
  _mm_setcsr(csr);
  _mm_setcsr(csr);
}

// True if every thread of such a team has controls `csr`.
bool EveryThreadHas(unsigned csr) {
  int wrong = 0;
#pragma omp parallel num_threads(kThreads + 1) reduction(+ : wrong)
  wrong += (_mm_getcsr() & kControl) != csr;
  return wrong == 0 && (_mm_getcsr() & kControl) == csr;
}

// Runs `fn` in the hostile environment, checks that the environment is still that
// afterwards, and restores the default.
template <class Fn>
auto Hostile(Fn&& fn) {
  SetEveryThread(kHostile);
  auto result = fn();
  const bool kept = EveryThreadHas(kHostile);
  SetEveryThread(kDefault);
  EXPECT_TRUE(kept) << "the caller's floating-point environment was not restored";
  return result;
}

void ExpectSame(const Tensor& want, const Tensor& got, const std::string& what) {
  EXPECT_TRUE(BytesEqual(want, got))
      << what << ": first differing byte " << FirstDifference(want, got);
}

void ExpectSame(const MxTensor& want, const MxTensor& got, const std::string& what) {
  ExpectSame(want.data(), got.data(), what + " codes");
  ExpectSame(want.scales(), got.scales(), what + " scales");
}

// fp32 values whose 32 x 32 tiles are, in turn, EdgeMix's mix, all fp32 subnormals, all
// the smallest subnormal, and tiny normals whose block scales are subnormal in fp32.
std::vector<float> SubnormalHeavy(int64_t rows, int64_t cols, uint64_t seed) {
  std::vector<float> v = EdgeMix(rows * cols, seed);
  std::mt19937_64 rng(seed + 1);
  std::uniform_int_distribution<uint32_t> bits;
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) {
      float& x = v[static_cast<size_t>(r * cols + c)];
      const uint32_t sign = bits(rng) & 0x80000000u;
      switch ((r / 32 + c / 32) % 4) {
        case 1:
          x = F32FromBits(sign | (bits(rng) & 0x007FFFFFu));
          break;
        case 2:
          x = F32FromBits(sign | 1u);
          break;
        case 3:
          x = std::ldexp(static_cast<float>(bits(rng) % 1000) / 1000.0f, -120);
          break;
        default:
          break;
      }
    }
  }
  return v;
}

bool HasSubnormal(const std::vector<float>& v) {
  for (float x : v) {
    if (std::fpclassify(x) == FP_SUBNORMAL) return true;
  }
  return false;
}

class FpEnvPerTarget : public testing_util::SimdTargetTest {};
MXTRAIN_INSTANTIATE_PER_SIMD_TARGET(FpEnvPerTarget);

TEST_P(FpEnvPerTarget, QuantizersIgnoreTheCallersEnvironment) {
  const int64_t rows = 96, cols = 544;  // 3 x 17 blocks: vector loops and their tails
  const std::vector<float> values = SubnormalHeavy(rows, cols, 11);
  ASSERT_TRUE(HasSubnormal(values));
  const GroupList groups =
      GroupList::Make(std::vector<int64_t>{40, 40, 96}, GroupListType::kCumsum, rows);
  for (const bool bf16 : {false, true}) {
    const Tensor x = bf16 ? MakeBf16({rows, cols}, values) : MakeF32({rows, cols}, values);
    for (const ElementFormat format : testing_util::kFormats) {
      for (const ScaleRule rule :
           {ScaleRule::kRceil, ScaleRule::kFloor, ScaleRule::kCeil, ScaleRule::kEven}) {
        QuantizeOptions o;
        o.format = format;
        o.rule = rule;
        o.threads = kThreads;
        const std::string tag = GetParam() + (bf16 ? " bf16 " : " f32 ") +
                                std::string(Name(format)) + " " + std::string(Name(rule));
        const MxTensor row_ref = ref::QuantizeRowwise(x, o);
        const MxTensor col_ref = ref::QuantizeColumnwise(x, o);
        const MxTensor grouped_ref = ref::QuantizeGrouped(x, groups, o);
        ExpectSame(row_ref, Hostile([&] { return QuantizeRowwise(x, o); }), tag + " rowwise");
        ExpectSame(col_ref, Hostile([&] { return QuantizeColumnwise(x, o); }), tag + " columnwise");
        ExpectSame(grouped_ref, Hostile([&] { return QuantizeGrouped(x, groups, o); }),
                   tag + " grouped");
        const DualMx dual = Hostile([&] { return QuantizeDual(x, o); });
        ExpectSame(row_ref, dual.rowwise, tag + " dual rowwise");
        ExpectSame(col_ref, dual.columnwise, tag + " dual columnwise");
        const DualMx dual_grouped = Hostile([&] { return QuantizeDualGrouped(x, groups, o); });
        ExpectSame(grouped_ref, dual_grouped.columnwise, tag + " dual grouped columnwise");
        // The references themselves, in the hostile environment.
        ExpectSame(row_ref, Hostile([&] { return ref::QuantizeRowwise(x, o); }),
                   tag + " ref rowwise");
        ExpectSame(col_ref, Hostile([&] { return ref::QuantizeColumnwise(x, o); }),
                   tag + " ref columnwise");
        // Dequantized: subnormal block scales times codes give fp32 subnormals.
        for (const DType out : {DType::kF32, DType::kBF16}) {
          ExpectSame(Dequantize(row_ref, out, kThreads),
                     Hostile([&] { return Dequantize(row_ref, out, kThreads); }),
                     tag + " dequantize to " + std::string(Name(out)));
        }
      }
    }
  }
}

// Values near 1, except rows and columns 0, 3, 6, ... near 2^-68: a product of two such
// rows (fprop, dgrad) or columns (wgrad) sums products near 2^-136 into an fp32
// subnormal, through the exact path, and mixed tiles go through the fast paths.
Tensor TinyLines(int64_t rows, int64_t cols, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal;
  std::vector<float> v(static_cast<size_t>(rows * cols));
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) {
      const bool tiny = r % 3 == 0 || c % 3 == 0;
      v[static_cast<size_t>(r * cols + c)] = std::ldexp(normal(rng), tiny ? -68 : 0);
    }
  }
  return MakeF32({rows, cols}, v);
}

int64_t CountSubnormal(const Tensor& c) {
  int64_t count = 0;
  for (int64_t i = 0; i < c.NumElements(); ++i) {
    count += std::fpclassify(c.data<float>()[i]) == FP_SUBNORMAL;
  }
  return count;
}

class FpEnvPerPath : public testing_util::GemmPathTest {};
MXTRAIN_INSTANTIATE_PER_GEMM_PATH(FpEnvPerPath);

TEST_P(FpEnvPerPath, GemmsIgnoreTheCallersEnvironment) {
  const int64_t m = 80, n = 72, k = 160;
  const testing_util::TrainingOperands o = testing_util::QuantizeTrainingOperands(
      TinyLines(m, k, 5), TinyLines(n, k, 6), TinyLines(m, n, 7));
  GemmOptions g;
  g.threads = kThreads;
  struct Case {
    const char* name;
    const MxTensor &a, &b;
  };
  for (const Case& c : {Case{"fprop", o.x_row, o.w_row}, Case{"dgrad", o.dy_row, o.w_col},
                        Case{"wgrad", o.dy_col, o.x_col}}) {
    const std::string tag = GetParam() + " " + c.name;
    const Tensor want = MxGemm(c.a, c.b, g);
    testing_util::ExpectWithinBound(want, c.a, c.b, tag);
    EXPECT_GT(CountSubnormal(want), 0) << tag << ": no subnormal output, no flush to see";
    ExpectSame(want, Hostile([&] { return MxGemm(c.a, c.b, g); }), tag);
    GemmOptions bf = g;
    bf.out_dtype = DType::kBF16;
    ExpectSame(MxGemm(c.a, c.b, bf), Hostile([&] { return MxGemm(c.a, c.b, bf); }),
               tag + " bf16 out");
  }
  // Grouped fprop and wgrad, through the same kernels.
  const GroupList groups =
      GroupList::Make(std::vector<int64_t>{24, 0, 56}, GroupListType::kCounts, m);
  const Tensor w3 = TinyLines(3 * n, k, 9).Reshape({3, n, k});
  const MxTensor w3_row = QuantizeRowwise(w3, QuantizeOptions{});
  ExpectSame(MxGroupedGemm(o.x_row, w3_row, groups, g),
             Hostile([&] { return MxGroupedGemm(o.x_row, w3_row, groups, g); }),
             GetParam() + " grouped fprop");
  const Tensor x = TinyLines(m, k, 5), dy = TinyLines(m, n, 7);
  const MxTensor x_g = QuantizeGrouped(x, groups, QuantizeOptions{});
  const MxTensor dy_g = QuantizeGrouped(dy, groups, QuantizeOptions{});
  ExpectSame(MxGroupedWgrad(dy_g, x_g, g), Hostile([&] { return MxGroupedWgrad(dy_g, x_g, g); }),
             GetParam() + " grouped wgrad");
  // The oracle itself.
  ExpectSame(ref::MxGemm(o.x_row, o.w_row, g),
             Hostile([&] { return ref::MxGemm(o.x_row, o.w_row, g); }), "ref fprop");
}

TEST(FpEnv, ElementwiseAndPortableHpGemmIgnoreTheCallersEnvironment) {
  const int64_t m = 300, n = 260;  // above the casts' and row sums' parallel thresholds
  const std::vector<float> values = SubnormalHeavy(m, n, 3);
  const Tensor x = MakeF32({m, n}, values);
  const Tensor xb = MakeBf16({m, n}, values);
  ExpectSame(CastTo(x, DType::kBF16, MemoryCategory::kWorkspace, kThreads),
             Hostile([&] { return CastTo(x, DType::kBF16, MemoryCategory::kWorkspace, kThreads); }),
             "cast to bf16");
  ExpectSame(CastTo(xb, DType::kF32, MemoryCategory::kWorkspace, kThreads),
             Hostile([&] { return CastTo(xb, DType::kF32, MemoryCategory::kWorkspace, kThreads); }),
             "cast to f32");
  ExpectSame(SumRows(x, nullptr, kThreads), Hostile([&] { return SumRows(x, nullptr, kThreads); }),
             "row sums");
  const GroupList groups =
      GroupList::Make(std::vector<int64_t>{100, 300}, GroupListType::kCumsum, m);
  ExpectSame(SumRowsGrouped(x, groups, nullptr, kThreads),
             Hostile([&] { return SumRowsGrouped(x, groups, nullptr, kThreads); }),
             "grouped row sums");
  // The portable loops run here in full; oneDNN's matmul runs on its own threads in the
  // caller's environment (hp_gemm.h).
  const ScopedHpGemmPath portable("portable");
  const Tensor a = MakeF32({64, 96}, RandomValues(64 * 96, 1, -75, -60));
  const Tensor b = MakeF32({48, 96}, RandomValues(48 * 96, 2, -75, -60));
  GemmOptions g;
  g.threads = kThreads;
  for (const DType compute : {DType::kF32, DType::kBF16}) {
    const Tensor want = HpGemm(a, Contract::kLast, b, Contract::kLast, compute, g);
    EXPECT_GT(CountSubnormal(want), 0);
    ExpectSame(want,
               Hostile([&] { return HpGemm(a, Contract::kLast, b, Contract::kLast, compute, g); }),
               "portable hp gemm " + std::string(Name(compute)));
  }
}

}  // namespace
}  // namespace mxtrain
