// mxtrain gemm and mxtrain grouped-gemm end to end. Inputs are written, and outputs parsed,
// by a minimal .npy codec of this file (mirroring cli_test.cc's, not the library's), so the
// CLI is checked against an independent encoding. Expected bytes come from the library
// in-process on the same GEMM path (quantize rowwise, then MxGemm per matrix or per group);
// a float64 product of the raw inputs computed here checks the numbers independently of it.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "cli_test_util.h"
#include "mxtrain/gemm.h"
#include "mxtrain/quantize.h"
#include "mxtrain/testing.h"
#include "test_util.h"

namespace mxtrain {
namespace {

namespace fs = std::filesystem;
using testing_util::EdgeMix;
using testing_util::MakeBf16;
using testing_util::MakeF32;

using testing_util::DecodeNpy;
using testing_util::EncodeNpy;
using testing_util::ExpectNpyEquals;
using testing_util::RawNpy;
using testing_util::ReadBytes;
using testing_util::RunResult;
using testing_util::TensorBytes;
using testing_util::WriteBytes;

// The values of a '<f4' file.
std::vector<float> ReadF32Values(const std::string& path) {
  const RawNpy r = DecodeNpy(path);
  EXPECT_EQ(r.descr, "<f4");
  std::vector<float> v(r.data.size() / sizeof(float));
  std::memcpy(v.data(), r.data.data(), v.size() * sizeof(float));
  return v;
}

// Standard normal values: every block's scale lies in the normal range, so the error check
// against float64 measures quantization alone.
Tensor NormalF32(const Shape& shape, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> v(static_cast<size_t>(shape.NumElements()));
  for (float& x : v) x = normal(rng);
  return MakeF32(shape, v);
}

Tensor EdgeF32(const Shape& shape, uint64_t seed) {
  return MakeF32(shape, EdgeMix(shape.NumElements(), seed));
}

QuantizeOptions Options(ElementFormat format, ScaleRule rule = ScaleRule::kRceil) {
  QuantizeOptions o;
  o.format = format;
  o.rule = rule;
  return o;
}

GemmOptions OutOptions(DType out_dtype, const Tensor* bias = nullptr) {
  GemmOptions o;
  o.out_dtype = out_dtype;
  o.bias = bias;
  return o;
}

// What the CLI must compute for gemm: quantize both rowwise, one MxGemm.
Tensor ExpectedGemm(const Tensor& a, const Tensor& b, const QuantizeOptions& qa,
                    const QuantizeOptions& qb, const GemmOptions& o) {
  return MxGemm(QuantizeRowwise(a, qa), QuantizeRowwise(b, qb), o);
}

// What the CLI must compute for grouped-gemm, built from dense GEMMs: each group's rows of
// x and its expert's matrix of w [E, N, K] quantized on their own (rowwise blocks never
// cross rows, so this equals quantizing the whole tensors), bias row e for group e.
Tensor ExpectedGroupedGemm(const Tensor& x, const Tensor& w, const std::vector<int64_t>& counts,
                           const QuantizeOptions& qx, const QuantizeOptions& qw, DType out_dtype,
                           const Tensor* bias = nullptr) {
  const int64_t n = w.shape()[1], k = w.shape()[2];
  Tensor y = Tensor::Empty(out_dtype, {x.shape()[0], n});
  const size_t row_bytes = static_cast<size_t>(n) * DTypeSize(out_dtype);
  int64_t begin = 0;
  for (size_t e = 0; e < counts.size(); ++e) {
    const int64_t end = begin + counts[e];
    if (end > begin) {
      const int64_t ei = static_cast<int64_t>(e);
      const Tensor bias_e = bias ? bias->Slice(ei, ei + 1).Reshape({n}) : Tensor();
      const Tensor y_e = ExpectedGemm(x.Slice(begin, end), w.Slice(ei, ei + 1).Reshape({n, k}), qx,
                                      qw, OutOptions(out_dtype, bias ? &bias_e : nullptr));
      std::memcpy(static_cast<char*>(y.raw()) + begin * row_bytes, y_e.raw(), y_e.NumBytes());
    }
    begin = end;
  }
  return y;
}

class CliGemmTest : public testing_util::CliFixture {
 protected:
  // Success, and the summary line names what was written. Returns that line.
  std::string ExpectOk(const std::vector<std::string>& args) const {
    const std::string line = CliFixture::ExpectOk(args);
    EXPECT_EQ(line.rfind("wrote ", 0), 0u) << line;
    return line;
  }
};

// K = 70 (two full blocks and a partial one); edge values exercise the exact path's tiles
// (NaN blocks, extreme scales) as well as the fast path's. Every path of this machine, and
// the default, give the library's bytes.
TEST_F(CliGemmTest, GemmMatchesLibraryOnEveryPathF32AndBf16) {
  const Tensor a = EdgeF32({37, 70}, 1);
  const Tensor b = EdgeF32({45, 70}, 2);
  const std::string a_in = WriteInput("a.npy", a);
  const std::string b_in = WriteInput("b.npy", b);
  const QuantizeOptions e4m3 = Options(ElementFormat::kE4M3);
  std::vector<std::string> paths = AvailableGemmPaths();
  paths.insert(paths.begin(), "");  // "": no --path flag, the default
  for (const std::string& path : paths) {
    SCOPED_TRACE("path '" + path + "'");
    const ScopedGemmPath forced(path);
    std::vector<std::string> path_flag;
    if (!path.empty()) path_flag = {"--path", path};
    std::vector<std::string> args = {"gemm", a_in, b_in, "--out", Out("c.npy")};
    args.insert(args.end(), path_flag.begin(), path_flag.end());
    const std::string summary = ExpectOk(args);
    EXPECT_NE(summary.find("gemm path " + CurrentGemmPath() + ")"), std::string::npos) << summary;
    ExpectNpyEquals(Out("c.npy"), ExpectedGemm(a, b, e4m3, e4m3, OutOptions(DType::kF32)));
    args = {"gemm", "--out-dtype=bf16", a_in, b_in, "--out", Out("cb.npy"), "--threads", "1"};
    args.insert(args.end(), path_flag.begin(), path_flag.end());
    ExpectOk(args);
    ExpectNpyEquals(Out("cb.npy"), ExpectedGemm(a, b, e4m3, e4m3, OutOptions(DType::kBF16)));
  }
}

// Normal magnitudes here: with edge values the huge products would absorb the bias.
TEST_F(CliGemmTest, GemmMixedFormatsScaleRuleBiasAndBf16Input) {
  std::vector<float> a_values(33 * 45);
  std::mt19937_64 rng(3);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (float& v : a_values) v = normal(rng);
  const Tensor a = MakeBf16({33, 45}, a_values);
  const Tensor b = NormalF32({20, 45}, 4);
  const Tensor bias = NormalF32({20}, 5);
  const std::string a_in = WriteInput("a.npy", a);
  const std::string b_in = WriteInput("b.npy", b);
  const std::string bias_in = WriteInput("bias.npy", bias);
  for (const char* rule : {"rceil", "floor", "ceil", "even"}) {
    SCOPED_TRACE(rule);
    const ScaleRule r = ParseScaleRule(rule);
    const QuantizeOptions qa = Options(ElementFormat::kE5M2, r);
    const QuantizeOptions qb = Options(ElementFormat::kE4M3, r);
    ExpectOk({"gemm", a_in, b_in, "--out", Out("c.npy"), "--format-a", "e5m2", "--format-b", "e4m3",
              "--scale", rule, "--bias", bias_in});
    ExpectNpyEquals(Out("c.npy"), ExpectedGemm(a, b, qa, qb, OutOptions(DType::kF32, &bias)));
    ExpectOk({"gemm", a_in, b_in, "--out", Out("cb.npy"), "--format-a=e5m2", "--scale", rule,
              "--bias", bias_in, "--out-dtype", "bf16"});
    ExpectNpyEquals(Out("cb.npy"), ExpectedGemm(a, b, qa, qb, OutOptions(DType::kBF16, &bias)));
  }
  // B in e5m2 too, and A in e4m3: every pairing of formats mixes.
  ExpectOk({"gemm", a_in, b_in, "--out", Out("c2.npy"), "--format-b", "e5m2"});
  ExpectNpyEquals(Out("c2.npy"),
                  ExpectedGemm(a, b, Options(ElementFormat::kE4M3), Options(ElementFormat::kE5M2),
                               OutOptions(DType::kF32)));
}

// Independent of the library: the CLI's product is within e4m3's precision of the float64
// product of the unquantized inputs (relative Frobenius error; e4m3 has 3 mantissa bits, so
// each element is off by up to 2^-4 relative and a dot product by a few percent).
TEST_F(CliGemmTest, GemmIsCloseToFloat64Product) {
  constexpr int64_t kM = 64, kN = 48, kK = 200;  // K = 6 blocks and 8 elements
  const Tensor a = NormalF32({kM, kK}, 6);
  const Tensor b = NormalF32({kN, kK}, 7);
  Tensor bias = NormalF32({kN}, 8);
  // Large enough (against |C| ~ sqrt(K)) that a dropped bias would fail the bound.
  for (int64_t j = 0; j < kN; ++j) bias.data<float>()[j] *= 16.0f;
  ExpectOk({"gemm", WriteInput("a.npy", a), WriteInput("b.npy", b), "--out", Out("c.npy"), "--bias",
            WriteInput("bias.npy", bias)});
  const std::vector<float> c = ReadF32Values(Out("c.npy"));
  ASSERT_EQ(c.size(), static_cast<size_t>(kM * kN));
  double err2 = 0, norm2 = 0;
  for (int64_t i = 0; i < kM; ++i) {
    for (int64_t j = 0; j < kN; ++j) {
      double exact = bias.data<float>()[j];
      for (int64_t k = 0; k < kK; ++k) {
        exact += static_cast<double>(a.data<float>()[i * kK + k]) * b.data<float>()[j * kK + k];
      }
      const double diff = c[static_cast<size_t>(i * kN + j)] - exact;
      err2 += diff * diff;
      norm2 += exact * exact;
    }
  }
  const double rel = std::sqrt(err2 / norm2);
  EXPECT_LT(rel, 0.1);
  EXPECT_GT(rel, 0.0);  // quantization must have happened
}

TEST_F(CliGemmTest, GroupedGemmMatchesPerGroupGemmCountsAndCumsum) {
  const Tensor x = EdgeF32({50, 70}, 9);
  const Tensor w = NormalF32({4, 24, 70}, 10);
  const Tensor bias = NormalF32({4, 24}, 11);
  const std::string x_in = WriteInput("x.npy", x);
  const std::string w_in = WriteInput("w.npy", w);
  const std::string bias_in = WriteInput("bias.npy", bias);
  const std::vector<int64_t> counts = {13, 0, 30, 7};  // expert 1 gets no tokens
  const QuantizeOptions e4m3 = Options(ElementFormat::kE4M3);
  const Tensor expected = ExpectedGroupedGemm(x, w, counts, e4m3, e4m3, DType::kF32);
  ExpectOk({"grouped-gemm", x_in, w_in, "--group-list", "13,13,43,50", "--out", Out("y1.npy")});
  ExpectNpyEquals(Out("y1.npy"), expected);
  ExpectOk({"grouped-gemm", x_in, w_in, "--group-list=13,0,30,7", "--group-list-type", "counts",
            "--out", Out("y2.npy")});
  ExpectNpyEquals(Out("y2.npy"), expected);

  // Formats, bias and a bf16 output, with an empty first and last group; normal X, so that
  // the bias is not lost against huge products.
  const Tensor xn = NormalF32({50, 70}, 39);
  const std::string xn_in = WriteInput("xn.npy", xn);
  const std::vector<int64_t> counts2 = {0, 20, 30, 0};
  const QuantizeOptions qx = Options(ElementFormat::kE5M2, ScaleRule::kFloor);
  const QuantizeOptions qw = Options(ElementFormat::kE4M3, ScaleRule::kFloor);
  ExpectOk({"grouped-gemm", xn_in, w_in, "--group-list", "0,20,50,50", "--format-x", "e5m2",
            "--scale", "floor", "--bias", bias_in, "--out-dtype", "bf16", "--out", Out("y3.npy")});
  ExpectNpyEquals(Out("y3.npy"), ExpectedGroupedGemm(xn, w, counts2, qx, qw, DType::kBF16, &bias));
  ExpectOk({"grouped-gemm", xn_in, w_in, "--group-list", "0,20,30,0", "--group-list-type", "counts",
            "--format-x", "e5m2", "--scale", "floor", "--bias", bias_in, "--out", Out("y4.npy"),
            "--threads", "1"});
  ExpectNpyEquals(Out("y4.npy"), ExpectedGroupedGemm(xn, w, counts2, qx, qw, DType::kF32, &bias));
}

TEST_F(CliGemmTest, GroupedGemmOnEveryPathWithBf16InputsAndOneExpert) {
  const Tensor x = MakeBf16({40, 33}, EdgeMix(40 * 33, 12));
  const Tensor w = MakeBf16({3, 17, 33}, EdgeMix(3 * 17 * 33, 13));
  const std::string x_in = WriteInput("x.npy", x);
  const std::string w_in = WriteInput("w.npy", w);
  const QuantizeOptions qx = Options(ElementFormat::kE4M3);
  const QuantizeOptions qw = Options(ElementFormat::kE5M2);
  for (const std::string& path : AvailableGemmPaths()) {
    SCOPED_TRACE(path);
    const ScopedGemmPath forced(path);
    const std::string summary =
        ExpectOk({"grouped-gemm", x_in, w_in, "--group-list", "5,35,40", "--format-w", "e5m2",
                  "--path", path, "--out", Out("y.npy")});
    EXPECT_NE(summary.find("gemm path " + path + ")"), std::string::npos) << summary;
    ExpectNpyEquals(Out("y.npy"), ExpectedGroupedGemm(x, w, {5, 30, 5}, qx, qw, DType::kF32));
  }
  // One expert is a plain gemm.
  const Tensor w1 = NormalF32({1, 17, 33}, 14);
  ExpectOk({"grouped-gemm", x_in, WriteInput("w1.npy", w1), "--group-list", "40", "--out",
            Out("y1.npy")});
  ExpectNpyEquals(Out("y1.npy"),
                  ExpectedGemm(x, w1.Reshape({17, 33}), qx, qx, OutOptions(DType::kF32)));
}

TEST_F(CliGemmTest, HelpListsBothCommands) {
  RunResult r = Run({"--help"});
  EXPECT_EQ(r.code, 0);
  for (const char* word :
       {"usage: mxtrain gemm", "usage: mxtrain grouped-gemm", "--format-a", "--format-b",
        "--format-x", "--format-w", "--bias", "--out-dtype", "--path", "--group-list-type"}) {
    EXPECT_NE(r.out.find(word), std::string::npos) << word;
  }
  for (const char* command : {"gemm", "grouped-gemm"}) {
    r = Run({"help", command});
    EXPECT_EQ(r.code, 0);
    EXPECT_EQ(r.out.rfind(std::string("usage: mxtrain ") + command + " ", 0), 0u) << r.out;
    EXPECT_NE(r.out.find(AvailableGemmPaths().front()), std::string::npos) << r.out;
  }
}

// Each input position of each command: missing, truncated, not .npy, Fortran order,
// unsupported dtypes, uint8 data.
TEST_F(CliGemmTest, RejectsBadInputFiles) {
  const std::string f32_24 = TensorBytes(NormalF32({4, 6}, 15));
  WriteBytes(In("trunc.npy"), EncodeNpy("<f4", {4, 64}, std::string(100, '\0')));
  WriteBytes(In("text.npy"), "x,y\n1,2\n");
  WriteBytes(In("fortran.npy"), EncodeNpy("<f4", {4, 6}, f32_24, true));
  WriteBytes(In("f8.npy"), EncodeNpy("<f8", {4, 3}, f32_24));
  WriteBytes(In("be.npy"), EncodeNpy(">f4", {4, 6}, f32_24));
  WriteBytes(In("i4.npy"), EncodeNpy("<i4", {4, 6}, f32_24));
  WriteBytes(In("u8.npy"), EncodeNpy("|u1", {4, 24}, f32_24));
  const std::string a = WriteInput("a.npy", NormalF32({4, 24}, 16));
  const std::string w = WriteInput("w.npy", NormalF32({2, 4, 24}, 17));
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"missing.npy", "No such file or directory"},
      {"trunc.npy", "is truncated"},
      {"text.npy", "not an .npy file"},
      {"fortran.npy", "Fortran order"},
      {"f8.npy", "unsupported dtype '<f8'"},
      {"be.npy", "unsupported dtype '>f4'"},
      {"i4.npy", "unsupported dtype '<i4'"},
      {"u8.npy", "holds uint8 data"},
  };
  for (const auto& [file, expect] : cases) {
    const std::string bad = In(file);
    ExpectBadInput({"gemm", bad, a, "--out", Out("c.npy")}, expect);
    ExpectBadInput({"gemm", a, bad, "--out", Out("c.npy")}, expect);
    ExpectBadInput({"grouped-gemm", bad, w, "--group-list", "2,4", "--out", Out("y.npy")}, expect);
    ExpectBadInput({"grouped-gemm", a, bad, "--group-list", "2,4", "--out", Out("y.npy")}, expect);
    if (file != "u8.npy") {  // a uint8 bias is reported as such below
      ExpectBadInput({"gemm", a, a, "--bias", bad, "--out", Out("c.npy")}, expect);
    }
  }
  ExpectBadInput({"gemm", a, a, "--bias", In("u8.npy"), "--out", Out("c.npy")},
                 "holds u8 data; --bias needs float32");
  ExpectBadInput({"gemm", In(""), a, "--out", Out("c.npy")}, "Is a directory");
}

TEST_F(CliGemmTest, RejectsBadShapes) {
  const std::string a = WriteInput("a.npy", NormalF32({6, 40}, 18));       // [M, K]
  const std::string b = WriteInput("b.npy", NormalF32({5, 40}, 19));       // [N, K]
  const std::string b_k = WriteInput("b_k.npy", NormalF32({5, 41}, 20));   // K = 41
  const std::string v = WriteInput("v.npy", NormalF32({40}, 21));          // 1-D
  const std::string t3 = WriteInput("t3.npy", NormalF32({2, 6, 40}, 22));  // 3-D
  const std::string w = WriteInput("w.npy", NormalF32({2, 5, 40}, 23));    // [E, N, K]
  const std::string w_k = WriteInput("w_k.npy", NormalF32({2, 5, 64}, 24));
  const std::string w4 = WriteInput("w4.npy", NormalF32({1, 2, 5, 40}, 25));
  WriteBytes(In("r0.npy"), EncodeNpy("<f4", {}, std::string(4, '\0')));
  const std::string r0 = In("r0.npy");
  const std::string bias5 = WriteInput("bias5.npy", NormalF32({5}, 26));
  const std::string bias6 = WriteInput("bias6.npy", NormalF32({6}, 27));
  const std::string bias1x5 = WriteInput("bias1x5.npy", NormalF32({1, 5}, 28));
  const std::string bias2x5 = WriteInput("bias2x5.npy", NormalF32({2, 5}, 29));
  const std::string bias3x5 = WriteInput("bias3x5.npy", NormalF32({3, 5}, 30));
  const std::string bias_bf16 = WriteInput("bias_bf16.npy", MakeBf16({5}, std::vector<float>(5)));
  const std::string c = Out("c.npy");
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"gemm", v, b, "--out", c}, "'" + v + "' has shape [40]; gemm needs a 2-D [M, K] array"},
      {{"gemm", a, v, "--out", c}, "has shape [40]; gemm needs a 2-D [N, K] array"},
      {{"gemm", t3, b, "--out", c}, "has shape [2, 6, 40]; gemm needs a 2-D [M, K]"},
      {{"gemm", a, w, "--out", c}, "has shape [2, 5, 40]; gemm needs a 2-D [N, K]"},
      {{"gemm", r0, b, "--out", c}, "has shape []; gemm needs a 2-D"},
      {{"gemm", a, b_k, "--out", c}, "contraction lengths differ"},
      {{"gemm", a, b_k, "--out", c}, "has K = 41"},
      {{"gemm", a, b, "--bias", bias6, "--out", c},
       "has shape [6]; --bias needs float32 [N] = [5]"},
      {{"gemm", a, b, "--bias", bias1x5, "--out", c}, "has shape [1, 5]; --bias needs"},
      {{"gemm", a, b, "--bias", bias_bf16, "--out", c}, "holds bf16 data; --bias needs float32"},
      {{"grouped-gemm", t3, w, "--group-list", "6", "--out", c},
       "grouped-gemm needs a 2-D [M, K] array"},
      {{"grouped-gemm", a, b, "--group-list", "6", "--out", c},
       "has shape [5, 40]; grouped-gemm needs a 3-D [E, N, K] array"},
      {{"grouped-gemm", a, w4, "--group-list", "6", "--out", c}, "needs a 3-D [E, N, K]"},
      {{"grouped-gemm", a, v, "--group-list", "6", "--out", c}, "needs a 3-D [E, N, K]"},
      {{"grouped-gemm", a, w_k, "--group-list", "3,6", "--out", c}, "has K = 64"},
      {{"grouped-gemm", a, w, "--group-list", "3,6", "--bias", bias5, "--out", c},
       "has shape [5]; --bias needs float32 [E, N] = [2, 5]"},
      {{"grouped-gemm", a, w, "--group-list", "3,6", "--bias", bias3x5, "--out", c},
       "has shape [3, 5]"},
      {{"grouped-gemm", a, w, "--group-list", "3,6", "--bias", bias1x5, "--out", c},
       "has shape [1, 5]"},
  };
  for (const auto& [args, expect] : cases) ExpectBadInput(args, expect);
  // The right shapes pass (so the cases above fail for the reason given).
  ExpectOk({"gemm", a, b, "--bias", bias5, "--out", c});
  ExpectOk({"grouped-gemm", a, w, "--group-list", "3,6", "--bias", bias2x5, "--out", c});
}

TEST_F(CliGemmTest, RejectsBadGroupLists) {
  const std::string x = WriteInput("x.npy", NormalF32({100, 8}, 31));
  const std::string w = WriteInput("w.npy", NormalF32({3, 4, 8}, 32));
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"--group-list", "50,40,100"}, "not non-decreasing"},
      {{"--group-list", "10,50,60"}, "ends at 60, not at M = 100"},
      {{"--group-list", "10,50,120"}, "ends at 120"},
      {{"--group-list", "50,-10,60", "--group-list-type", "counts"}, "negative count"},
      {{"--group-list", "50,40,0", "--group-list-type", "counts"}, "sum to 90"},
      {{"--group-list", "60,60,0", "--group-list-type", "counts"}, "more than M = 100"},
      {{"--group-list", "50,100"}, "--group-list has 2 groups but '" + w + "' holds E = 3"},
      {{"--group-list", "10,20,30,40", "--group-list-type", "counts"}, "has 4 groups"},
      {{"--group-list", "1,x,100"}, "entry 'x' is not an integer"},
      {{"--group-list", "1,,100"}, "empty entry"},
      {{"--group-list", ""}, "empty value"},
      {{"--group-list", "100", "--group-list-type", "sizes"}, "unknown group list type"},
      {{}, "needs --group-list"},
  };
  for (const auto& [flags, expect] : cases) {
    std::vector<std::string> args = {"grouped-gemm", x, w, "--out", Out("y.npy")};
    args.insert(args.end(), flags.begin(), flags.end());
    ExpectBadInput(args, expect);
  }
}

TEST_F(CliGemmTest, RejectsBadFlags) {
  const std::string a = WriteInput("a.npy", NormalF32({8, 32}, 33));
  const std::string w = WriteInput("w.npy", NormalF32({1, 4, 32}, 34));
  const std::string c = Out("c.npy");
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"gemm", a, a, "--out", c, "--bogus", "1"}, "unknown flag '--bogus' for 'mxtrain gemm'"},
      {{"gemm", a, a, "--out", c, "--format", "e5m2"}, "unknown flag '--format'"},
      {{"gemm", a, a, "--out", c, "--format-x", "e5m2"}, "unknown flag '--format-x'"},
      {{"gemm", a, a, "--out", c, "--group-list", "8"}, "unknown flag '--group-list'"},
      {{"gemm", a, a, "--out", c, "--out", c}, "flag '--out' given twice"},
      {{"gemm", a, a, "--format-a", "e4m3", "--format-a=e5m2", "--out", c},
       "flag '--format-a' given twice"},
      {{"gemm", a, a, "--out"}, "flag '--out' of 'mxtrain gemm' needs a value"},
      {{"gemm", a, a, "--out", "--bias", a}, "needs a value"},
      {{"gemm", a, a}, "'mxtrain gemm' needs --out"},
      {{"gemm", a, "--out", c}, "needs two input files A.npy B.npy"},
      {{"gemm", a, a, a, "--out", c}, "unexpected argument"},
      {{"gemm", a, a, "--out", c, "--format-a", "e3m4"}, "unknown element format 'e3m4'"},
      {{"gemm", a, a, "--out", c, "--format-b", "fp8"}, "unknown element format 'fp8'"},
      {{"gemm", a, a, "--out", c, "--scale", "up"}, "unknown scale rule 'up'"},
      {{"gemm", a, a, "--out", c, "--out-dtype", "f16"}, "--out-dtype value 'f16'"},
      {{"gemm", a, a, "--out", c, "--threads", "-1"}, "--threads value -1 is out of range"},
      {{"gemm", a, a, "--out", c, "--threads", "two"}, "not an integer"},
      {{"gemm", a, a, "--out", c, "--path", "cuda"},
       "--path value 'cuda' is not a GEMM path of this machine (" + AvailableGemmPaths()[0]},
      // The tests' model of AMX (testing.h) is no user's path, on any machine.
      {{"gemm", a, a, "--out", c, "--path", "amx-bf16-emulated"},
       "--path value 'amx-bf16-emulated' is not a GEMM path of this machine"},
      {{"gemm", a, a, "--out", c, "--bias="}, "has an empty value"},
      {{"grouped-gemm", a, w, "--group-list", "8", "--out", c, "--format-a", "e5m2"},
       "unknown flag '--format-a' for 'mxtrain grouped-gemm'"},
      {{"grouped-gemm", a, w, "--group-list", "8", "--group-list", "8", "--out", c},
       "flag '--group-list' given twice"},
      {{"grouped-gemm", a, w, "--group-list", "8", "--out", c, "--format-w", "e2m1"},
       "unknown element format 'e2m1'"},
      {{"grouped-gemm", a, "--group-list", "8", "--out", c}, "needs two input files X.npy W.npy"},
      {{"grouped-gemm", a, w, "--group-list", "8"}, "needs --out"},
      {{"grouped-gemm", a, w, "--group-list", "8", "--out", c, "--path", ""}, "empty value"},
      {{"grouped-gemm", a, w, "--group-list", "8", "--out", c, "--out-dtype", "u8"},
       "--out-dtype value 'u8'"},
      {{"gemmm", a, a, "--out", c}, "unknown command 'gemmm'"},
  };
  for (const auto& [args, expect] : cases) ExpectBadInput(args, expect);
}

TEST_F(CliGemmTest, UnwritableOutputLeavesNothingAndKeepsExistingFiles) {
  const std::string a = WriteInput("a.npy", NormalF32({8, 32}, 35));
  const std::string w = WriteInput("w.npy", NormalF32({2, 4, 32}, 36));
  const std::string b_k = WriteInput("b_k.npy", NormalF32({8, 40}, 37));
  ExpectBadInput({"gemm", a, a, "--out", Out("missing/c.npy")},
                 "cannot write '" + Out("missing/c.npy") + "': No such file or directory");
  ExpectBadInput({"grouped-gemm", a, w, "--group-list", "3,8", "--out", Out("missing/y.npy")},
                 "cannot write '" + Out("missing/y.npy") + "': No such file or directory");
  // A directory in the way of the output.
  fs::create_directory(Out("dir.npy"));
  ExpectBadInput({"gemm", a, a, "--out", Out("dir.npy")}, "Is a directory", {"dir.npy"});
  ExpectBadInput({"grouped-gemm", a, w, "--group-list", "3,8", "--out", Out("dir.npy")},
                 "Is a directory", {"dir.npy"});
  // An earlier result stays whole when a later run fails.
  WriteBytes(Out("c.npy"), "old");
  ExpectBadInput({"gemm", a, b_k, "--out", Out("c.npy")}, "contraction lengths differ",
                 {"c.npy", "dir.npy"});
  ExpectBadInput({"grouped-gemm", a, w, "--group-list", "3,7", "--out", Out("c.npy")}, "ends at 7",
                 {"c.npy", "dir.npy"});
  EXPECT_EQ(ReadBytes(Out("c.npy")), "old");
}

TEST_F(CliGemmTest, CorruptedHeadersNeverCrash) {
  const Tensor a = NormalF32({8, 40}, 38);
  const std::string good = EncodeNpy("<f4", {8, 40}, TensorBytes(a));
  const std::string a_in = WriteInput("a.npy", a);
  std::mt19937_64 rng(38);
  for (int i = 0; i < 20; ++i) {
    std::string bad = good;
    for (int j = 0; j < 3; ++j) bad[rng() % 80] = static_cast<char>(rng());  // magic + header
    WriteBytes(In("c.npy"), bad);
    const RunResult r = i % 2 == 0 ? Run({"gemm", a_in, In("c.npy"), "--out", Out("c.npy")})
                                   : Run({"grouped-gemm", In("c.npy"), In("c.npy"), "--group-list",
                                          "8", "--out", Out("c.npy")});
    SCOPED_TRACE("mutation " + std::to_string(i) + ": " + r.err);
    ASSERT_TRUE(r.code == 0 || r.code == 2);
    if (r.code == 2) {
      EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1);
      EXPECT_TRUE(OutListing().empty());
    }
    fs::remove_all(base_ + "/out");
    fs::create_directory(base_ + "/out");
  }
}

}  // namespace
}  // namespace mxtrain
