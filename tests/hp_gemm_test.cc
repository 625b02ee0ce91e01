// The high-precision GEMMs of the MXFP8-off baselines (every path, every contraction
// layout, bf16 and fp32 compute) against a double-precision oracle on the operands as
// rounded to the compute type; the grouped forms bit-identical to per-group calls; and
// the elementwise kernels around them (casts, bias-gradient row sums).
#include "mxtrain/hp_gemm.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "gemm_test_util.h"
#include "mxtrain/elementwise.h"
#include "mxtrain/error.h"
#include "mxtrain/quantize.h"
#include "mxtrain/testing.h"
#include "per_target_test.h"
#include "test_util.h"

namespace mxtrain {
namespace {

using testing_util::BytesEqual;
using testing_util::MakeBf16;
using testing_util::MakeF32;
using testing_util::RandomValues;

double ValueAt(const Tensor& t, int64_t i) {
  return t.dtype() == DType::kF32 ? t.data<float>()[i] : Bf16ToF32(t.data<uint16_t>()[i]);
}

// Operand element (f, s) rounded to the compute type, as a double.
double Operand(const Tensor& t, Contract c, int64_t f, int64_t s, DType compute) {
  const int64_t cols = t.shape()[1];
  const double v = c == Contract::kLast ? ValueAt(t, f * cols + s) : ValueAt(t, s * cols + f);
  return compute == DType::kBF16 ? Bf16ToF32(F32ToBf16(static_cast<float>(v))) : v;
}

// |C - exact| <= (S + 2) 2^-24 sum |a b| + half an ulp of the output.
void ExpectHpWithinBound(const Tensor& c, const Tensor& a, Contract ca, const Tensor& b,
                         Contract cb, DType compute, const std::string& what,
                         const Tensor* bias = nullptr, const std::vector<float>* before = nullptr) {
  const int64_t m = c.shape()[0], n = c.shape()[1];
  const int64_t s = ca == Contract::kLast ? a.shape()[1] : a.shape()[0];
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      double exact = 0, abs = 0;
      for (int64_t k = 0; k < s; ++k) {
        const double p = Operand(a, ca, i, k, compute) * Operand(b, cb, j, k, compute);
        exact += p;
        abs += std::fabs(p);
      }
      if (before != nullptr) exact += (*before)[i * n + j], abs += std::fabs((*before)[i * n + j]);
      if (bias != nullptr)
        exact += bias->data<float>()[j], abs += std::fabs(bias->data<float>()[j]);
      const double got = ValueAt(c, i * n + j);
      const double half_ulp = std::fabs(exact) * (c.dtype() == DType::kF32 ? 0x1p-24 : 0x1p-8);
      ASSERT_LE(std::fabs(got - exact), (s + 2) * 0x1p-24 * abs + half_ulp + 1e-30)
          << what << " at " << i << "," << j;
    }
  }
}

Tensor Stored(const std::vector<float>& v, int64_t free, int64_t s, Contract c, DType dtype) {
  const Shape shape = c == Contract::kLast ? Shape{free, s} : Shape{s, free};
  return dtype == DType::kF32 ? MakeF32(shape, v) : MakeBf16(shape, v);
}

// A test that runs with the high-precision GEMM path GetParam() forced (testing.h), one
// instance per path of this build ('*/onednn_bf16', '*/portable'), and the best path again
// afterwards.
class HpGemmPerPath : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    ForceHpGemmPath(GetParam());
    ASSERT_EQ(CurrentHpGemmPath(), GetParam());
  }
  void TearDown() override { ForceHpGemmPath(""); }
};
INSTANTIATE_TEST_SUITE_P(Available, HpGemmPerPath, ::testing::ValuesIn(AvailableHpGemmPaths()),
                         testing_util::InstanceName);

TEST_P(HpGemmPerPath, EveryLayoutAndComputeWithinBound) {
  const std::string& path = GetParam();
  {
    uint64_t seed = 1;
    for (DType compute : {DType::kF32, DType::kBF16}) {
      for (DType in_dtype : {DType::kF32, DType::kBF16}) {
        for (Contract ca : {Contract::kLast, Contract::kFirst}) {
          for (Contract cb : {Contract::kLast, Contract::kFirst}) {
            for (const auto& [m, n, s] : std::vector<std::tuple<int64_t, int64_t, int64_t>>{
                     {1, 1, 1}, {7, 33, 65}, {64, 48, 96}, {70, 5, 3}}) {
              const Tensor a = Stored(RandomValues(m * s, ++seed, -3, 3), m, s, ca, in_dtype);
              const Tensor b = Stored(RandomValues(n * s, ++seed, -3, 3), n, s, cb, in_dtype);
              const std::string what = StrCat(path, " compute=", Name(compute),
                                              " in=", Name(in_dtype), " ", m, "x", n, "x", s);
              const Tensor c = HpGemm(a, ca, b, cb, compute);
              ASSERT_EQ(c.shape(), (Shape{m, n})) << what;
              ExpectHpWithinBound(c, a, ca, b, cb, compute, what);
            }
          }
        }
      }
    }
  }
}

TEST_P(HpGemmPerPath, BiasAccumulateBf16OutputAndGivenOutput) {
  const std::string& path = GetParam();
  const int64_t m = 40, n = 24, s = 50;
  const Tensor a = MakeF32({m, s}, RandomValues(m * s, 3, -2, 2));
  const Tensor b = MakeF32({s, n}, RandomValues(n * s, 4, -2, 2));
  Tensor bias = MakeF32({n}, RandomValues(n, 5, -1, 1));
  const std::vector<float> start = RandomValues(m * n, 6, -1, 1);
  {
    GemmOptions ob;
    ob.bias = &bias;
    ob.out_dtype = DType::kBF16;
    const Tensor c = HpGemm(a, Contract::kLast, b, Contract::kFirst, DType::kBF16, ob);
    ASSERT_EQ(c.dtype(), DType::kBF16);
    ExpectHpWithinBound(c, a, Contract::kLast, b, Contract::kFirst, DType::kBF16,
                        path + " bias bf16", &bias);
    Tensor acc = MakeF32({m, n}, start);
    GemmOptions oa;
    oa.accumulate = &acc;
    const Tensor r = HpGemm(a, Contract::kLast, b, Contract::kFirst, DType::kF32, oa);
    EXPECT_EQ(r.storage(), acc.storage());
    ExpectHpWithinBound(acc, a, Contract::kLast, b, Contract::kFirst, DType::kF32, path + " acc",
                        nullptr, &start);
    // Into rows [10, 30) of a larger output.
    Tensor big = Tensor::Zeros(DType::kF32, {60, n});
    Tensor view = big.Slice(10, 30);
    GemmOptions oo;
    oo.out = &view;
    HpGemm(a.Slice(0, 20), Contract::kLast, b, Contract::kFirst, DType::kF32, oo);
    const Tensor alone = HpGemm(a.Slice(0, 20), Contract::kLast, b, Contract::kFirst, DType::kF32);
    EXPECT_EQ(std::memcmp(alone.raw(), big.data<float>() + 10 * n, alone.NumBytes()), 0) << path;
    EXPECT_EQ(big.data<float>()[0], 0.0f);
  }
}

// The route each compute type takes follows the path: a bf16 GEMM runs as a bf16 matmul
// only on "onednn-bf16", as an f32 matmul on bf16-rounded operands on "onednn-f32" (every
// CPU oneDNN supports has one, so no supported input is ever refused), and an f32 GEMM never
// on a bf16 matmul.
TEST(HpGemm, RoutesFollowThePath) {
  const std::vector<std::string> paths = AvailableHpGemmPaths();
  ASSERT_FALSE(paths.empty());
  EXPECT_EQ(paths.back(), "portable");
  const bool onednn = paths.size() > 1;
  if (onednn) {
    EXPECT_NE(std::find(paths.begin(), paths.end(), "onednn-f32"), paths.end());
  }
  EXPECT_EQ(CurrentHpGemmPath(), paths.front());
  for (const std::string& path : paths) {
    const ScopedHpGemmPath scope(path);
    EXPECT_EQ(CurrentHpGemmPath(), path);
    EXPECT_EQ(HpGemmRoute(DType::kBF16), path);
    EXPECT_EQ(HpGemmRoute(DType::kF32), path == "portable" ? "portable" : "onednn-f32");
  }
}

// On the f32 route a bf16 GEMM still rounds its operands to bf16: the result equals the
// bf16 matmul's (where there is one) and the portable loops' within the bound of bf16
// operands, and differs from the f32 GEMM of the same unrounded inputs.
TEST(HpGemm, Bf16OnTheF32RouteRoundsTheOperands) {
  const std::vector<std::string> paths = AvailableHpGemmPaths();
  // Built without oneDNN (setup.sh installs it): only the portable loops, checked above.
  if (paths.size() == 1) return;
  const ScopedHpGemmPath scope("onednn-f32");
  const int64_t m = 37, n = 29, s = 300;
  const Tensor a = MakeF32({m, s}, RandomValues(m * s, 11, -2, 2));
  const Tensor b = MakeF32({n, s}, RandomValues(n * s, 12, -2, 2));
  const Tensor c16 = HpGemm(a, Contract::kLast, b, Contract::kLast, DType::kBF16);
  ExpectHpWithinBound(c16, a, Contract::kLast, b, Contract::kLast, DType::kBF16, "onednn-f32");
  const Tensor c32 = HpGemm(a, Contract::kLast, b, Contract::kLast, DType::kF32);
  EXPECT_FALSE(BytesEqual(c16, c32));
  // Bit for bit the f32 GEMM of the operands rounded to bf16 and widened beforehand, below
  // and above the rounding pass's parallel threshold (2^16 elements).
  const auto rounded = [](const Tensor& t) {
    return CastTo(CastTo(t, DType::kBF16, MemoryCategory::kWorkspace, 2), DType::kF32,
                  MemoryCategory::kWorkspace, 2);
  };
  for (const int64_t rows : {m, int64_t{301}}) {
    std::vector<float> values = RandomValues(rows * s, 13, -2, 2);
    values[5] = 1.0f + 0x1p-8f;    // ties to even: down
    values[6] = 1.0f + 0x1.8p-7f;  // and up
    const Tensor x = MakeF32({rows, s}, values);
    EXPECT_TRUE(
        BytesEqual(HpGemm(x, Contract::kLast, b, Contract::kLast, DType::kBF16),
                   HpGemm(rounded(x), Contract::kLast, rounded(b), Contract::kLast, DType::kF32)))
        << rows << " rows";
  }
}

TEST(HpGemm, EmptyShapesAndErrors) {
  const Tensor a0 = Tensor::Zeros(DType::kF32, {5, 0});
  const Tensor b0 = Tensor::Zeros(DType::kF32, {3, 0});
  const Tensor c0 = HpGemm(a0, Contract::kLast, b0, Contract::kLast, DType::kF32);
  ASSERT_EQ(c0.shape(), (Shape{5, 3}));
  for (int i = 0; i < 15; ++i) EXPECT_EQ(c0.data<float>()[i], 0.0f);
  const Tensor e = HpGemm(Tensor::Zeros(DType::kF32, {0, 4}), Contract::kLast,
                          Tensor::Zeros(DType::kF32, {3, 4}), Contract::kLast, DType::kBF16);
  EXPECT_EQ(e.shape(), (Shape{0, 3}));
  const Tensor a = Tensor::Zeros(DType::kF32, {4, 8});
  EXPECT_THROW(
      HpGemm(a, Contract::kLast, Tensor::Zeros(DType::kF32, {4, 7}), Contract::kLast, DType::kF32),
      Error);
  EXPECT_THROW(HpGemm(a, Contract::kLast, a, Contract::kLast, DType::kU8), Error);
  EXPECT_THROW(
      HpGemm(Tensor::Zeros(DType::kU8, {4, 8}), Contract::kLast, a, Contract::kLast, DType::kF32),
      Error);
  EXPECT_THROW(ForceHpGemmPath("cublas"), Error);
  // A negative thread count names the function instead of meaning "all cores".
  GemmOptions negative;
  negative.threads = -1;
  const Tensor m = MakeF32({2, 3}, RandomValues(6, 99, -1, 1));
  EXPECT_THROW(HpGemm(m, Contract::kLast, m, Contract::kLast, DType::kF32, negative), Error);
  EXPECT_THROW(MxGemm(QuantizeRowwise(m, {}), QuantizeRowwise(m, {}), negative), Error);
  EXPECT_THROW(CastTo(m, DType::kBF16, MemoryCategory::kWorkspace, -3), Error);
}

TEST_P(HpGemmPerPath, GroupedFormsEqualPerGroupCalls) {
  const int64_t m = 90, k = 40, n = 24, experts = 4;
  const GroupList groups =
      GroupList::Make(std::vector<int64_t>{30, 0, 41, 19}, GroupListType::kCounts, m);
  const Tensor x = MakeBf16({m, k}, RandomValues(m * k, 7, -2, 2));
  const Tensor w = MakeF32({experts, n, k}, RandomValues(experts * n * k, 8, -2, 2));
  const Tensor dy = MakeBf16({m, n}, RandomValues(m * n, 9, -2, 2));
  {
    const Tensor y = HpGroupedGemm(x, w, Contract::kLast, groups, DType::kBF16);
    const Tensor dx = HpGroupedGemm(dy, w, Contract::kFirst, groups, DType::kBF16);
    const Tensor dw = HpGroupedWgrad(dy, x, groups, DType::kBF16);
    ASSERT_EQ(dw.shape(), (Shape{experts, n, k}));
    for (int e = 0; e < experts; ++e) {
      const int64_t r0 = groups.begin(e), r1 = groups.end(e);
      const Tensor we = w.Slice(e, e + 1).Reshape({n, k});
      const Tensor dwe = dw.Slice(e, e + 1).Reshape({n, k});
      if (r0 == r1) {
        for (int64_t i = 0; i < n * k; ++i) ASSERT_EQ(dwe.data<float>()[i], 0.0f);
        continue;
      }
      EXPECT_TRUE(BytesEqual(y.Slice(r0, r1), HpGemm(x.Slice(r0, r1), Contract::kLast, we,
                                                     Contract::kLast, DType::kBF16)))
          << e;
      EXPECT_TRUE(BytesEqual(dx.Slice(r0, r1), HpGemm(dy.Slice(r0, r1), Contract::kLast, we,
                                                      Contract::kFirst, DType::kBF16)))
          << e;
      EXPECT_TRUE(BytesEqual(dwe, HpGemm(dy.Slice(r0, r1), Contract::kFirst, x.Slice(r0, r1),
                                         Contract::kFirst, DType::kBF16)))
          << e;
    }
    Tensor acc = Tensor::Zeros(DType::kF32, {experts, n, k});
    for (int64_t i = 0; i < acc.NumElements(); ++i) acc.data<float>()[i] = 2.0f;
    GemmOptions oa;
    oa.accumulate = &acc;
    HpGroupedWgrad(dy, x, groups, DType::kBF16, oa);
    for (int64_t i = 0; i < n * k; ++i) ASSERT_EQ(acc.data<float>()[n * k + i], 2.0f);  // empty
    EXPECT_THROW(HpGroupedGemm(x, w, Contract::kLast,
                               GroupList::Make(std::vector<int64_t>{m}, GroupListType::kCounts, m),
                               DType::kBF16),
                 Error);
  }
}

TEST(Elementwise, CastsRoundAndShareWhenTheDtypeMatches) {
  const std::vector<float> v = RandomValues(1000, 11, -130, 120);
  const Tensor f = MakeF32({10, 100}, v);
  const Tensor b = CastTo(f, DType::kBF16);
  for (int i = 0; i < 1000; ++i) ASSERT_EQ(b.data<uint16_t>()[i], F32ToBf16(v[i])) << i;
  const Tensor back = CastTo(b, DType::kF32);
  for (int i = 0; i < 1000; ++i) ASSERT_EQ(back.data<float>()[i], Bf16ToF32(F32ToBf16(v[i])));
  EXPECT_EQ(CastTo(f, DType::kF32).storage(), f.storage());
  EXPECT_THROW(CastTo(f, DType::kU8), Error);
}

TEST(Elementwise, RowSumsInOrderAndGrouped) {
  const int64_t m = 77, n = 300;
  const std::vector<float> v = RandomValues(m * n, 12, -4, 4);
  const Tensor x = MakeBf16({m, n}, v);
  const GroupList groups =
      GroupList::Make(std::vector<int64_t>{20, 0, 57}, GroupListType::kCounts, m);
  const Tensor s = SumRows(x, nullptr, 2);
  const Tensor gs = SumRowsGrouped(x, groups, nullptr, 2);
  for (int64_t j = 0; j < n; ++j) {
    float want = 0;  // rows in order, in fp32: the same order the kernel promises
    for (int64_t i = 0; i < m; ++i) want += Bf16ToF32(x.data<uint16_t>()[i * n + j]);
    ASSERT_EQ(s.data<float>()[j], want) << j;
    for (int g = 0; g < 3; ++g) {
      float wg = 0;
      for (int64_t i = groups.begin(g); i < groups.end(g); ++i)
        wg += Bf16ToF32(x.data<uint16_t>()[i * n + j]);
      ASSERT_EQ(gs.data<float>()[g * n + j], wg) << g << "," << j;
    }
  }
  Tensor acc = MakeF32({n}, std::vector<float>(n, 1.0f));
  SumRows(x.Slice(0, 1), &acc);
  for (int64_t j = 0; j < n; ++j)
    ASSERT_EQ(acc.data<float>()[j], 1.0f + Bf16ToF32(x.data<uint16_t>()[j]));
  Tensor wrong = Tensor::Zeros(DType::kF32, {n + 1});
  EXPECT_THROW(SumRows(x, &wrong), Error);
  EXPECT_THROW(SumRows(x.Reshape({m * n}), nullptr), Error);
}

}  // namespace
}  // namespace mxtrain
