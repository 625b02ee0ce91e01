// mxtrain demo: quantizes one built-in tensor with every element format x scale rule x axis
// and prints what each costs (bytes) and loses (SQNR, relative error), in well under a
// second.
#include <algorithm>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <limits>
#include <string>
#include <vector>

#include "args.h"
#include "commands.h"
#include "mxtrain/error.h"
#include "mxtrain/quantize.h"
#include "mxtrain/simd.h"

namespace mxtrain::cli {
namespace {

constexpr char kDemoUsage[] =
    R"(usage: mxtrain demo [--seed N]
  Quantizes a built-in 256 x 1024 float32 tensor (normal values, a few rows scaled by
  2^20 and 2^-20, one NaN, a zero block) with e4m3/e5m2 x rceil/floor, rowwise and
  columnwise, and prints scale range, size, SQNR and error of each.
  --seed N    seed of the values (default 1)
)";

constexpr int64_t kRows = 256;
constexpr int64_t kCols = 1024;
constexpr int kLargeRowScale = 20;   // rows 0-3 times 2^20
constexpr int kSmallRowScale = -20;  // rows 4-7 times 2^-20
constexpr int64_t kNanRow = 64, kNanCol = 5;
constexpr int64_t kZeroRow0 = 128, kZeroRows = 32, kZeroCols = 32;

// splitmix64 and Box-Muller rather than <random>'s distributions, whose output differs
// between standard libraries: the same seed prints the same table everywhere.
class NormalSource {
 public:
  explicit NormalSource(uint64_t seed) : state_(seed) {}
  double Next() {
    const double u1 = Uniform(), u2 = Uniform();
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
  }

 private:
  double Uniform() {  // in (0, 1): never 0, so log() stays finite
    uint64_t z = (state_ += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    return (static_cast<double>(z >> 11) + 0.5) * 0x1.0p-53;
  }
  uint64_t state_;
};

Tensor DemoTensor(uint64_t seed) {
  Tensor x = Tensor::Empty(DType::kF32, {kRows, kCols});
  float* v = x.mutable_data<float>();
  NormalSource normal(seed);
  for (int64_t r = 0; r < kRows; ++r) {
    const int exp = r < 4 ? kLargeRowScale : r < 8 ? kSmallRowScale : 0;
    for (int64_t c = 0; c < kCols; ++c) {
      v[r * kCols + c] = std::ldexp(static_cast<float>(normal.Next()), exp);
    }
  }
  v[kNanRow * kCols + kNanCol] = std::numeric_limits<float>::quiet_NaN();
  for (int64_t r = kZeroRow0; r < kZeroRow0 + kZeroRows; ++r) {
    for (int64_t c = 0; c < kZeroCols; ++c) v[r * kCols + c] = 0.0f;
  }
  return x;
}

struct Stats {
  int min_exp = 0, max_exp = 0;  // over finite, non-zero blocks
  double sqnr_db = 0;
  double max_rel_err = 0;
  int64_t zeroed = 0;  // non-zero inputs that read back as zero
  int64_t zero_blocks = 0, nan_blocks = 0;
};

// The index of the scale of element (r, c) of a 2-D MX tensor.
int64_t ScaleIndex(const MxTensor& q, int64_t r, int64_t c) {
  if (q.axis() == BlockAxis::kRowwise) return r * CeilDiv(q.cols(), kMxBlock) + c / kMxBlock;
  return (r / kMxBlock) * q.cols() + c;
}

Stats Measure(const Tensor& x, const MxTensor& q) {
  Stats st;
  const uint8_t* s = q.scales().const_data<uint8_t>();
  const float* xs = x.const_data<float>();
  const Tensor y = Dequantize(q, DType::kF32);
  // An element below the format's smallest normal (times its block scale) keeps fewer
  // mantissa bits by design; the relative error is reported for the normal range only.
  const double min_normal = q.format() == ElementFormat::kE4M3 ? 0x1.0p-6 : 0x1.0p-14;
  std::vector<bool> nonzero_block(static_cast<size_t>(q.scales().NumElements()), false);
  double signal = 0, noise = 0;
  for (int64_t r = 0; r < q.rows(); ++r) {
    for (int64_t c = 0; c < q.cols(); ++c) {
      const int64_t block = ScaleIndex(q, r, c);
      const uint8_t b = s[block];
      if (b == kE8M0NaN) continue;  // the SQNR is over finite blocks
      const double xv = xs[r * q.cols() + c];
      const double yv = y.const_data<float>()[r * q.cols() + c];
      const double err = xv - yv;
      signal += xv * xv;
      noise += err * err;
      if (xv == 0) continue;
      nonzero_block[static_cast<size_t>(block)] = true;
      if (yv == 0) ++st.zeroed;
      if (std::fabs(xv) >= min_normal * DecodeE8M0(b)) {
        st.max_rel_err = std::max(st.max_rel_err, std::fabs(err / xv));
      }
    }
  }
  st.sqnr_db = noise == 0 ? INFINITY : 10.0 * std::log10(signal / noise);
  st.min_exp = 255;
  st.max_exp = -255;
  for (size_t i = 0; i < nonzero_block.size(); ++i) {
    if (s[i] == kE8M0NaN) {
      ++st.nan_blocks;
    } else if (!nonzero_block[i]) {
      ++st.zero_blocks;
    } else {
      st.min_exp = std::min(st.min_exp, s[i] - kE8M0Bias);
      st.max_exp = std::max(st.max_exp, s[i] - kE8M0Bias);
    }
  }
  return st;
}

int Demo(const std::vector<std::string>& argv) {
  const ParsedArgs args = ParsedArgs::Parse(argv, "mxtrain demo", {{"seed"}});
  if (args.help()) {
    std::fputs(kDemoUsage, stdout);
    return 0;
  }
  args.ExpectPositional(0, "no positional arguments");
  const auto seed = static_cast<uint64_t>(
      ParseInt(args.Get("seed", "1"), "--seed", 0, std::numeric_limits<int64_t>::max()));
  const Tensor x = DemoTensor(seed);
  const std::string what = StrCat(kRows, " x ", kCols, " float32, seed ", seed, "; rows 0-3 x 2^",
                                  kLargeRowScale, ", rows 4-7 x 2^", kSmallRowScale, ", NaN at [",
                                  kNanRow, ", ", kNanCol, "], zeros in rows ", kZeroRow0, "-",
                                  kZeroRow0 + kZeroRows - 1, " x cols 0-", kZeroCols - 1);
  std::printf("mxtrain demo: %s; SIMD target %s\n\n", what.c_str(), CurrentSimdTarget().c_str());
  std::printf("%-6s %-6s %-10s %9s %7s %7s %7s %10s %6s %10s %10s\n", "format", "rule", "axis",
              "scale exp", "bytes", "vs fp32", "SQNR dB", "max relerr", "zeroed", "zero blks",
              "NaN blks");
  for (ElementFormat format : {ElementFormat::kE4M3, ElementFormat::kE5M2}) {
    for (ScaleRule rule : {ScaleRule::kRceil, ScaleRule::kFloor}) {
      QuantizeOptions options;
      options.format = format;
      options.rule = rule;
      const DualMx dual = QuantizeDual(x, options);
      for (const MxTensor* q : {&dual.rowwise, &dual.columnwise}) {
        const Stats st = Measure(x, *q);
        const std::string exps = StrCat(st.min_exp, "..", st.max_exp);
        std::printf("%-6s %-6s %-10s %9s %7zu %6.1f%% %7.2f %10.4f %6" PRId64 " %10" PRId64
                    " %10" PRId64 "\n",
                    Name(format).data(), Name(rule).data(), Name(q->axis()).data(), exps.c_str(),
                    q->NumBytes(), 100.0 * q->NumBytes() / x.NumBytes(), st.sqnr_db, st.max_rel_err,
                    st.zeroed, st.zero_blocks, st.nan_blocks);
      }
    }
  }
  std::printf(
      "\nscale exp: b - 127 over finite non-zero blocks; bytes: data + scales; SQNR: over "
      "finite blocks;\nmax relerr: over elements in the format's normal range; zeroed: "
      "non-zero inputs read back as 0.\n");
  return 0;
}

}  // namespace

int RunDemo(const std::vector<std::string>& args) {
  return RunReportingErrors([&] { return Demo(args); });
}

}  // namespace mxtrain::cli
