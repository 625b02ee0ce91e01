// Dequantization against a double-precision oracle (every layout, both formats, the rceil
// error bound, grouped layouts) and the MX tensor's layout checks.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "mxtrain/error.h"
#include "mxtrain/quantize.h"
#include "mxtrain/simd.h"
#include "test_util.h"

namespace mxtrain {
namespace {

using testing_util::EdgeMix;
using testing_util::MakeBf16;
using testing_util::MakeF32;

using testing_util::kFormats;
using testing_util::kRules;

// --- Dequantization ---------------------------------------------------------------------

TEST(Dequantize, MatchesDoubleOracle) {
  const Shape shape{2, 70, 45};
  const std::vector<float> v = EdgeMix(shape.NumElements(), 11);
  const Tensor x = MakeF32(shape, v);
  for (ElementFormat f : kFormats) {
    const DualMx q = QuantizeDual(x, {f, ScaleRule::kRceil});
    for (const MxTensor* mx : {&q.rowwise, &q.columnwise}) {
      const Tensor y = Dequantize(*mx, DType::kF32);
      const Tensor yb = Dequantize(*mx, DType::kBF16);
      const int64_t k = shape[-1], m = shape[-2];
      for (int64_t i = 0; i < shape.NumElements(); ++i) {
        const int64_t r = i / k, c = i % k;
        const uint8_t b =
            mx->axis() == BlockAxis::kRowwise
                ? mx->scales().data<uint8_t>()[r * CeilDiv(k, 32) + c / 32]
                : mx->scales().data<uint8_t>()[((r / m) * CeilDiv(m, 32) + (r % m) / 32) * k + c];
        const uint8_t code = mx->data().data<uint8_t>()[i];
        const double exact =
            b == 0xFF ? NAN : std::ldexp(static_cast<double>(DecodeElement(f, code)), b - 127);
        const float got = y.data<float>()[i];
        if (std::isnan(exact)) {
          ASSERT_TRUE(std::isnan(got)) << i;
          ASSERT_TRUE(std::isnan(Bf16ToF32(yb.data<uint16_t>()[i])));
        } else {
          ASSERT_EQ(got, static_cast<float>(exact)) << i;
          ASSERT_EQ(yb.data<uint16_t>()[i], F32ToBf16(static_cast<float>(exact))) << i;
        }
      }
    }
  }
}

TEST(Dequantize, RceilErrorBound) {
  // rceil never saturates: each element is within half an E4M3 step of x at its block scale.
  std::mt19937 rng(3);
  std::normal_distribution<float> n(0.0f, 3.0f);
  std::vector<float> v(64 * 96);
  for (float& e : v) e = n(rng);
  const Tensor x = MakeF32({64, 96}, v);
  const MxTensor q = QuantizeRowwise(x, {});
  const Tensor y = Dequantize(q);
  for (size_t i = 0; i < v.size(); ++i) {
    const int b = q.scales().data<uint8_t>()[(i / 96) * 3 + (i % 96) / 32];
    const double scale = std::ldexp(1.0, b - 127);
    const double mag = std::fabs(v[i]) / scale;  // in element units, <= 448
    const double step = mag < std::ldexp(1.0, -6)
                            ? std::ldexp(1.0, -9)
                            : std::ldexp(1.0, static_cast<int>(std::floor(std::log2(mag))) - 3);
    ASSERT_LE(std::fabs(y.data<float>()[i] - v[i]), step / 2 * scale * (1 + 1e-12)) << i;
  }
}

TEST(Dequantize, GroupedLayout) {
  const std::vector<float> v = EdgeMix(100 * 33, 12);
  const Tensor x = MakeF32({100, 33}, v);
  const GroupList groups =
      GroupList::Make(std::vector<int64_t>{31, 0, 69}, GroupListType::kCounts, 100);
  const MxTensor q = QuantizeGrouped(x, groups, {});
  const Tensor y = Dequantize(q);
  for (int g = 0; g < groups.num_groups(); ++g) {
    for (int64_t r = groups.begin(g); r < groups.end(g); ++r) {
      for (int64_t c = 0; c < 33; ++c) {
        const uint8_t b =
            q.scales()
                .data<uint8_t>()[(groups.ScaleRowBegin(g) + (r - groups.begin(g)) / 32) * 33 + c];
        const float want =
            b == 0xFF ? NAN
                      : static_cast<float>(std::ldexp(
                            static_cast<double>(DecodeE4M3(q.data().data<uint8_t>()[r * 33 + c])),
                            b - 127));
        const float got = y.data<float>()[r * 33 + c];
        ASSERT_TRUE(got == want || (std::isnan(got) && std::isnan(want))) << r << "," << c;
      }
    }
  }
}

TEST(MxTensorLayout, ScaleShapeMismatchRaises) {
  Tensor data = Tensor::Zeros(DType::kU8, {64, 64});
  EXPECT_THROW(MxTensor(data, Tensor::Zeros(DType::kU8, {64, 3}), ElementFormat::kE4M3,
                        ScaleRule::kRceil, BlockAxis::kRowwise),
               Error);
  EXPECT_THROW(MxTensor(data, Tensor::Zeros(DType::kU8, {64, 2}), ElementFormat::kE4M3,
                        ScaleRule::kRceil, BlockAxis::kColumnwise),
               Error);
  EXPECT_NO_THROW(MxTensor(data, Tensor::Zeros(DType::kU8, {2, 64}), ElementFormat::kE4M3,
                           ScaleRule::kRceil, BlockAxis::kColumnwise));
  EXPECT_THROW(MxTensor(data, Tensor::Zeros(DType::kF32, {2, 64}), ElementFormat::kE4M3,
                        ScaleRule::kRceil, BlockAxis::kColumnwise),
               Error);
}

}  // namespace
}  // namespace mxtrain
