// The scalar codecs and scale rules against NUMERICS.md: exhaustive round trips of the
// 8-bit formats, a double-precision nearest-value oracle for the encoder, closed-form
// oracles for the four scale rules, the golden d -> b table of §8.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "convert.h"
#include "mxtrain/elementwise.h"
#include "mxtrain/error.h"
#include "mxtrain/format/element.h"
#include "mxtrain/quantize.h"
#include "mxtrain/simd.h"
#include "per_target_test.h"
#include "test_util.h"

namespace mxtrain {
namespace {

TEST(ElementFormat, AllCodesRoundTrip) {
  for (ElementFormat f : {ElementFormat::kE4M3, ElementFormat::kE5M2}) {
    for (int c = 0; c < 256; ++c) {
      const uint8_t code = static_cast<uint8_t>(c);
      const float value = DecodeElement(f, code);
      if (std::isnan(value)) {
        // NaN carries no payload in mxtrain: every NaN code reads as NaN and NaN encodes to
        // the one code NUMERICS.md §1 names, which again reads as NaN.
        EXPECT_EQ(EncodeElement(f, value), 0x7F) << Name(f) << " code " << c;
        EXPECT_TRUE(std::isnan(DecodeElement(f, 0x7F)));
      } else {
        EXPECT_EQ(EncodeElement(f, value), code) << Name(f) << " code " << c << " value " << value;
      }
    }
  }
}

TEST(ElementFormat, NaNCodesAreExactlyTheSpecified) {
  for (int c = 0; c < 256; ++c) {
    const uint8_t mag = c & 0x7F;
    EXPECT_EQ(std::isnan(DecodeE4M3(static_cast<uint8_t>(c))), mag == 0x7F) << c;
    EXPECT_EQ(std::isnan(DecodeE5M2(static_cast<uint8_t>(c))), mag > 0x7C) << c;
    EXPECT_EQ(std::isinf(DecodeE5M2(static_cast<uint8_t>(c))), mag == 0x7C) << c;
  }
  EXPECT_EQ(DecodeE4M3(0x7E), 448.0f);
  EXPECT_EQ(DecodeE4M3(0x08), std::ldexp(1.0f, -6));  // min normal
  EXPECT_EQ(DecodeE4M3(0x01), std::ldexp(1.0f, -9));  // min subnormal
  EXPECT_EQ(DecodeE5M2(0x7B), 57344.0f);
  EXPECT_EQ(DecodeE5M2(0x04), std::ldexp(1.0f, -14));
  EXPECT_EQ(DecodeE5M2(0x01), std::ldexp(1.0f, -16));
  EXPECT_TRUE(std::signbit(DecodeE4M3(0x80)));  // -0 kept
}

// Oracle: the finite code whose value is nearest to x in double precision, ties to the
// even code, magnitudes beyond max normal saturate (NUMERICS.md §1).
uint8_t NearestCode(ElementFormat f, float x) {
  const uint8_t max_code = f == ElementFormat::kE4M3 ? 0x7E : 0x7B;
  const double ax = std::fabs(static_cast<double>(x));
  if (ax >= DecodeElement(f, max_code))
    return static_cast<uint8_t>(max_code | (std::signbit(x) ? 0x80 : 0));
  uint8_t best = 0;
  double best_err = INFINITY;
  for (int c = 0; c <= max_code; ++c) {
    const double err =
        std::fabs(static_cast<double>(DecodeElement(f, static_cast<uint8_t>(c))) - ax);
    if (err < best_err || (err == best_err && (c & 1) == 0)) {
      best = static_cast<uint8_t>(c);
      best_err = err;
    }
  }
  return static_cast<uint8_t>(best | (std::signbit(x) ? 0x80 : 0));
}

TEST(ElementFormat, EncoderMatchesNearestValueOracle) {
  const uint64_t seed = 20261202;
  std::mt19937_64 rng(seed);
  for (ElementFormat f : {ElementFormat::kE4M3, ElementFormat::kE5M2}) {
    std::vector<float> inputs;
    // Every midpoint between neighbouring codes and one fp32 ulp either side.
    for (int c = 0; c < (f == ElementFormat::kE4M3 ? 0x7E : 0x7B); ++c) {
      const float lo = DecodeElement(f, static_cast<uint8_t>(c));
      const float hi = DecodeElement(f, static_cast<uint8_t>(c + 1));
      const float mid = static_cast<float>((static_cast<double>(lo) + hi) / 2);
      for (float v : {mid, std::nextafter(mid, 0.0f), std::nextafter(mid, INFINITY), lo, hi}) {
        inputs.push_back(v);
        inputs.push_back(-v);
      }
    }
    const float max = f == ElementFormat::kE4M3 ? 448.0f : 57344.0f;
    for (float v : {max, std::nextafter(max, INFINITY), max * 1.03f, max * 1.125f, 3.4e38f}) {
      inputs.push_back(v);
      inputs.push_back(-v);
    }
    std::uniform_int_distribution<int> e(-30, 20);
    std::uniform_real_distribution<float> m(1.0f, 2.0f);
    for (int i = 0; i < 20000; ++i) inputs.push_back(std::ldexp(m(rng), e(rng)) * (i % 2 ? -1 : 1));
    for (float x : inputs) {
      ASSERT_EQ(EncodeElement(f, x), NearestCode(f, x))
          << Name(f) << " x=" << x << " bits=" << std::hex << F32Bits(x) << " seed " << seed;
    }
  }
}

TEST(ElementFormat, SpecialValues) {
  EXPECT_EQ(EncodeE4M3(NAN), 0x7F);
  EXPECT_EQ(EncodeE5M2(NAN), 0x7F);
  EXPECT_EQ(EncodeE4M3(INFINITY), 0x7E);  // E4M3 has no Inf: saturates
  EXPECT_EQ(EncodeE4M3(-INFINITY), 0xFE);
  EXPECT_EQ(EncodeE5M2(INFINITY), 0x7C);  // E5M2 keeps its Inf
  EXPECT_EQ(EncodeE5M2(-INFINITY), 0xFC);
  EXPECT_EQ(EncodeE4M3(-0.0f), 0x80);
  EXPECT_EQ(EncodeE4M3(464.0f), 0x7E);  // tie between 448 and (unrepresentable) 480
  EXPECT_EQ(EncodeE5M2(61440.0f), 0x7B);
  EXPECT_EQ(EncodeE4M3(std::ldexp(1.0f, -10)), 0x00);  // half the min subnormal: tie to even 0
  EXPECT_EQ(EncodeE4M3(std::ldexp(3.0f, -11)), 0x01);  // 0.75 steps rounds up to 1
  EXPECT_EQ(EncodeE4M3(std::ldexp(3.0f, -10)), 0x02);  // 1.5 steps: tie to even 2
  EXPECT_EQ(EncodeE4M3(std::ldexp(5.0f, -10)), 0x02);  // 2.5 steps: tie to even 2
}

TEST(Bf16, RoundTripAndRounding) {
  for (uint32_t h = 0; h < 0x10000; ++h) {
    const float f = Bf16ToF32(static_cast<uint16_t>(h));
    if (std::isnan(f)) {
      EXPECT_TRUE(std::isnan(Bf16ToF32(F32ToBf16(f))));
    } else {
      ASSERT_EQ(F32ToBf16(f), h);
    }
  }
  // RNE against a double oracle on random fp32.
  std::mt19937 rng(7);
  for (int i = 0; i < 100000; ++i) {
    const float x = F32FromBits(rng());
    if (!std::isfinite(x)) continue;
    const uint16_t r = F32ToBf16(x);
    const double lo = Bf16ToF32(static_cast<uint16_t>(F32Bits(x) >> 16));
    // The next bf16 up in magnitude; past the largest finite one it stands for 2^128 (the
    // rounding threshold to Inf lies halfway there).
    const uint16_t next = static_cast<uint16_t>((F32Bits(x) >> 16) + 1);
    const double hi_bits =
        (next & 0x7F80) == 0x7F80 ? std::copysign(std::ldexp(1.0, 128), x) : Bf16ToF32(next);
    const double dlo = std::fabs(x - lo), dhi = std::fabs(hi_bits - x);
    const uint16_t expect = static_cast<uint16_t>(
        (F32Bits(x) >> 16) + ((dhi < dlo || (dhi == dlo && ((F32Bits(x) >> 16) & 1))) ? 1 : 0));
    ASSERT_EQ(r, expect) << std::hex << F32Bits(x);
  }
}

// The vector narrowing (convert.h) on every target against F32ToBf16: the edge values,
// random bit patterns, lengths that leave a scalar tail, with and without a bias (the
// fp32 sum rounded once); and CastTo, which runs it.
class Bf16NarrowingPerTarget : public testing_util::SimdTargetTest {};
MXTRAIN_INSTANTIATE_PER_SIMD_TARGET(Bf16NarrowingPerTarget);

TEST_P(Bf16NarrowingPerTarget, EqualsScalar) {
  std::vector<float> x = {0.0f,
                          -0.0f,
                          1.0f,
                          -1.0f,
                          INFINITY,
                          -INFINITY,
                          NAN,
                          -NAN,
                          F32FromBits(0x7F800001u),
                          F32FromBits(0xFF800001u),  // signaling
                          F32FromBits(0x7FBFFFFFu),
                          F32FromBits(0x7F7FFFFFu),  // max finite
                          F32FromBits(0xFF7FFFFFu),
                          F32FromBits(0x7F7F8000u),  // tie to Inf
                          F32FromBits(0x3F808000u),
                          F32FromBits(0x3F818000u),  // ties
                          F32FromBits(0x00000001u),
                          F32FromBits(0x807FFFFFu),  // subnormals
                          F32FromBits(0x00008000u),
                          F32FromBits(0x00018000u)};
  std::mt19937 rng(11);
  while (x.size() < 4099) x.push_back(F32FromBits(rng()));
  std::vector<float> bias(x.size());
  for (float& b : bias) b = F32FromBits(rng() & 0xBFFFFFFFu);  // finite, some huge
  for (const size_t n : {x.size(), size_t{1}, size_t{7}, size_t{17}, size_t{33}}) {
    std::vector<uint16_t> got(n), got_bias(n);
    std::vector<float> rounded(n);
    internal::NarrowToBf16(x.data(), static_cast<int64_t>(n), nullptr, got.data());
    internal::NarrowToBf16(x.data(), static_cast<int64_t>(n), bias.data(), got_bias.data());
    internal::RoundToBf16(x.data(), static_cast<int64_t>(n), rounded.data());
    for (size_t i = 0; i < n; ++i) {
      ASSERT_EQ(got[i], F32ToBf16(x[i])) << GetParam() << " bits " << std::hex << F32Bits(x[i]);
      // Rounding within fp32: the narrowed bits widened, NaN payloads included.
      ASSERT_EQ(F32Bits(rounded[i]), uint32_t{F32ToBf16(x[i])} << 16)
          << GetParam() << " bits " << std::hex << F32Bits(x[i]);
      ASSERT_EQ(got_bias[i], F32ToBf16(x[i] + bias[i]))
          << GetParam() << " bits " << std::hex << F32Bits(x[i]) << " + " << F32Bits(bias[i]);
    }
  }
  // CastTo, below and above its parallel threshold (2^16 elements).
  for (const int64_t n : {int64_t{4099}, int64_t{70001}}) {
    std::vector<float> v(static_cast<size_t>(n));
    for (float& f : v) f = F32FromBits(rng());
    const Tensor t = testing_util::MakeF32({n, 1}, v);
    const Tensor b = CastTo(t, DType::kBF16, MemoryCategory::kWorkspace, 2);
    for (int64_t i = 0; i < n; ++i) {
      ASSERT_EQ(b.data<uint16_t>()[i], F32ToBf16(v[static_cast<size_t>(i)])) << i;
    }
  }
}

TEST(E8M0, DecodeAndInverse) {
  for (int b = 0; b < 255; ++b) {
    EXPECT_EQ(static_cast<double>(DecodeE8M0(static_cast<uint8_t>(b))), std::ldexp(1.0, b - 127));
    EXPECT_EQ(static_cast<double>(E8M0InverseScale(static_cast<uint8_t>(b))),
              std::ldexp(1.0, 127 - b));
  }
  EXPECT_TRUE(std::isnan(DecodeE8M0(0xFF)));
}

// --- Scale rules -----------------------------------------------------------------------

int FloorLog2Oracle(double a) {
  int e;
  std::frexp(a, &e);  // a = f * 2^e, f in [0.5, 1): exact
  return e - 1;
}
int CeilLog2Oracle(double a) {
  int e;
  const double f = std::frexp(a, &e);
  return f == 0.5 ? e - 1 : e;
}
uint8_t Clamp(int b) { return static_cast<uint8_t>(std::clamp(b, 0, 254)); }

uint8_t OracleScale(ScaleRule rule, ElementFormat f, float amax) {
  const int emax = f == ElementFormat::kE4M3 ? 8 : 15;
  const double a = amax;
  switch (rule) {
    case ScaleRule::kFloor:
      return Clamp(FloorLog2Oracle(a) - emax + 127);
    case ScaleRule::kCeil:
      return Clamp(CeilLog2Oracle(a) - emax + 127);
    case ScaleRule::kRceil: {
      const float inv = f == ElementFormat::kE4M3 ? 1.0f / 448.0f : 1.0f / 57344.0f;
      const float d = amax * inv;  // one fp32 multiply, as specified
      if (d == 0.0f) return 0;
      return Clamp(CeilLog2Oracle(d) + 127);
    }
    case ScaleRule::kEven: {
      // Round half up to m mantissa bits, on the fp32 grid (quantum fixed below 2^-126).
      const int m = f == ElementFormat::kE4M3 ? 3 : 2;
      const double q = std::ldexp(1.0, std::max(FloorLog2Oracle(a), -126) - m);
      const double r = std::floor(a / q + 0.5) * q;
      if (r == 0) return 0;
      return Clamp(FloorLog2Oracle(r) - emax + 127);
    }
  }
  return 0xFF;
}

TEST(ScaleRules, MatchClosedFormOracles) {
  const uint64_t seed = 99;
  std::mt19937 rng(seed);
  std::vector<uint32_t> amaxes;
  for (int i = 0; i < 200000; ++i) amaxes.push_back(rng() & 0x7FFFFFFFu);
  for (uint32_t e = 0; e < 255; ++e) {  // around every power of two and 448 * 2^k, 1.75 * 2^k
    for (uint32_t base : {0u, 0x600000u, 0x700000u, 0x7FFFFFu, 0x400000u, 0x380000u}) {
      for (int d = -2; d <= 2; ++d) amaxes.push_back((e << 23) + base + static_cast<uint32_t>(d));
    }
  }
  for (uint32_t bits : amaxes) {
    if (bits == 0 || bits >= kF32InfBits) continue;
    const float a = F32FromBits(bits);
    for (ElementFormat f : {ElementFormat::kE4M3, ElementFormat::kE5M2}) {
      for (ScaleRule r :
           {ScaleRule::kRceil, ScaleRule::kFloor, ScaleRule::kCeil, ScaleRule::kEven}) {
        ASSERT_EQ(BlockScale(r, f, bits), OracleScale(r, f, a))
            << Name(r) << " " << Name(f) << " amax bits " << std::hex << bits << " seed "
            << std::dec << seed;
      }
    }
  }
}

TEST(ScaleRules, RceilNeverSaturates) {
  std::mt19937 rng(5);
  for (int i = 0; i < 100000; ++i) {
    const uint32_t bits = rng() & 0x7FFFFFFFu;
    if (bits == 0 || bits >= kF32InfBits) continue;
    for (ElementFormat f : {ElementFormat::kE4M3, ElementFormat::kE5M2}) {
      const uint8_t b = ScaleRceil(bits, f);
      const float scaled = F32FromBits(bits) * E8M0InverseScale(b);
      const float max = f == ElementFormat::kE4M3 ? 448.0f : 57344.0f;
      if (b < 254) {
        ASSERT_LE(scaled, max) << std::hex << bits;
      }
    }
  }
}

TEST(ScaleRules, SpecialBlocks) {
  for (ScaleRule r : {ScaleRule::kRceil, ScaleRule::kFloor, ScaleRule::kCeil, ScaleRule::kEven}) {
    EXPECT_EQ(BlockScale(r, ElementFormat::kE4M3, 0), 0);
    EXPECT_EQ(BlockScale(r, ElementFormat::kE4M3, kF32InfBits), 0xFF);
    EXPECT_EQ(BlockScale(r, ElementFormat::kE4M3, 0x7FC00000u), 0xFF);
    EXPECT_EQ(BlockScale(r, ElementFormat::kE5M2, 0x7F800001u), 0xFF);
  }
  // "even" carrying amax up to 2^128 (NUMERICS.md §4).
  EXPECT_EQ(ScaleEven(0x7F7FFFFFu, ElementFormat::kE4M3), 247);
  EXPECT_EQ(ScaleEven(0x7F7FFFFFu, ElementFormat::kE5M2), 240);
}

// NUMERICS.md §8: rceil, d's fp32 bits -> b.
TEST(ScaleRules, RceilGoldenQuotients) {
  const std::pair<uint32_t, int> cases[] = {
      {0x0, 0},          {0x1, 0},          {0x00400000, 0},   {0x00400001, 1},   {0x007FFFFF, 1},
      {0x00800000, 1},   {0x1F800000, 63},  {0x1F800001, 64},  {0x3F7FFFFF, 127}, {0x3F800000, 127},
      {0x3F800001, 128}, {0x5F800000, 191}, {0x5F800001, 192}, {0x7F000000, 254}};
  for (auto [d, b] : cases) EXPECT_EQ(RceilScaleFromQuotient(d), b) << std::hex << d;
  EXPECT_EQ(RceilScaleFromQuotient(0x7F7FFFFF), 254);  // clamped
}

TEST(Names, ParseAndPrint) {
  for (ScaleRule r : {ScaleRule::kRceil, ScaleRule::kFloor, ScaleRule::kCeil, ScaleRule::kEven}) {
    EXPECT_EQ(ParseScaleRule(Name(r)), r);
  }
  EXPECT_EQ(ParseElementFormat("e5m2"), ElementFormat::kE5M2);
  EXPECT_THROW(ParseElementFormat("e3m4"), Error);
  EXPECT_THROW(ParseScaleRule("round"), Error);
}

}  // namespace
}  // namespace mxtrain
