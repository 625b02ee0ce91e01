// OrderedMatMulF32 (elementwise.h): the bits of the plain scalar loop on every SIMD target,
// for every row range, over seeded shapes (every column count up to a few vectors, so
// every partial last vector), strided and transposed views of A, row strides of B and C
// wider than the columns, signed zeros, infinities and NaN; nothing written outside each
// row's columns; no read past the end of B (its last row ends at a page that faults).
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "mxtrain/elementwise.h"
#include "mxtrain/error.h"
#include "per_target_test.h"

namespace mxtrain {
namespace {

constexpr OrderedRange kRanges[] = {OrderedRange::kAll, OrderedRange::kColsToDiagonal,
                                    OrderedRange::kDepthToDiagonal,
                                    OrderedRange::kDepthFromDiagonal};

uint32_t Bits(float v) {
  uint32_t b;
  std::memcpy(&b, &v, sizeof(b));
  return b;
}

// The definition, as the scalar loop (this file is compiled without contraction).
void Reference(const OrderedMatMul& p) {
  for (int64_t r = 0; r < p.rows; ++r) {
    int64_t cols = p.cols, k0 = 0, k1 = p.depth;
    if (p.range == OrderedRange::kColsToDiagonal) cols = std::min(p.cols, r + 1);
    if (p.range == OrderedRange::kDepthToDiagonal) k1 = std::min(p.depth, r + 1);
    if (p.range == OrderedRange::kDepthFromDiagonal) k0 = std::min(r, p.depth);
    for (int64_t n = 0; n < cols; ++n) {
      float s = 0;
      for (int64_t k = k0; k < k1; ++k) s += p.a[r * p.a_row + k * p.a_depth] * p.b[k * p.ldb + n];
      p.c[r * p.ldc + n] = s;
    }
  }
}

float Draw(std::mt19937& rng, bool specials) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  if (specials) {
    switch (std::uniform_int_distribution<int>(0, 40)(rng)) {
      case 0:
        return -0.0f;
      case 1:
        return std::numeric_limits<float>::infinity();
      case 2:
        return -std::numeric_limits<float>::infinity();
      case 3:
        return std::numeric_limits<float>::quiet_NaN();
      case 4:
        return 0.0f;
      default:
        break;
    }
  }
  return normal(rng);
}

// One product on fresh seeded operands, against Reference bit for bit, C's sentinels
// outside the row ranges included. A is read transposed when `transposed_a`.
void ExpectReferenceBits(std::mt19937& rng, int64_t rows, int64_t cols, int64_t depth,
                         OrderedRange range, bool transposed_a, int64_t pad, bool specials) {
  const int64_t ldb = cols + pad, ldc = cols + pad;
  std::vector<float> a(static_cast<size_t>(std::max<int64_t>(rows * depth, 1)));
  std::vector<float> b(static_cast<size_t>(std::max<int64_t>(depth * ldb, 1)));
  for (float& v : a) v = Draw(rng, specials);
  for (float& v : b) v = Draw(rng, specials);
  const float sentinel = -1234.5f;
  std::vector<float> got(static_cast<size_t>(std::max<int64_t>(rows * ldc, 1)), sentinel);
  std::vector<float> want(got);
  OrderedMatMul p{.rows = rows,
                  .cols = cols,
                  .depth = depth,
                  .a = a.data(),
                  .a_row = transposed_a ? 1 : depth,
                  .a_depth = transposed_a ? rows : 1,
                  .b = b.data(),
                  .ldb = ldb,
                  .c = got.data(),
                  .ldc = ldc,
                  .range = range};
  OrderedMatMulF32(p);
  p.c = want.data();
  Reference(p);
  int failures = 0;
  for (size_t i = 0; i < got.size() && failures < 5; ++i) {
    const bool both_nan = std::isnan(got[i]) && std::isnan(want[i]);  // payloads unspecified
    if (!both_nan && Bits(got[i]) != Bits(want[i])) {
      ++failures;
      ADD_FAILURE() << rows << "x" << cols << "x" << depth << " range " << static_cast<int>(range)
                    << (transposed_a ? " A^T" : "") << " pad " << pad << ": C("
                    << i / static_cast<size_t>(ldc) << ", " << i % static_cast<size_t>(ldc)
                    << ") = " << got[i] << ", the loop gives " << want[i];
    }
  }
}

class OrderedMatMulPerTarget : public testing_util::SimdTargetTest {};
MXTRAIN_INSTANTIATE_PER_SIMD_TARGET(OrderedMatMulPerTarget);

TEST_P(OrderedMatMulPerTarget, EveryColumnCountEqualsTheLoop) {
  std::mt19937 rng(20261207);
  // Up to 4 AVX-512 vectors and past them: every full-block, whole-vector and tail mix.
  for (int64_t cols = 1; cols <= 70; ++cols) {
    for (const OrderedRange range : kRanges) {
      ExpectReferenceBits(rng, 5, cols, 7, range, false, 0, false);
    }
  }
}

TEST_P(OrderedMatMulPerTarget, SeededShapesStridesAndSpecialsEqualTheLoop) {
  std::mt19937 rng(77);
  std::uniform_int_distribution<int64_t> size(0, 80), pad(0, 9);
  for (int trial = 0; trial < 60; ++trial) {
    const int64_t rows = size(rng), cols = size(rng), depth = size(rng);
    for (const OrderedRange range : kRanges) {
      ExpectReferenceBits(rng, rows, cols, depth, range, trial % 2 == 1, pad(rng), trial % 3 == 0);
    }
  }
  // Attention's shapes: 64 positions, heads of 32.
  for (const OrderedRange range : kRanges) {
    ExpectReferenceBits(rng, 64, 64, 32, range, false, 0, false);
    ExpectReferenceBits(rng, 64, 32, 64, range, true, 96, false);
  }
}

TEST_P(OrderedMatMulPerTarget, ReadsNothingPastTheLastRowOfB) {
  // B's last row ends where a page that faults begins, for every column count up to 40.
  const int64_t page = sysconf(_SC_PAGESIZE);
  void* mem = mmap(nullptr, 2 * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(mem, MAP_FAILED);
  ASSERT_EQ(mprotect(static_cast<char*>(mem) + page, page, PROT_NONE), 0);
  std::mt19937 rng(5);
  for (int64_t cols = 1; cols <= 40; ++cols) {
    const int64_t depth = 3, rows = 4;
    float* b = reinterpret_cast<float*>(static_cast<char*>(mem) + page) - depth * cols;
    for (int64_t i = 0; i < depth * cols; ++i) b[i] = Draw(rng, false);
    std::vector<float> a(rows * depth), got(rows * cols), want(rows * cols);
    for (float& v : a) v = Draw(rng, false);
    OrderedMatMul p{.rows = rows,
                    .cols = cols,
                    .depth = depth,
                    .a = a.data(),
                    .a_row = depth,
                    .a_depth = 1,
                    .b = b,
                    .ldb = cols,
                    .c = got.data(),
                    .ldc = cols};
    OrderedMatMulF32(p);
    p.c = want.data();
    Reference(p);
    EXPECT_EQ(0, std::memcmp(got.data(), want.data(), got.size() * sizeof(float))) << cols;
  }
  munmap(mem, 2 * page);
}

TEST(OrderedMatMul, BadShapesAreErrors) {
  std::vector<float> a(16), b(16), c(16);
  const OrderedMatMul ok{.rows = 2,
                         .cols = 2,
                         .depth = 2,
                         .a = a.data(),
                         .a_row = 2,
                         .a_depth = 1,
                         .b = b.data(),
                         .ldb = 2,
                         .c = c.data(),
                         .ldc = 2};
  EXPECT_NO_THROW(OrderedMatMulF32(ok));
  OrderedMatMul bad = ok;
  bad.rows = -1;
  EXPECT_THROW(OrderedMatMulF32(bad), Error);
  bad = ok;
  bad.ldb = 1;
  EXPECT_THROW(OrderedMatMulF32(bad), Error);
  bad = ok;
  bad.ldc = 1;
  EXPECT_THROW(OrderedMatMulF32(bad), Error);
  bad = ok;
  bad.b = nullptr;
  EXPECT_THROW(OrderedMatMulF32(bad), Error);
  bad = ok;
  bad.c = nullptr;
  EXPECT_THROW(OrderedMatMulF32(bad), Error);
  // Nothing to compute: no pointer is needed.
  EXPECT_NO_THROW(OrderedMatMulF32(OrderedMatMul{.rows = 0, .cols = 3, .ldb = 3, .ldc = 3}));
}

}  // namespace
}  // namespace mxtrain
