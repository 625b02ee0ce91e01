// SwiGluF32 / SwiGluBackwardF32 and their bf16 forms (elementwise.h): the bits of the scalar
// formulas on every SIMD target, against a transcription of them with std::exp here (for
// bf16: on the widened values, rounded once). Seeded rows of widths
// up to a few chunks (the vector body, the scalar tail and the chunk edges), gate
// values that take the exponential's special lanes (|a| >= 88, infinities, NaN), zeros and
// subnormals, each at every lane position; and the errors.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <span>
#include <vector>

#include "mxtrain/elementwise.h"
#include "mxtrain/error.h"
#include "mxtrain/format/bf16.h"
#include "per_target_test.h"

namespace mxtrain {
namespace {

// Equal bits, or both NaN (a NaN's payload is not specified).
bool Same(float got, float want) {
  return F32Bits(got) == F32Bits(want) || (std::isnan(got) && std::isnan(want));
}

// The scalar formulas of elementwise.h, each operation rounded (strict FP build).
float Sigmoid(float a) { return 1.0f / (1.0f + std::exp(-a)); }

void ScalarForward(const std::vector<float>& gu, int64_t f, std::vector<float>& h) {
  const int64_t rows = static_cast<int64_t>(gu.size()) / (2 * f);
  h.assign(static_cast<size_t>(rows * f), 0.0f);
  for (int64_t i = 0; i < rows; ++i) {
    for (int64_t j = 0; j < f; ++j) {
      const float a = gu[i * 2 * f + j], b = gu[i * 2 * f + f + j];
      const float s = Sigmoid(a);
      h[i * f + j] = a * s * b;
    }
  }
}

void ScalarBackward(const std::vector<float>& dh, const std::vector<float>& gu, int64_t f,
                    std::vector<float>& dgu) {
  const int64_t rows = static_cast<int64_t>(gu.size()) / (2 * f);
  dgu.assign(gu.size(), 0.0f);
  for (int64_t i = 0; i < rows; ++i) {
    for (int64_t j = 0; j < f; ++j) {
      const float a = gu[i * 2 * f + j], b = gu[i * 2 * f + f + j], d = dh[i * f + j];
      const float s = Sigmoid(a);
      const float silu = a * s;
      dgu[i * 2 * f + j] = d * b * (s + silu * (1.0f - s));
      dgu[i * 2 * f + f + j] = d * silu;
    }
  }
}

std::vector<uint16_t> ToBf16(const std::vector<float>& x) {
  std::vector<uint16_t> out(x.size());
  for (size_t i = 0; i < x.size(); ++i) out[i] = F32ToBf16(x[i]);
  return out;
}
std::vector<float> Widen(const std::vector<uint16_t>& x) {
  std::vector<float> out(x.size());
  for (size_t i = 0; i < x.size(); ++i) out[i] = Bf16ToF32(x[i]);
  return out;
}

// The bf16 kernels on gu and dh rounded to bf16, against the scalar formulas on the widened
// values, rounded once.
void ExpectBf16Bits(const std::vector<float>& gu32, const std::vector<float>& dh32, int64_t f) {
  const std::vector<uint16_t> gu = ToBf16(gu32), dh = ToBf16(dh32);
  std::vector<float> want_h, want_dgu;
  ScalarForward(Widen(gu), f, want_h);
  ScalarBackward(Widen(dh), Widen(gu), f, want_dgu);
  std::vector<uint16_t> h(want_h.size(), 0x1234), dgu(want_dgu.size(), 0x1234);
  SwiGluBf16(gu, f, h);
  SwiGluBackwardBf16(dh, gu, f, dgu);
  int failures = 0;
  const auto check = [&](const char* what, const std::vector<uint16_t>& got,
                         const std::vector<float>& want) {
    for (size_t i = 0; i < got.size() && failures < 10; ++i) {
      const uint16_t w = F32ToBf16(want[i]);
      const bool nan = std::isnan(want[i]) && std::isnan(Bf16ToF32(got[i]));
      if (got[i] != w && !nan) {
        ++failures;
        ADD_FAILURE() << what << "[" << i << "] f = " << f << ": " << std::hex << got[i]
                      << ", want " << w;
      }
    }
  };
  check("bf16 h", h, want_h);
  check("bf16 dgu", dgu, want_dgu);
}

// Both kernels on gu (rows of 2f) and dh (rows of f) against the scalar formulas, in fp32
// and in bf16.
void ExpectScalarBits(const std::vector<float>& gu, const std::vector<float>& dh, int64_t f) {
  ExpectBf16Bits(gu, dh, f);
  std::vector<float> want_h, want_dgu;
  ScalarForward(gu, f, want_h);
  ScalarBackward(dh, gu, f, want_dgu);
  std::vector<float> h(want_h.size(), -7.0f), dgu(want_dgu.size(), -7.0f);
  SwiGluF32(gu, f, h);
  SwiGluBackwardF32(dh, gu, f, dgu);
  int failures = 0;
  for (size_t i = 0; i < h.size() && failures < 10; ++i) {
    if (!Same(h[i], want_h[i])) {
      ++failures;
      ADD_FAILURE() << "h[" << i << "] f = " << f << ": " << std::hexfloat << h[i] << ", want "
                    << want_h[i];
    }
  }
  for (size_t i = 0; i < dgu.size() && failures < 10; ++i) {
    if (!Same(dgu[i], want_dgu[i])) {
      ++failures;
      ADD_FAILURE() << "dgu[" << i << "] f = " << f << ": " << std::hexfloat << dgu[i] << ", want "
                    << want_dgu[i];
    }
  }
}

class SwiGluPerTarget : public testing_util::SimdTargetTest {};
MXTRAIN_INSTANTIATE_PER_SIMD_TARGET(SwiGluPerTarget);

TEST_P(SwiGluPerTarget, SeededRowsEqualTheScalarFormulas) {
  std::mt19937 rng(20261207);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  std::uniform_real_distribution<float> wide(-100.0f, 100.0f);
  for (int64_t f :
       {1, 2, 3, 7, 8, 15, 16, 17, 31, 33, 63, 64, 65, 100, 127, 128, 129, 256, 257, 300, 513}) {
    const int64_t rows = 3;
    std::vector<float> gu(static_cast<size_t>(rows * 2 * f)), dh(static_cast<size_t>(rows * f));
    for (size_t i = 0; i < gu.size(); ++i) gu[i] = i % 4 == 3 ? wide(rng) : normal(rng);
    for (float& v : dh) v = normal(rng);
    ExpectScalarBits(gu, dh, f);
  }
}

TEST_P(SwiGluPerTarget, SpecialGatesAtEveryLaneEqualTheScalarFormulas) {
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float denorm = std::numeric_limits<float>::denorm_min();
  const std::vector<float> specials = {0.0f,  -0.0f,  denorm, -denorm, 88.0f, -88.0f,
                                       89.0f, -89.0f, 200.0f, -200.0f, inf,   -inf,
                                       nan,   1e-30f, -1e30f, 1e30f};
  const int64_t f = 40;  // two vectors of 16 and a tail of 8 on AVX-512; whole ones below it
  for (float special : specials) {
    for (int64_t lane = 0; lane < f; ++lane) {
      std::vector<float> gu(static_cast<size_t>(2 * f)), dh(static_cast<size_t>(f));
      for (int64_t j = 0; j < f; ++j) {
        gu[j] = 0.375f * static_cast<float>(j) - 7.0f;
        gu[f + j] = 1.5f - 0.125f * static_cast<float>(j);
        dh[j] = 0.5f + 0.0625f * static_cast<float>(j);
      }
      gu[lane] = special;
      ExpectScalarBits(gu, dh, f);
      // The special value as an up value and as an output gradient too.
      gu[lane] = 1.0f;
      gu[f + lane] = special;
      dh[lane] = special;
      ExpectScalarBits(gu, dh, f);
    }
  }
}

TEST(SwiGlu, RejectsBadSizesAndOverlap) {
  std::vector<float> gu(12), h(6), dh(6), dgu(12);
  EXPECT_THROW(SwiGluF32(gu, 0, h), Error);
  EXPECT_THROW(SwiGluF32(gu, 4, h), Error);  // 12 values are not rows of 8
  EXPECT_THROW(SwiGluF32(gu, 3, std::span<float>(h.data(), 5)), Error);
  EXPECT_THROW(
      SwiGluF32(std::span<const float>(gu.data(), 12), 3, std::span<float>(gu.data() + 6, 6)),
      Error);
  EXPECT_THROW(SwiGluBackwardF32(std::span<const float>(dh.data(), 5), gu, 3, dgu), Error);
  EXPECT_THROW(SwiGluBackwardF32(dh, gu, 3, std::span<float>(dgu.data(), 11)), Error);
  EXPECT_THROW(SwiGluBackwardF32(dh, gu, 3, gu), Error);
  std::vector<uint16_t> gu16(12), h16(6), dh16(6);
  EXPECT_THROW(SwiGluBf16(gu16, 4, h16), Error);
  EXPECT_THROW(SwiGluBf16(gu16, 3, std::span<uint16_t>(gu16.data() + 6, 6)), Error);
  EXPECT_THROW(SwiGluBackwardBf16(dh16, gu16, 3, std::span<uint16_t>(gu16.data(), 12)), Error);
  EXPECT_THROW(SwiGluBackwardBf16(std::span<const uint16_t>(dh16.data(), 5), gu16, 3, gu16), Error);
  // Empty is fine.
  SwiGluF32({}, 3, {});
  SwiGluBackwardF32({}, {}, 3, {});
  // And a good call writes every output.
  for (size_t i = 0; i < gu.size(); ++i) gu[i] = 0.25f * static_cast<float>(i + 1);
  SwiGluF32(gu, 3, h);
  for (size_t i = 0; i < h.size(); ++i) EXPECT_NE(h[i], 0.0f) << i;
}

}  // namespace
}  // namespace mxtrain
