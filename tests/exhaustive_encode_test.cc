// Every fp32 bit pattern (2^32 of them) through the SIMD element encoder of every compiled
// target, against the scalar reference encoder, for E4M3 and E5M2; and every non-negative
// fp32 amax (2^31) through each rule's scale table, against BlockScale. Label "exhaustive"
// (two ctest entries, one per test).
#include <gtest/gtest.h>

#include <omp.h>

#include <cstring>
#include <vector>

#include "mxtrain/format/element.h"
#include "mxtrain/quantize.h"
#include "mxtrain/simd.h"
#include "quantize/kernels.h"
#include "quantize/scale_table.h"

namespace mxtrain {
namespace {

TEST(Exhaustive, SimdEncoderEqualsScalarOnAllFp32) {
  constexpr uint64_t kChunk = uint64_t{1} << 20;
  const std::vector<std::string> targets = AvailableSimdTargets();
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
        for (const std::string& t : targets) {
          // Call a specific target's kernel without touching the global choice.
          internal::QuantKernelsForTarget(t).encode(f, in.data(), got.data(), kChunk);
          if (std::memcmp(got.data(), want.data(), kChunk) != 0) {
            for (uint64_t i = 0; i < kChunk; ++i) {
              if (got[i] != want[i] && mismatches < 10) {
#pragma omp critical
                ADD_FAILURE() << t << " " << Name(f) << " bits " << std::hex
                              << F32Bits(in[i]) << ": " << int{got[i]} << " vs " << int{want[i]};
              }
              mismatches += got[i] != want[i];
            }
          }
        }
      }
    }
    EXPECT_EQ(mismatches, 0) << Name(f);
  }
}

// The vector kernels take every block scale from the table (ScaleFromTable's vector form),
// so the table must equal the rule for every amax a block can have, not only at the binade
// edges the unit test samples: all 2^31 non-negative patterns, zero, subnormals, Inf and
// NaN included, for every rule and format.
TEST(Exhaustive, ScaleTableEqualsBlockScaleOnAllAmax) {
  constexpr int64_t kChunk = int64_t{1} << 20;
  for (ScaleRule rule : {ScaleRule::kRceil, ScaleRule::kFloor, ScaleRule::kCeil, ScaleRule::kEven}) {
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

}  // namespace
}  // namespace mxtrain
