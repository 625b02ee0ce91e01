// Every fp32 bit pattern (2^32 of them) through the SIMD element encoder of every compiled
// target (one test instance per target, per_target_test.h), against the scalar reference
// encoder, for E4M3 and E5M2; every non-negative fp32 amax (2^31) through each rule's scale
// table, against BlockScale; and every finite amax under rceil and ceil, which must never
// round past the largest element; and every fp32 bit pattern through the vector bf16
// narrowing of every target (convert.h) against F32ToBf16, and through ExpF32 against
// std::exp. Label "exhaustive" (a ctest entry per test and target).
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "convert.h"
#include "mxtrain/elementwise.h"
#include "mxtrain/format/bf16.h"
#include "mxtrain/format/e4m3.h"
#include "mxtrain/format/e5m2.h"
#include "mxtrain/format/e8m0.h"
#include "mxtrain/format/element.h"
#include "mxtrain/testing.h"
#include "per_target_test.h"
#include "quantize/scale_table.h"

namespace mxtrain {
namespace {

// One instance per target, forced for the whole test: every thread runs the quantizers'
// element encoder of that target (EncodeElements, testing.h).
class ExhaustivePerTarget : public testing_util::SimdTargetTest {};
MXTRAIN_INSTANTIATE_PER_SIMD_TARGET(ExhaustivePerTarget);

TEST_P(ExhaustivePerTarget, SimdEncoderEqualsScalarOnAllFp32) {
  constexpr uint64_t kChunk = uint64_t{1} << 20;
  const std::string& t = GetParam();
  for (ElementFormat f : {ElementFormat::kE4M3, ElementFormat::kE5M2}) {
    int64_t mismatches = 0;
#pragma omp parallel reduction(+ : mismatches)
    {
      std::vector<float> in(kChunk);
      std::vector<uint8_t> want(kChunk), got(kChunk);
#pragma omp for schedule(dynamic)
      for (int64_t chunk = 0; chunk < int64_t{1} << 12; ++chunk) {
        for (uint64_t i = 0; i < kChunk; ++i) {
          in[i] = F32FromBits(static_cast<uint32_t>(chunk * kChunk + i));
          want[i] = EncodeElement(f, in[i]);
        }
        EncodeElements(f, in.data(), got.data(), kChunk);
        if (std::memcmp(got.data(), want.data(), kChunk) != 0) {
          for (uint64_t i = 0; i < kChunk; ++i) {
            if (got[i] != want[i] && mismatches < 10) {
#pragma omp critical
              ADD_FAILURE() << t << " " << Name(f) << " bits " << std::hex << F32Bits(in[i]) << ": "
                            << int{got[i]} << " vs " << int{want[i]};
            }
            mismatches += got[i] != want[i];
          }
        }
      }
    }
    EXPECT_EQ(mismatches, 0) << t << " " << Name(f);
  }
}

// The GEMMs' bf16 outputs and CastTo narrow through NarrowToBf16: every fp32 bit pattern,
// on every target, equals the scalar F32ToBf16 (itself checked against a double oracle
// in format_test).
TEST_P(ExhaustivePerTarget, Bf16NarrowingEqualsScalarOnAllFp32) {
  constexpr uint64_t kChunk = uint64_t{1} << 20;
  int64_t mismatches = 0;
#pragma omp parallel reduction(+ : mismatches)
  {
    std::vector<float> in(kChunk);
    std::vector<uint16_t> got(kChunk);
#pragma omp for schedule(dynamic)
    for (int64_t chunk = 0; chunk < int64_t{1} << 12; ++chunk) {
      for (uint64_t i = 0; i < kChunk; ++i) {
        in[i] = F32FromBits(static_cast<uint32_t>(chunk * kChunk + i));
      }
      internal::NarrowToBf16(in.data(), kChunk, nullptr, got.data());
      for (uint64_t i = 0; i < kChunk; ++i) {
        const uint16_t want = F32ToBf16(in[i]);
        if (got[i] != want && mismatches < 10) {
#pragma omp critical
          ADD_FAILURE() << GetParam() << " bits " << std::hex << F32Bits(in[i]) << ": " << got[i]
                        << " vs " << want;
        }
        mismatches += got[i] != want;
      }
    }
  }
  EXPECT_EQ(mismatches, 0) << GetParam();
}

// ExpF32 (elementwise.h) against std::exp on every fp32 bit pattern: the vector path on
// every |x| < 88, and the lanes it hands to std::exp.
TEST_P(ExhaustivePerTarget, ExpF32EqualsStdExpOnAllFp32) {
  constexpr uint64_t kChunk = uint64_t{1} << 20;
  int64_t mismatches = 0;
#pragma omp parallel reduction(+ : mismatches)
  {
    std::vector<float> in(kChunk), got(kChunk);
#pragma omp for schedule(dynamic)
    for (int64_t chunk = 0; chunk < int64_t{1} << 12; ++chunk) {
      for (uint64_t i = 0; i < kChunk; ++i) {
        in[i] = F32FromBits(static_cast<uint32_t>(chunk * kChunk + i));
      }
      ExpF32(in, got);
      for (uint64_t i = 0; i < kChunk; ++i) {
        const uint32_t want = F32Bits(std::exp(in[i]));
        if (F32Bits(got[i]) != want && mismatches < 10) {
#pragma omp critical
          ADD_FAILURE() << GetParam() << " bits " << std::hex << F32Bits(in[i]) << ": "
                        << F32Bits(got[i]) << " vs " << want;
        }
        mismatches += F32Bits(got[i]) != want;
      }
    }
  }
  EXPECT_EQ(mismatches, 0) << GetParam();
}

// The vector kernels take every block scale from the table (ScaleFromTable's vector form),
// so the table must equal the rule for every amax a block can have, not only at the binade
// edges the unit test samples: all 2^31 non-negative patterns, zero, subnormals, Inf and
// NaN included, for every rule and format.
TEST(Exhaustive, ScaleTableEqualsBlockScaleOnAllAmax) {
  constexpr int64_t kChunk = int64_t{1} << 20;
  for (ScaleRule rule :
       {ScaleRule::kRceil, ScaleRule::kFloor, ScaleRule::kCeil, ScaleRule::kEven}) {
    for (ElementFormat f : {ElementFormat::kE4M3, ElementFormat::kE5M2}) {
      const internal::ScaleTable& t = internal::ScaleTableFor(rule, f);
      int64_t mismatches = 0;
#pragma omp parallel for schedule(dynamic) reduction(+ : mismatches)
      for (int64_t chunk = 0; chunk < (int64_t{1} << 31) / kChunk; ++chunk) {
        int64_t bad = 0;
        for (int64_t i = 0; i < kChunk; ++i) {
          const uint32_t bits = static_cast<uint32_t>(chunk * kChunk + i);
          bad += internal::ScaleFromTable(t, bits) != BlockScale(rule, f, bits);
        }
        if (bad != 0 && mismatches == 0) {
          for (int64_t i = 0; i < kChunk; ++i) {
            const uint32_t bits = static_cast<uint32_t>(chunk * kChunk + i);
            if (internal::ScaleFromTable(t, bits) != BlockScale(rule, f, bits)) {
#pragma omp critical
              ADD_FAILURE() << Name(rule) << " " << Name(f) << " amax bits " << std::hex << bits;
              break;
            }
          }
        }
        mismatches += bad;
      }
      EXPECT_EQ(mismatches, 0) << Name(rule) << " " << Name(f);
    }
  }
}

// NUMERICS.md §4 says no element saturates under rceil (nor can one under ceil, whose
// scaled amax is at most 2^emax). The largest element of a block is its amax, so what
// matters is every finite amax times its block's multiplier, fl32(2^(127-b)): all
// 2^31 - 2^23 finite non-negative patterns, both formats. The check is that none reaches
// the midpoint above the largest element (464 for E4M3, 61440 for E5M2), so round to
// nearest never leaves the finite range whether or not the encoder saturates. Values
// above the largest element itself are counted and printed: under rceil there is one per
// format, where d = amax * fl32(1/448) lands at the fp32 subnormal boundary (amax bits
// 0x04600001 gives 448.00003), which rounds back to the largest element.
TEST(Exhaustive, RceilAndCeilNeverRoundPastTheLargestElement) {
  constexpr int64_t kChunk = int64_t{1} << 20;
  for (ScaleRule rule : {ScaleRule::kRceil, ScaleRule::kCeil}) {
    for (ElementFormat f : {ElementFormat::kE4M3, ElementFormat::kE5M2}) {
      const bool e4m3 = f == ElementFormat::kE4M3;
      const float max_elem = e4m3 ? kE4M3MaxNormal : kE5M2MaxNormal;
      const float midpoint = e4m3 ? 464.0f : 61440.0f;  // halfway to the next binade step
      int64_t past_midpoint = 0, above_max = 0;
#pragma omp parallel for schedule(dynamic) reduction(+ : past_midpoint, above_max)
      for (int64_t chunk = 0; chunk < (int64_t{255} << 23) / kChunk; ++chunk) {
        for (int64_t i = 0; i < kChunk; ++i) {
          const uint32_t bits = static_cast<uint32_t>(chunk * kChunk + i);
          const float scaled = F32FromBits(bits) * E8M0InverseScale(BlockScale(rule, f, bits));
          if (scaled > max_elem) {
            ++above_max;
#pragma omp critical
            std::printf("%s %s: amax bits %08x scales to %.9g\n", std::string(Name(rule)).c_str(),
                        std::string(Name(f)).c_str(), bits, scaled);
          }
          past_midpoint += scaled >= midpoint;
        }
      }
      EXPECT_EQ(past_midpoint, 0) << Name(rule) << " " << Name(f);
      if (rule == ScaleRule::kCeil) {
        EXPECT_EQ(above_max, 0) << Name(f);
      }
    }
  }
}

}  // namespace
}  // namespace mxtrain
