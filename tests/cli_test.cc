// The mxtrain binary end to end. Inputs are written, and outputs parsed, by a minimal .npy
// codec of this file (not the library's), so the CLI is checked against an independent
// encoding; the expected bytes come from the scalar reference quantizers in-process.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "cli_test_util.h"
#include "mxtrain/quantize.h"
#include "mxtrain/simd.h"
#include "test_util.h"

namespace mxtrain {
namespace {

namespace fs = std::filesystem;
using testing_util::EdgeMix;
using testing_util::MakeBf16;
using testing_util::MakeF32;

using testing_util::DecodeNpy;
using testing_util::EncodeNpy;
using testing_util::ExpectMxFiles;
using testing_util::ExpectNpyEquals;
using testing_util::RawNpy;
using testing_util::ReadBytes;
using testing_util::RunResult;
using testing_util::TensorBytes;
using testing_util::WriteBytes;

class CliTest : public testing_util::CliFixture {
 protected:
  // Success with a name kept for one release: code 0, one summary line, and one line
  // "mxtrain: deprecated: ..." on stderr containing `expect`; returns stdout.
  std::string ExpectOkDeprecated(const std::vector<std::string>& args,
                                 const std::string& expect) const {
    const RunResult r = Run(args);
    EXPECT_EQ(r.code, 0) << r.err;
    EXPECT_EQ(r.err.rfind("mxtrain: deprecated: ", 0), 0u) << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
    EXPECT_NE(r.err.find(expect), std::string::npos) << r.err;
    EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 1) << r.out;
    return r.out;
  }
};

Tensor EdgeF32(Shape shape, uint64_t seed) {
  return MakeF32(shape, EdgeMix(shape.NumElements(), seed));
}

QuantizeOptions Options(ElementFormat format, ScaleRule rule) {
  QuantizeOptions o;
  o.format = format;
  o.rule = rule;
  return o;
}

TEST_F(CliTest, RowwiseDefaultsMatchReferenceAndHeaderText) {
  const Tensor x = EdgeF32({5, 70}, 1);
  const std::string in = WriteInput("x.npy", x);
  ExpectOk({"quantize", in, "--out", Out("q")});
  ExpectMxFiles(Out("q"), ref::QuantizeRowwise(x, {}));
  EXPECT_EQ(OutListing(), (std::vector<std::string>{"q.data.npy", "q.scale.npy"}));
  const RawNpy scale = DecodeNpy(Out("q.scale.npy"));
  EXPECT_EQ(scale.header.substr(0, 59),
            "{'descr': '|u1', 'fortran_order': False, 'shape': (5, 3), }");
  EXPECT_EQ((10 + scale.header.size()) % 64, 0u);
  EXPECT_EQ(scale.header.back(), '\n');
}

TEST_F(CliTest, EveryFormatRuleAndAxisMatchesReference) {
  const Tensor x = EdgeF32({40, 45}, 2);
  const std::string in = WriteInput("x.npy", x);
  for (const char* format : {"e4m3", "e5m2"}) {
    for (const char* rule : {"rceil", "floor", "ceil", "even"}) {
      SCOPED_TRACE(std::string(format) + " " + rule);
      const QuantizeOptions o = Options(ParseElementFormat(format), ParseScaleRule(rule));
      ExpectOk(
          {"quantize", in, "--out", Out("r"), "--format", format, "--scale=" + std::string(rule)});
      ExpectMxFiles(Out("r"), ref::QuantizeRowwise(x, o));
      ExpectOk({"quantize", "--axis=-2", in, "--format=" + std::string(format), "--scale", rule,
                "--out", Out("c"), "--threads", "2"});
      ExpectMxFiles(Out("c"), ref::QuantizeColumnwise(x, o));
    }
  }
}

TEST_F(CliTest, AxisBothWritesRowwiseAndColumnwiseFilesEqualToSingleAxisResults) {
  const Tensor x = EdgeF32({33, 65}, 3);
  const std::string in = WriteInput("x.npy", x);
  ExpectOkDeprecated({"quantize", in, "--out", Out("d"), "--axis", "both", "--format", "e5m2"},
                     "d.colwise.{data,scale}.npy");
  const QuantizeOptions o = Options(ElementFormat::kE5M2, ScaleRule::kRceil);
  ExpectMxFiles(Out("d.rowwise"), ref::QuantizeRowwise(x, o));
  ExpectMxFiles(Out("d.columnwise"), ref::QuantizeColumnwise(x, o));
  // The names of mxtrain 0.1, kept for one release: the same bytes.
  ExpectMxFiles(Out("d.colwise"), ref::QuantizeColumnwise(x, o));
  EXPECT_EQ(OutListing().size(), 6u);
}

TEST_F(CliTest, ThreeDimensionalAndBf16Inputs) {
  const Tensor x3 = EdgeF32({3, 40, 33}, 4);
  const std::string in3 = WriteInput("x3.npy", x3);
  ExpectOk({"quantize", in3, "--out", Out("r3")});
  ExpectMxFiles(Out("r3"), ref::QuantizeRowwise(x3, {}));
  ExpectOk({"quantize", in3, "--out", Out("c3"), "--axis", "-2", "--scale", "floor"});
  ExpectMxFiles(Out("c3"),
                ref::QuantizeColumnwise(x3, Options(ElementFormat::kE4M3, ScaleRule::kFloor)));

  const Tensor xb = MakeBf16({37, 64}, EdgeMix(37 * 64, 5));
  const std::string inb = WriteInput("xb.npy", xb);
  ExpectOkDeprecated({"quantize", inb, "--out", Out("b"), "--axis", "both"}, "b.colwise");
  ExpectMxFiles(Out("b.rowwise"), ref::QuantizeRowwise(xb, {}));
  ExpectMxFiles(Out("b.columnwise"), ref::QuantizeColumnwise(xb, {}));
}

TEST_F(CliTest, GroupedCumsumAndCountsWithEmptyAndPartialGroups) {
  const Tensor x = EdgeF32({100, 40}, 6);
  const std::string in = WriteInput("x.npy", x);
  const std::vector<int64_t> counts = {0, 33, 0, 57, 10};
  const MxTensor expected =
      ref::QuantizeGrouped(x, GroupList::Make(counts, GroupListType::kCounts, 100), {});
  EXPECT_EQ(expected.scales().shape(), Shape({5, 40}));
  ExpectOk({"quantize", in, "--out", Out("g1"), "--group-list", "0,33,33,90,100"});
  ExpectMxFiles(Out("g1"), expected);
  ExpectOk({"quantize", in, "--out", Out("g2"), "--group-list=0,33,0,57,10", "--axis", "-2",
            "--group-list-type", "counts"});
  ExpectMxFiles(Out("g2"), expected);
  // Dequantize with the same groups reads back what the library reads back.
  ExpectOk({"dequantize", Out("g2"), "--out", Out("y.npy"), "--group-list", "0,33,0,57,10",
            "--group-list-type", "counts"});
  ExpectNpyEquals(Out("y.npy"), Dequantize(expected, DType::kF32));
}

TEST_F(CliTest, DequantizeMatchesLibrary) {
  const Tensor x = EdgeF32({2, 35, 70}, 7);
  const std::string in = WriteInput("x.npy", x);
  ExpectOk({"quantize", in, "--out", Out("q")});
  const MxTensor row = ref::QuantizeRowwise(x, {});
  ExpectOk({"dequantize", Out("q"), "--out", Out("y.npy")});
  ExpectNpyEquals(Out("y.npy"), Dequantize(row, DType::kF32));
  ExpectOk({"dequantize", Out("q"), "--out", Out("yb.npy"), "--dtype", "bf16"});
  ExpectNpyEquals(Out("yb.npy"), Dequantize(row, DType::kBF16));

  const QuantizeOptions o = Options(ElementFormat::kE5M2, ScaleRule::kFloor);
  ExpectOk(
      {"quantize", in, "--out", Out("c"), "--axis", "-2", "--format", "e5m2", "--scale", "floor"});
  ExpectOk({"dequantize", Out("c"), "--out", Out("yc.npy"), "--axis", "-2", "--format", "e5m2"});
  ExpectNpyEquals(Out("yc.npy"), Dequantize(ref::QuantizeColumnwise(x, o), DType::kF32));
}

// "columnwise" is the one name of 32x1 blocks; the bench's 0.1 name "colwise" still selects
// the case, with a note.
TEST_F(CliTest, BenchQuantizeCaseColumnwiseAndItsDeprecatedName) {
  const std::vector<std::string> bench = {"bench",   "quantize", "--reps",    "1",
                                          "--shape", "40x96",    "--threads", "1",
                                          "--dtype", "f32",      "--case"};
  std::vector<std::string> args = bench;
  args.push_back("columnwise");
  RunResult r = Run(args);
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.err, "");
  EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 1) << r.out;
  EXPECT_EQ(r.out.rfind("{\"case\": \"columnwise\"", 0), 0u) << r.out;
  args.back() = "colwise";
  const std::string out = ExpectOkDeprecated(args, "--case columnwise");
  EXPECT_EQ(out.rfind("{\"case\": \"columnwise\"", 0), 0u) << out;
  r = Run({"bench", "--list"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("quantize cases: rowwise columnwise dual grouped\n"), std::string::npos)
      << r.out;
}

TEST_F(CliTest, HelpVersionAndDemo) {
  RunResult r = Run({"--help"});
  EXPECT_EQ(r.code, 0);
  for (const char* word :
       {"quantize", "dequantize", "bench", "demo", "--out", "--format", "--scale", "--axis",
        "--group-list", "--group-list-type", "--threads", "--dtype", "--seed", "--version"}) {
    EXPECT_NE(r.out.find(word), std::string::npos) << word;
  }
  EXPECT_EQ(Run({"help", "quantize"}).code, 0);
  r = Run({"dequantize", "--help"});
  EXPECT_EQ(r.code, 0);
  EXPECT_NE(r.out.find("usage: mxtrain dequantize"), std::string::npos);
  r = Run({"--version"});
  EXPECT_EQ(r.code, 0);
  EXPECT_EQ(r.out.rfind("mxtrain ", 0), 0u);
  r = Run({"demo", "--seed", "3"});
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find(CurrentSimdTarget()), std::string::npos);
  EXPECT_NE(r.out.find("e5m2   floor  columnwise"), std::string::npos) << r.out;
  EXPECT_EQ(Run({"demo", "--seed", "3"}).out, r.out);  // seeded: the same table again
}

// The caps that imitate a smaller CPU (simd.h, gemm.h) take effect in a process that sets
// them, whatever the machine; a name that is no target or path is one line and exit 2.
TEST_F(CliTest, CpuCapsFromTheEnvironment) {
  RunResult r = RunWithEnv("MXTRAIN_MAX_SIMD_TARGET=avx2 MXTRAIN_MAX_GEMM_PATH=simd-f32",
                           {"bench", "--list"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("\ngemm paths: simd-f32 portable\n"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("\ngemm path: simd-f32 (peak: fma-f32-"), std::string::npos) << r.out;
  // The best target left is AVX2 or a smaller one, never an AVX-512 target.
  const size_t targets = r.out.find("simd targets: ");
  ASSERT_NE(targets, std::string::npos) << r.out;
  const std::string first =
      r.out.substr(targets + 14, r.out.find_first_of(" \n", targets + 14) - targets - 14);
  EXPECT_TRUE(first == "AVX2" || first == "SSE4" || first == "SSSE3" || first == "SCALAR") << first;
  EXPECT_EQ(r.out.find("AVX3"), std::string::npos) << r.out;
  // Only the GEMM cap: the SIMD targets stay, AMX and VDPBF16PS go.
  r = RunWithEnv("MXTRAIN_MAX_GEMM_PATH=simd-f32", {"bench", "--list"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("\ngemm paths: simd-f32 portable\n"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find(CurrentSimdTarget()), std::string::npos) << r.out;

  for (const auto& [env, expect] : std::vector<std::pair<std::string, std::string>>{
           {"MXTRAIN_MAX_SIMD_TARGET=NEON9",
            "MXTRAIN_MAX_SIMD_TARGET='NEON9' names no SIMD target"},
           {"MXTRAIN_MAX_GEMM_PATH=cuda", "MXTRAIN_MAX_GEMM_PATH='cuda' names no GEMM path"}}) {
    r = RunWithEnv(env, {"bench", "--list"});
    EXPECT_EQ(r.code, 2) << env;
    EXPECT_EQ(r.err.rfind("mxtrain: error: ", 0), 0u) << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
    EXPECT_NE(r.err.find(expect), std::string::npos) << r.err;
  }
}

TEST_F(CliTest, RejectsBadInputFiles) {
  const std::string f32_24 = TensorBytes(EdgeF32({4, 6}, 8));
  WriteBytes(In("trunc.npy"), EncodeNpy("<f4", {4, 64}, std::string(100, '\0')));
  WriteBytes(In("text.npy"), "x,y\n1,2\n");
  WriteBytes(In("fortran.npy"), EncodeNpy("<f4", {4, 6}, f32_24, true));
  WriteBytes(In("f8.npy"), EncodeNpy("<f8", {4, 3}, f32_24));
  WriteBytes(In("be.npy"), EncodeNpy(">f4", {4, 6}, f32_24));
  WriteBytes(In("i4.npy"), EncodeNpy("<i4", {4, 6}, f32_24));
  WriteBytes(In("u8.npy"), EncodeNpy("|u1", {4, 24}, f32_24));
  WriteBytes(In("rank1.npy"), EncodeNpy("<f4", {24}, f32_24));
  WriteBytes(In("rank0.npy"), EncodeNpy("<f4", {}, f32_24.substr(0, 4)));
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"missing.npy", "No such file or directory"},
      {"trunc.npy", "is truncated"},
      {"text.npy", "not an .npy file"},
      {"fortran.npy", "Fortran order"},
      {"f8.npy", "unsupported dtype '<f8'"},
      {"be.npy", "unsupported dtype '>f4'"},
      {"i4.npy", "unsupported dtype '<i4'"},
      {"u8.npy", "holds uint8 data"},
      {"rank1.npy", "rank >= 2"},
      {"rank0.npy", "rank >= 2"},
  };
  for (const auto& [file, expect] : cases)
    ExpectBadInput({"quantize", In(file), "--out", Out("q")}, expect);
  ExpectBadInput({"quantize", In(""), "--out", Out("q")}, "Is a directory");
}

TEST_F(CliTest, RejectsBadGroupLists) {
  const std::string in = WriteInput("x.npy", EdgeF32({100, 8}, 9));
  const std::string in3 = WriteInput("x3.npy", EdgeF32({2, 50, 8}, 9));
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"--group-list", "0,50,40,100"}, "not non-decreasing"},
      {{"--group-list", "10,50"}, "ends at 50, not at M = 100"},
      {{"--group-list", "10,50,120"}, "ends at 120"},
      {{"--group-list", "50,-10,60", "--group-list-type", "counts"}, "negative count"},
      {{"--group-list", "50,40", "--group-list-type", "counts"}, "sum to 90"},
      {{"--group-list", "60,60", "--group-list-type", "counts"}, "more than M = 100"},
      {{"--group-list", "1,x,100"}, "entry 'x' is not an integer"},
      {{"--group-list", "1,,100"}, "empty entry"},
      {{"--group-list", "99999999999999999999"}, "not an integer"},
      {{"--group-list", ""}, "empty value"},
      {{"--group-list", "100", "--group-list-type", "sizes"}, "unknown group list type"},
  };
  for (const auto& [flags, expect] : cases) {
    std::vector<std::string> args = {"quantize", in, "--out", Out("q")};
    args.insert(args.end(), flags.begin(), flags.end());
    ExpectBadInput(args, expect);
  }
  ExpectBadInput({"quantize", in3, "--out", Out("q"), "--group-list", "50,100"}, "2-D");
}

TEST_F(CliTest, RejectsBadFlags) {
  const std::string in = WriteInput("x.npy", EdgeF32({64, 8}, 10));
  const std::string q = Out("q");
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"quantize", in, "--out", q, "--bogus", "1"},
       "unknown flag '--bogus' for 'mxtrain quantize'"},
      {{"quantize", in, "--out", q, "--out", q}, "flag '--out' given twice"},
      {{"quantize", in, "--format", "e5m2", "--out"},
       "flag '--out' of 'mxtrain quantize' needs a value"},
      {{"quantize", in, "--out", "--format", "e5m2"}, "needs a value"},
      {{"quantize", in}, "needs --out"},
      {{"quantize", "--out", q}, "needs one input file"},
      {{"quantize", in, in, "--out", q}, "unexpected argument"},
      {{"quantize", in, "--out", q, "--format", "e3m4"}, "unknown element format 'e3m4'"},
      {{"quantize", in, "--out", q, "--scale", "up"}, "unknown scale rule 'up'"},
      {{"quantize", in, "--out", q, "--axis", "0"}, "--axis value '0'"},
      {{"quantize", in, "--out", q, "--threads", "-1"}, "--threads value -1 is out of range"},
      {{"quantize", in, "--out", q, "--threads", "two"}, "not an integer"},
      {{"quantize", in, "--out", q, "--axis", "-1", "--group-list", "64"},
       "conflicts with --axis -1"},
      {{"quantize", in, "--out", q, "--axis", "both", "--group-list", "64"},
       "conflicts with --axis both"},
      {{"quantize", in, "--out", q, "--group-list-type", "counts"},
       "--group-list-type needs --group-list"},
      {{"dequantize", q, "--out", Out("y.npy"), "--scale", "floor"}, "unknown flag '--scale'"},
      {{"dequantize", q, "--out", Out("y.npy"), "--axis", "both"}, "is not -1 or -2"},
      {{"dequantize", q, "--out", Out("y.npy"), "--dtype", "f16"}, "--dtype value 'f16'"},
      {{"demo", "--seed", "x"}, "not an integer"},
      {{"demo", "extra"}, "unexpected argument 'extra'"},
      {{"frobnicate"}, "unknown command 'frobnicate'"},
      {{}, "missing command"},
  };
  for (const auto& [args, expect] : cases) ExpectBadInput(args, expect);
}

TEST_F(CliTest, RejectsMismatchedDequantizeInputs) {
  const Tensor x = EdgeF32({40, 70}, 11);
  const MxTensor row = ref::QuantizeRowwise(x, {});
  WriteBytes(In("r.data.npy"), EncodeNpy("|u1", {40, 70}, TensorBytes(row.data())));
  WriteBytes(In("r.scale.npy"), EncodeNpy("|u1", {40, 3}, TensorBytes(row.scales())));
  WriteBytes(In("noscale.data.npy"), ReadBytes(In("r.data.npy")));
  WriteBytes(In("f.data.npy"), EncodeNpy("<f4", {40, 70}, TensorBytes(x)));
  WriteBytes(In("f.scale.npy"), ReadBytes(In("r.scale.npy")));
  WriteBytes(In("v.data.npy"), EncodeNpy("|u1", {70}, TensorBytes(row.data()).substr(0, 70)));
  WriteBytes(In("v.scale.npy"), EncodeNpy("|u1", {3}, "abc"));
  const std::string y = Out("y.npy");
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"dequantize", In("none"), "--out", y}, "none.data.npy': No such file"},
      {{"dequantize", In("noscale"), "--out", y}, "noscale.scale.npy': No such file"},
      {{"dequantize", In("r"), "--out", y, "--axis", "-2"}, "must have shape [2, 70], got [40, 3]"},
      {{"dequantize", In("r"), "--out", y, "--group-list", "10,40"}, "must have shape"},
      {{"dequantize", In("r"), "--out", y, "--group-list", "10,30"}, "ends at 30, not at M = 40"},
      {{"dequantize", In("f"), "--out", y}, "holds f32 data"},
      {{"dequantize", In("v"), "--out", y}, "rank >= 2"},
      {{"dequantize", In("r"), "--out", Out("missing/y.npy")},
       "cannot write '" + Out("missing/y.npy") + "': No such file or directory"},
  };
  for (const auto& [args, expect] : cases) ExpectBadInput(args, expect);
}

TEST_F(CliTest, UnwritableOutputLeavesNothingAndKeepsExistingFiles) {
  const std::string in = WriteInput("x.npy", EdgeF32({64, 40}, 12));
  ExpectBadInput({"quantize", in, "--out", Out("missing/q")},
                 "cannot write '" + Out("missing/q.data.npy") + "': No such file or directory");
  ExpectBadInput({"quantize", in, "--out", Out("missing/q"), "--axis", "both"},
                 "missing/q.rowwise.data.npy");
  // An earlier result stays whole when a later run fails: its scale path is a directory,
  // so the run must fail before replacing the data file.
  WriteBytes(Out("q.data.npy"), "old");
  fs::create_directory(Out("q.scale.npy"));
  const RunResult r = Run({"quantize", in, "--out", Out("q")});
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  EXPECT_EQ(ReadBytes(Out("q.data.npy")), "old");
  EXPECT_EQ(OutListing(), (std::vector<std::string>{"q.data.npy", "q.scale.npy"}));
}

TEST_F(CliTest, CorruptedHeadersNeverCrash) {
  const Tensor x = EdgeF32({8, 40}, 13);
  const std::string good = EncodeNpy("<f4", {8, 40}, TensorBytes(x));
  std::mt19937_64 rng(13);
  for (int i = 0; i < 40; ++i) {
    std::string bad = good;
    for (int j = 0; j < 3; ++j) bad[rng() % 80] = static_cast<char>(rng());  // magic + header
    WriteBytes(In("c.npy"), bad);
    const RunResult r = Run({"quantize", In("c.npy"), "--out", Out("q")});
    SCOPED_TRACE("mutation " + std::to_string(i) + ": " + r.err);
    ASSERT_TRUE(r.code == 0 || r.code == 2);
    if (r.code == 2) {
      EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1);
    }
    fs::remove_all(base_ + "/out");
    fs::create_directory(base_ + "/out");
  }
}

}  // namespace
}  // namespace mxtrain
