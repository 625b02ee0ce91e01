// ExpF32 (elementwise.h): std::exp's bits on every SIMD target, by vectors where the target
// has FMA. Seeded values over the whole main range and its edges, every length up to a few
// vectors (the scalar tail), vectors that mix special lanes (|x| >= 88, infinities, NaN)
// with ordinary ones, in place and at unaligned starts. Every fp32 bit pattern is checked
// by the exhaustive label (exhaustive_encode_test.cc). ExpF64 likewise against the double
// std::exp, through the same checker, over 2^20 seeded doubles and the double edges.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <span>
#include <type_traits>
#include <vector>

#include "mxtrain/elementwise.h"
#include "mxtrain/error.h"
#include "mxtrain/format/bits.h"
#include "per_target_test.h"

namespace mxtrain {
namespace {

// The bits of a float or a double.
template <typename T>
auto BitsOf(T v) {
  if constexpr (std::is_same_v<T, float>) {
    return F32Bits(v);
  } else {
    return std::bit_cast<uint64_t>(v);
  }
}

void Exp(std::span<const float> x, std::span<float> y) { ExpF32(x, y); }
void Exp(std::span<const double> x, std::span<double> y) { ExpF64(x, y); }

// ExpF32 or ExpF64 of x (out of place and in place, from `offset` values into a buffer)
// against std::exp bit for bit.
template <typename T>
void ExpectStdExpBits(const std::vector<T>& x, size_t offset = 0) {
  std::vector<T> in(offset + x.size()), out(offset + x.size(), T(-1));
  std::copy(x.begin(), x.end(), in.begin() + static_cast<ptrdiff_t>(offset));
  const std::span<const T> src(in.data() + offset, x.size());
  const std::span<T> dst(out.data() + offset, x.size());
  Exp(src, dst);
  std::vector<T> same(in);
  const std::span<T> inplace(same.data() + offset, x.size());
  Exp(inplace, inplace);
  int failures = 0;
  for (size_t i = 0; i < x.size() && failures < 10; ++i) {
    const auto want = BitsOf(std::exp(x[i]));
    if (BitsOf(dst[i]) != want || BitsOf(inplace[i]) != want) {
      ++failures;
      ADD_FAILURE() << "exp(" << std::hexfloat << x[i] << ") at " << i << " of " << x.size() << ": "
                    << dst[i] << " / in place " << inplace[i] << ", std::exp " << std::exp(x[i]);
    }
  }
}

// Each edge alone in a vector of `lanes` ordinary values (step * i + first), at every lane.
template <typename T>
void ExpectEachEdgeAtEveryLane(const std::vector<T>& edges, size_t lanes, T step, T first) {
  for (T e : edges) {
    for (size_t lane = 0; lane < lanes; ++lane) {
      std::vector<T> x(lanes);
      for (size_t i = 0; i < x.size(); ++i) x[i] = step * static_cast<T>(i) + first;
      x[lane] = e;
      ExpectStdExpBits(x);
    }
  }
}

// Every length 0..max_n of seeded values in [lo, hi) (the scalar tails).
template <typename T>
void ExpectEveryLength(uint32_t seed, T lo, T hi, size_t max_n) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<T> u(lo, hi);
  for (size_t n = 0; n <= max_n; ++n) {
    std::vector<T> x(n);
    for (T& v : x) v = u(rng);
    ExpectStdExpBits(x);
  }
}

class ExpPerTarget : public testing_util::SimdTargetTest {};
MXTRAIN_INSTANTIATE_PER_SIMD_TARGET(ExpPerTarget);

TEST_P(ExpPerTarget, SeededValuesEqualStdExp) {
  std::mt19937 rng(20261207);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  std::uniform_real_distribution<float> wide(-87.99f, 87.99f);
  std::uniform_int_distribution<uint32_t> bits(0, 0x42afffff);  // every |x| < 88
  std::vector<float> x(4099);
  for (size_t i = 0; i < x.size(); ++i) {
    float v;
    switch (i % 3) {
      case 0:
        v = normal(rng);
        break;
      case 1:
        v = wide(rng);
        break;
      default: {
        const uint32_t b = bits(rng) | (rng() & 1u) << 31;
        std::memcpy(&v, &b, sizeof(v));
      }
    }
    x[i] = v;
  }
  ExpectStdExpBits(x);
  ExpectStdExpBits(x, 1);  // unaligned
  ExpectStdExpBits(x, 3);
}

TEST_P(ExpPerTarget, EdgesAndSpecialLanesEqualStdExp) {
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float sig = std::numeric_limits<float>::signaling_NaN();
  const float denorm = std::numeric_limits<float>::denorm_min();
  const float tiny = std::numeric_limits<float>::min();
  const std::vector<float> edges = {0.0f,
                                    -0.0f,
                                    denorm,
                                    -denorm,
                                    tiny,
                                    -tiny,
                                    1.0f,
                                    -1.0f,
                                    0.5f,
                                    -0.5f,
                                    std::nextafter(88.0f, 0.0f),
                                    std::nextafter(-88.0f, 0.0f),
                                    88.0f,
                                    -88.0f,
                                    88.72283f,
                                    88.72284f,
                                    89.0f,
                                    -87.33654f,
                                    -87.33655f,
                                    -103.97208f,
                                    -103.97209f,
                                    -104.0f,
                                    -150.0f,
                                    1e30f,
                                    -1e30f,
                                    inf,
                                    -inf,
                                    nan,
                                    -nan,
                                    sig,
                                    0x1p-30f,
                                    -0x1p-30f,
                                    1e-7f,
                                    20.5f};
  ExpectStdExpBits(edges);
  // Inputs whose results move by an ulp when x / ln2 * 32 - k is rounded before the
  // subtraction (glibc fuses it): found by the exhaustive test.
  // (Padded to 16 values, so that they reach the vectors rather than the scalar tail.)
  std::vector<float> fused(16, 1.5f);
  for (size_t i : {0, 7}) {
    const uint32_t b = i == 0 ? 0x4202422fu : 0xc27c65d9u;
    std::memcpy(&fused[i], &b, sizeof(float));
  }
  ExpectStdExpBits(fused);
  ExpectEachEdgeAtEveryLane(edges, 16, 0.25f, -2.0f);
}

TEST_P(ExpPerTarget, EveryLengthEqualsStdExp) { ExpectEveryLength(7, -20.0f, 20.0f, 67); }

// Seeded values over the main path's whole range (|x| < 512), every binade down to the
// tiny ones, the cross-entropy's inputs (float differences, all <= 0), and random bit
// patterns; 2^20 of them, so that every table entry and rounding case is met many times.
TEST_P(ExpPerTarget, F64SeededValuesEqualStdExp) {
  std::mt19937_64 rng(20261207);
  std::uniform_real_distribution<double> wide(-511.99, 511.99), near(-1.0, 1.0);
  std::uniform_real_distribution<float> logits(-30.0f, 30.0f);
  std::uniform_int_distribution<int> binade(-80, 9);
  std::vector<double> x(1 << 20);
  for (size_t i = 0; i < x.size(); ++i) {
    switch (i % 5) {
      case 0:
        x[i] = wide(rng);
        break;
      case 1:
        x[i] = near(rng);
        break;
      case 2:
        x[i] = std::ldexp(near(rng), binade(rng));
        break;
      case 3: {
        const float a = logits(rng), b = logits(rng);
        x[i] = static_cast<double>(std::min(a, b)) - std::max(a, b);
        break;
      }
      default: {
        const uint64_t b = rng();
        std::memcpy(&x[i], &b, sizeof(double));
      }
    }
  }
  ExpectStdExpBits(x);
  ExpectStdExpBits(std::vector<double>(x.begin(), x.begin() + 4099), 1);  // unaligned
}

TEST_P(ExpPerTarget, F64EdgesAndSpecialLanesEqualStdExp) {
  const double inf = std::numeric_limits<double>::infinity();
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double denorm = std::numeric_limits<double>::denorm_min();
  const std::vector<double> edges = {0.0,
                                     -0.0,
                                     denorm,
                                     -denorm,
                                     std::numeric_limits<double>::min(),
                                     0x1p-54,
                                     -0x1p-54,
                                     std::nextafter(0x1p-54, 0.0),
                                     -std::nextafter(0x1p-54, 0.0),
                                     1e-10,
                                     1.0,
                                     -1.0,
                                     std::nextafter(512.0, 0.0),
                                     -std::nextafter(512.0, 0.0),
                                     512.0,
                                     -512.0,
                                     709.78,
                                     709.79,
                                     -708.4,
                                     -745.1,
                                     -745.2,
                                     -1000.0,
                                     1000.0,
                                     1e300,
                                     -1e300,
                                     inf,
                                     -inf,
                                     nan,
                                     -nan,
                                     0.5 * std::log(2.0) / 128,
                                     -300.5};
  ExpectStdExpBits(edges);
  ExpectEachEdgeAtEveryLane(edges, 8, 0.75, -3.0);
}

TEST_P(ExpPerTarget, F64EveryLengthEqualsStdExp) { ExpectEveryLength(9, -40.0, 40.0, 35); }

TEST(Exp, MismatchedOrOverlappingSpansAreErrors) {
  std::vector<float> x(8, 1.0f), y(7);
  EXPECT_THROW(ExpF32(x, y), Error);
  std::vector<float> buf(16, 0.0f);
  EXPECT_THROW(ExpF32(std::span<const float>(buf.data(), 8), std::span<float>(buf.data() + 4, 8)),
               Error);
  EXPECT_NO_THROW(
      ExpF32(std::span<const float>(buf.data(), 8), std::span<float>(buf.data() + 8, 8)));
  EXPECT_EQ(buf[8], 1.0f);
  std::vector<double> a(8, 0.0), b(7);
  EXPECT_THROW(ExpF64(a, b), Error);
  EXPECT_THROW(ExpF64(std::span<const double>(a.data(), 6), std::span<double>(a.data() + 2, 6)),
               Error);
  EXPECT_NO_THROW(ExpF64(std::span<const double>(a.data(), 4), std::span<double>(a.data() + 4, 4)));
  EXPECT_EQ(a[4], 1.0);
}

}  // namespace
}  // namespace mxtrain
