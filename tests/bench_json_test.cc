// `mxtrain bench quantize | gemm | ops | train` on tiny shapes (one repetition each, not timed):
// every stdout line is one JSON object with exactly the documented keys (bench.h,
// ops_bench.h), values of the right type and sane (positive times, finite ratios that
// agree with the figures they come from, a peak kind and GEMM path this machine has), and
// the last line of each smoke run holds the values fixed by its case. Run again under the
// cpu_caps label, where the same checks hold for an AVX2-only machine.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "cli_test_util.h"
#include "mxtrain/bench/bench.h"
#include "mxtrain/gemm.h"
#include "mxtrain/hp_gemm.h"
#include "mxtrain/memory.h"
#include "mxtrain/simd.h"

namespace mxtrain {
namespace {

using nlohmann::json;

class BenchJsonTest : public testing_util::CliFixture {
 protected:
  // Runs `mxtrain args...`, which must succeed quietly, and parses each line of its stdout.
  std::vector<json> RunLines(const std::vector<std::string>& args) const {
    const testing_util::RunResult r = Run(args);
    EXPECT_EQ(r.code, 0) << r.err;
    EXPECT_EQ(r.err, "");
    std::vector<json> lines;
    size_t begin = 0;
    while (begin < r.out.size()) {
      const size_t end = std::min(r.out.find('\n', begin), r.out.size());
      const std::string line = r.out.substr(begin, end - begin);
      const json j = json::parse(line, nullptr, /*allow_exceptions=*/false);
      EXPECT_TRUE(j.is_object()) << "not a JSON object: " << line;
      if (j.is_object()) lines.push_back(j);
      begin = end + 1;
    }
    EXPECT_FALSE(lines.empty()) << r.out;
    return lines;
  }
};

std::set<std::string> Keys(const json& j) {
  std::set<std::string> keys;
  for (auto it = j.begin(); it != j.end(); ++it) keys.insert(it.key());
  return keys;
}

// A number > 0 and finite (JSON has no Inf or NaN; the benchmarks write those as strings).
void ExpectPositive(const json& j, const std::string& key) {
  ASSERT_TRUE(j.at(key).is_number()) << key << ": " << j.at(key);
  const double v = j.at(key).get<double>();
  EXPECT_TRUE(std::isfinite(v) && v > 0) << key << ": " << v;
}

// A number > 0 and finite, or null.
void ExpectPositiveOrNull(const json& j, const std::string& key) {
  if (!j.at(key).is_null()) ExpectPositive(j, key);
}

// The ratio `ratio` = a / b: a finite number >= 0 (4 decimals can round a small one to 0)
// that agrees with a and b within what printing all three with 4 decimals allows.
void ExpectRatio(const json& j, const std::string& ratio, const std::string& a,
                 const std::string& b) {
  ASSERT_TRUE(j.at(ratio).is_number()) << ratio << ": " << j.at(ratio);
  const double got = j.at(ratio).get<double>();
  EXPECT_TRUE(std::isfinite(got) && got >= 0) << ratio << ": " << got;
  const double x = j.at(a).get<double>(), y = j.at(b).get<double>();
  if (x <= 0 || y <= 0) return;  // rounded to 0: nothing to compare
  const double want = x / y, half_unit = 0.5e-4;
  EXPECT_NEAR(got, want, 2 * (half_unit + want * (half_unit / x + half_unit / y)))
      << ratio << " = " << a << " / " << b;
}

bool Contains(const std::vector<std::string>& v, const std::string& s) {
  return std::find(v.begin(), v.end(), s) != v.end();
}

// The peak kind of a GEMM path (bench.h PeakKind): the bf16 units by name, else the fp32
// FMA loop on the current SIMD target.
std::string PeakKindOf(const std::string& path) {
  if (path == "amx-bf16" || path == "avx512-bf16") return path;
  return "fma-f32-" + CurrentSimdTarget();
}

TEST_F(BenchJsonTest, QuantizeLinesHaveEveryKeyAndSaneFigures) {
  const std::vector<json> lines =
      RunLines({"bench", "quantize", "--reps", "1", "--shape", "40x96"});
  const std::set<std::string> keys{"case",        "dtype",  "shape",         "threads",
                                   "ms",          "gbps",   "baseline_gbps", "ratio",
                                   "baseline_ms", "target", "code_stores"};
  std::set<std::string> cases;
  for (const json& j : lines) {
    SCOPED_TRACE(j.dump());
    std::set<std::string> have = Keys(j);
    // Measured with the other code stores too where the choice matters (columnwise codes).
    if (have.erase("other_stores_ms") == 1) ExpectPositive(j, "other_stores_ms");
    EXPECT_EQ(have, keys);
    if (have != keys) continue;
    cases.insert(j["case"].get<std::string>());
    EXPECT_TRUE(j["dtype"] == "f32" || j["dtype"] == "bf16");
    EXPECT_EQ(j["shape"], json::array({40, 96}));
    ASSERT_TRUE(j["threads"].is_number_integer());
    EXPECT_GE(j["threads"].get<int>(), 1);
    for (const char* key : {"ms", "gbps", "baseline_gbps", "baseline_ms"}) ExpectPositive(j, key);
    ExpectRatio(j, "ratio", "gbps", "baseline_gbps");
    EXPECT_EQ(j["target"], CurrentSimdTarget());
    EXPECT_TRUE(j["code_stores"] == "cached" || j["code_stores"] == "streaming");
  }
  EXPECT_EQ(cases, (std::set<std::string>{"rowwise", "columnwise", "dual", "grouped"}));
}

TEST_F(BenchJsonTest, GemmSmokeLinesHaveEveryKeyAndSaneFigures) {
  const std::vector<json> lines = RunLines({"bench", "gemm", "--reps", "1", "--case", "smoke"});
  const std::set<std::string> keys{"case",
                                   "kind",
                                   "gemm",
                                   "m",
                                   "n",
                                   "k",
                                   "groups",
                                   "ms",
                                   "gflops",
                                   "onednn_gflops",
                                   "ratio",
                                   "baseline",
                                   "amx_peak_gflops",
                                   "peak_gflops",
                                   "peak_kind",
                                   "peak_fraction",
                                   "threads",
                                   "path",
                                   "onednn_ms",
                                   "onednn_impl",
                                   "max_rel_diff",
                                   "dense_gflops",
                                   "vs_dense"};
  std::vector<std::string> names;
  for (const json& j : lines) {
    SCOPED_TRACE(j.dump());
    ASSERT_EQ(Keys(j), keys);
    names.push_back(j["case"].get<std::string>());
    const bool grouped = j["kind"] == "grouped";
    EXPECT_TRUE(grouped || j["kind"] == "dense");
    EXPECT_TRUE(j["gemm"] == "fprop" || j["gemm"] == "dgrad" || j["gemm"] == "wgrad");
    for (const char* key : {"m", "n", "k", "groups", "threads"}) {
      ASSERT_TRUE(j[key].is_number_integer()) << key;
      EXPECT_GE(j[key].get<int64_t>(), 1) << key;
    }
    for (const char* key : {"ms", "gflops", "peak_gflops"}) ExpectPositive(j, key);
    ExpectRatio(j, "peak_fraction", "gflops", "peak_gflops");
    // The path that ran is this process's (same environment, so same caps), and the peak is
    // that of its unit.
    const std::string path = j["path"].get<std::string>();
    EXPECT_EQ(path, CurrentGemmPath());
    EXPECT_EQ(j["peak_kind"], PeakKindOf(path));
    ExpectPositiveOrNull(j, "amx_peak_gflops");
    if (Contains(AvailableGemmPaths(), "amx-bf16")) {
      EXPECT_FALSE(j["amx_peak_gflops"].is_null()) << "measured wherever AMX runs";
    }
    // oneDNN's figures: all there or all null (a build without oneDNN).
    const bool baseline = !j["baseline"].is_null();
    EXPECT_TRUE(!baseline || j["baseline"] == "onednn-bf16" || j["baseline"] == "onednn-f32");
    for (const char* key : {"onednn_gflops", "ratio", "onednn_ms", "onednn_impl", "max_rel_diff"}) {
      EXPECT_EQ(j[key].is_null(), !baseline) << key;
    }
    if (baseline) {
      for (const char* key : {"onednn_gflops", "onednn_ms"}) ExpectPositive(j, key);
      ExpectRatio(j, "ratio", "gflops", "onednn_gflops");
      EXPECT_TRUE(j["onednn_impl"].is_string());
      // Only the summation order differs from oneDNN: a relative difference of 1e-3 or
      // more (or NaN / Inf, written as strings) means they compute different GEMMs.
      ASSERT_TRUE(j["max_rel_diff"].is_number()) << j["max_rel_diff"];
      EXPECT_GE(j["max_rel_diff"].get<double>(), 0.0);
      EXPECT_LT(j["max_rel_diff"].get<double>(), 1e-3);
    }
    // The grouped cases' dense twin.
    for (const char* key : {"dense_gflops", "vs_dense"}) {
      EXPECT_EQ(j[key].is_null(), !grouped) << key;
    }
    if (grouped) {
      ExpectPositive(j, "dense_gflops");
      ExpectRatio(j, "vs_dense", "gflops", "dense_gflops");
    }
  }
  EXPECT_EQ(names, (std::vector<std::string>{"smoke_fprop", "smoke_dgrad", "smoke_wgrad",
                                             "smoke_grouped_fprop", "smoke_grouped_dgrad",
                                             "smoke_grouped_wgrad"}));
  const json& last = lines.back();
  EXPECT_EQ(last["kind"], "grouped");
  EXPECT_EQ(last["gemm"], "wgrad");
  EXPECT_EQ(last["m"], 100);
  EXPECT_EQ(last["n"], 64);
  EXPECT_EQ(last["k"], 96);
  EXPECT_EQ(last["groups"], 4);
}

// The same-run peak is the best of every measurement of the process: measuring it again
// (as each GEMM case does after its timed calls) never lowers it, a plain call returns the
// kept figure, and the AMX peak keeps its best the same way.
TEST(PathPeakTest, AgainKeepsTheBestOfEveryMeasurement) {
  const std::string path = CurrentGemmPath();
  for (const int threads : {1, 2}) {
    SCOPED_TRACE(threads);
    const std::optional<PeakResult> first = PathPeak(path, threads);
    ASSERT_TRUE(first.has_value());
    EXPECT_EQ(first->kind, PeakKind(path));
    EXPECT_GT(first->gflops, 0.0);
    double best = first->gflops;
    for (int again = 0; again < 3; ++again) {
      const std::optional<PeakResult> next = PathPeak(path, threads, /*again=*/true);
      ASSERT_TRUE(next.has_value());
      EXPECT_GE(next->gflops, best);
      best = next->gflops;
    }
    EXPECT_EQ(PathPeak(path, threads)->gflops, best);
    if (const std::optional<double> amx = AmxPeakGflops(threads)) {
      const std::optional<double> amx_again = AmxPeakGflops(threads, /*again=*/true);
      ASSERT_TRUE(amx_again.has_value());
      EXPECT_GE(*amx_again, *amx);
      EXPECT_EQ(*AmxPeakGflops(threads), *amx_again);
    }
  }
}

// --baseline picks oneDNN's bf16 or f32 matmul beside the MX GEMM (the f32 one is what the
// fp32 FMA path is measured against); each computes the same product, and a baseline this
// build or machine lacks, or any other name, is refused with one line and exit code 2.
TEST_F(BenchJsonTest, GemmBaselineFlagPicksTheMatmul) {
  const std::vector<std::string> hp = AvailableHpGemmPaths();
  for (const std::string baseline : {"onednn-f32", "onednn-bf16"}) {
    SCOPED_TRACE(baseline);
    const std::vector<std::string> args = {"bench",  "gemm",        "--reps",     "1",
                                           "--case", "smoke_dgrad", "--baseline", baseline};
    if (!Contains(hp, baseline)) {
      const testing_util::RunResult r = Run(args);
      EXPECT_EQ(r.code, 2);
      EXPECT_NE(r.err.find("--baseline value '" + baseline + "' is not a oneDNN matmul"),
                std::string::npos)
          << r.err;
      EXPECT_EQ(r.out, "");
      continue;
    }
    const std::vector<json> lines = RunLines(args);
    ASSERT_EQ(lines.size(), 1u);
    EXPECT_EQ(lines[0]["baseline"], baseline);
    ASSERT_TRUE(lines[0]["max_rel_diff"].is_number()) << lines[0]["max_rel_diff"];
    EXPECT_LT(lines[0]["max_rel_diff"].get<double>(), 1e-3);
    ExpectRatio(lines[0], "ratio", "gflops", "onednn_gflops");
  }
  for (const std::vector<std::string>& bad :
       {std::vector<std::string>{"bench", "gemm", "--case", "smoke_fprop", "--baseline",
                                 "portable"},
        std::vector<std::string>{"bench", "gemm", "--case", "smoke_fprop", "--baseline", "mkl"},
        std::vector<std::string>{"bench", "quantize", "--baseline", "onednn-f32"},
        std::vector<std::string>{"bench", "ops", "--baseline", "onednn-f32"}}) {
    const testing_util::RunResult r = Run(bad);
    EXPECT_EQ(r.code, 2) << bad.back();
    EXPECT_NE(r.err.find("--baseline"), std::string::npos) << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
    EXPECT_EQ(r.out, "");
  }
}

// --path takes the paths of AvailableGemmPaths() only: the tests' model of AMX (testing.h)
// is timed by no benchmark.
TEST_F(BenchJsonTest, GemmPathFlagTakesOnlyTheMachinesPaths) {
  const testing_util::RunResult r =
      Run({"bench", "gemm", "--case", "smoke_fprop", "--path", "amx-bf16-emulated"});
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("--path value 'amx-bf16-emulated' is not a GEMM path"), std::string::npos)
      << r.err;
  EXPECT_EQ(r.out, "");
}

TEST_F(BenchJsonTest, OpsSmokeLinesHaveEveryKeyAndSaneFigures) {
  const std::vector<json> lines = RunLines({"bench", "ops", "--reps", "1", "--case", "smoke"});
  const std::set<std::string> keys{"case",
                                   "precision",
                                   "input_policy",
                                   "weight_policy",
                                   "reuse",
                                   "tokens",
                                   "hidden",
                                   "ffn",
                                   "experts",
                                   "micro_batches",
                                   "threads",
                                   "gemm",
                                   "baseline",
                                   "step_ms",
                                   "peak_bytes",
                                   "saved_bytes",
                                   "saved_allocated_bytes",
                                   "closed_form_saved_bytes",
                                   "peak_by_category",
                                   "layers",
                                   "bf16_step_ms",
                                   "ratio_to_bf16",
                                   "time_vs_quantized",
                                   "saved_vs_quantized_bytes",
                                   "quantized_step_ms",
                                   "quantized_saved_bytes",
                                   "deferred_step_ms",
                                   "deferred_saved_bytes"};
  std::set<std::string> categories;
  for (int c = 0; c < kNumMemoryCategories; ++c) {
    categories.insert(std::string(Name(static_cast<MemoryCategory>(c))));
  }
  std::set<std::string> cases;
  for (const json& j : lines) {
    SCOPED_TRACE(j.dump());
    ASSERT_EQ(Keys(j), keys);
    cases.insert(j["case"].get<std::string>());
    const bool mxfp8 = j["precision"] == "mxfp8";
    EXPECT_TRUE(mxfp8 || j["precision"] == "bf16");
    if (mxfp8) {
      for (const char* key : {"input_policy", "weight_policy"}) {
        EXPECT_TRUE(j[key] == "quantized" || j[key] == "deferred" || j[key] == "auto") << key;
      }
      EXPECT_TRUE(j["reuse"].is_boolean());
      EXPECT_EQ(j["gemm"], CurrentGemmPath());
    } else {
      EXPECT_TRUE(j["input_policy"].is_null() && j["weight_policy"].is_null() &&
                  j["reuse"].is_null());
      EXPECT_EQ(j["gemm"], HpGemmRoute(DType::kBF16));
    }
    EXPECT_EQ(j["baseline"], HpGemmRoute(DType::kBF16));  // the bf16 run's GEMM
    for (const char* key : {"tokens", "hidden", "ffn", "micro_batches", "threads"}) {
      ASSERT_TRUE(j[key].is_number_integer()) << key;
      EXPECT_GE(j[key].get<int64_t>(), 1) << key;
    }
    ASSERT_TRUE(j["experts"].is_number_integer());
    EXPECT_GE(j["experts"].get<int64_t>(), 0);
    ExpectPositive(j, "step_ms");
    ExpectPositive(j, "peak_bytes");
    for (const char* key : {"saved_bytes", "saved_allocated_bytes", "closed_form_saved_bytes"}) {
      ASSERT_TRUE(j[key].is_number_integer()) << key;
      EXPECT_GE(j[key].get<int64_t>(), 0) << key;
    }
    ASSERT_TRUE(j["peak_by_category"].is_object());
    EXPECT_EQ(Keys(j["peak_by_category"]), categories);
    for (const auto& [name, bytes] : j["peak_by_category"].items()) {
      ASSERT_TRUE(bytes.is_number_integer()) << name;
      EXPECT_GE(bytes.get<int64_t>(), 0) << name;
      EXPECT_LE(bytes.get<int64_t>(), j["peak_bytes"].get<int64_t>()) << name;
    }
    EXPECT_EQ(j["saved_allocated_bytes"], j["peak_by_category"]["saved_for_backward"]);
    ASSERT_TRUE(j["layers"].is_array());
    EXPECT_FALSE(j["layers"].empty());
    for (const json& layer : j["layers"]) {
      ASSERT_EQ(Keys(layer),
                (std::set<std::string>{"name", "allocated_bytes", "referenced_bytes",
                                       "persistent_bytes", "input_policy", "weight_policy"}));
      EXPECT_TRUE(layer["name"].is_string());
      for (const char* key : {"allocated_bytes", "referenced_bytes", "persistent_bytes"}) {
        EXPECT_TRUE(layer[key].is_number_integer()) << key;
      }
      // The applied policies: auto resolved, and none with MXFP8 off.
      for (const char* key : {"input_policy", "weight_policy"}) {
        if (mxfp8) {
          EXPECT_TRUE(layer[key] == "quantized" || layer[key] == "deferred") << key;
        } else {
          EXPECT_TRUE(layer[key].is_null()) << key;
        }
      }
    }
    // The fixed policies' figures beside every MXFP8 line (same reuse).
    for (const char* key : {"quantized_step_ms", "deferred_step_ms"}) {
      EXPECT_EQ(j[key].is_null(), !mxfp8) << key;
      if (mxfp8) {
        ExpectPositive(j, key);
      }
    }
    for (const char* key : {"quantized_saved_bytes", "deferred_saved_bytes"}) {
      EXPECT_EQ(j[key].is_null(), !mxfp8) << key;
      if (mxfp8) {
        EXPECT_TRUE(j[key].is_number_integer()) << key;
      }
    }
    ExpectPositive(j, "bf16_step_ms");
    ExpectRatio(j, "ratio_to_bf16", "step_ms", "bf16_step_ms");
    // Against the run with both policies quantized (and the same reuse): mxfp8 only.
    EXPECT_EQ(j["time_vs_quantized"].is_null(), !mxfp8);
    EXPECT_EQ(j["saved_vs_quantized_bytes"].is_null(), !mxfp8);
    if (mxfp8) {
      ASSERT_TRUE(j["time_vs_quantized"].is_number());
      EXPECT_TRUE(std::isfinite(j["time_vs_quantized"].get<double>()));
      EXPECT_GE(j["time_vs_quantized"].get<double>(), 0.0);
      EXPECT_TRUE(j["saved_vs_quantized_bytes"].is_number_integer());
    }
  }
  EXPECT_EQ(cases, (std::set<std::string>{"smoke_transformer", "smoke_moe"}));
  // The last two lines: the mixture-of-experts stack with both policies auto, without and
  // with the weight cache. Each layer's input is a fresh single-consumer bf16 buffer
  // (quantized) and its weight a parameter (deferred, alive anyway): the bytes held are at
  // most the smaller of the two fixed policies', and the FP8 copies those of the inputs.
  ASSERT_GE(lines.size(), 3u);
  for (size_t i = lines.size() - 2; i < lines.size(); ++i) {
    const json& a = lines[i];
    SCOPED_TRACE(a.dump());
    EXPECT_EQ(a["case"], "smoke_moe");
    EXPECT_EQ(a["input_policy"], "auto");
    EXPECT_EQ(a["weight_policy"], "auto");
    EXPECT_EQ(a["reuse"], i + 1 == lines.size());
    for (const json& layer : a["layers"]) {
      EXPECT_EQ(layer["input_policy"], "quantized");
      EXPECT_EQ(layer["weight_policy"], "deferred");
      EXPECT_EQ(layer["referenced_bytes"], 0);
      EXPECT_GT(layer["persistent_bytes"].get<int64_t>(), 0);
    }
    EXPECT_LE(a["saved_bytes"].get<int64_t>(), std::min(a["quantized_saved_bytes"].get<int64_t>(),
                                                        a["deferred_saved_bytes"].get<int64_t>()));
    EXPECT_EQ(a["saved_allocated_bytes"], a["closed_form_saved_bytes"]);
  }
  // Before them: the mixture-of-experts stack with both policies deferred and the weight
  // cache on. Deferring both saves no FP8 copy (0 bytes), and 11760 bytes fewer than
  // saving the quantized copies.
  const json& last = lines[lines.size() - 3];
  EXPECT_EQ(last["case"], "smoke_moe");
  EXPECT_EQ(last["precision"], "mxfp8");
  EXPECT_EQ(last["input_policy"], "deferred");
  EXPECT_EQ(last["weight_policy"], "deferred");
  EXPECT_EQ(last["reuse"], true);
  EXPECT_EQ(last["tokens"], 100);
  EXPECT_EQ(last["hidden"], 64);
  EXPECT_EQ(last["ffn"], 48);
  EXPECT_EQ(last["experts"], 4);
  EXPECT_EQ(last["micro_batches"], 4);
  EXPECT_EQ(last["saved_allocated_bytes"], 0);
  EXPECT_EQ(last["closed_form_saved_bytes"], 0);
  ASSERT_FALSE(last["layers"].empty());
  EXPECT_EQ(last["layers"][0]["name"], "expert_fc1");
  EXPECT_EQ(last["layers"][0]["allocated_bytes"], 0);
  EXPECT_EQ(last["saved_vs_quantized_bytes"], 11760);
}

// bench train: one line per run, in the order of --runs, each with every key; the first
// run is the baseline (ratio 1), and with one round each ratio is the run's step time
// over the baseline's. Flags of the other benchmarks are errors naming the flag.
TEST_F(BenchJsonTest, TrainLinesHaveEveryKeyAndSaneFigures) {
  const std::vector<json> lines = RunLines(
      {"bench", "train", "--runs", "bf16,mxfp8-deferred", "--rounds", "1", "--warmup-rounds", "0"});
  ASSERT_EQ(lines.size(), 2u);
  const std::set<std::string> keys{"bench",       "run",   "baseline", "step_ms",
                                   "min_step_ms", "ratio", "rounds"};
  for (const json& j : lines) {
    SCOPED_TRACE(j.dump());
    ASSERT_EQ(Keys(j), keys);
    EXPECT_EQ(j["bench"], "train");
    EXPECT_EQ(j["baseline"], "bf16");
    EXPECT_EQ(j["rounds"], 1);
    ExpectPositive(j, "step_ms");
    EXPECT_EQ(j["min_step_ms"], j["step_ms"]);  // one round
  }
  EXPECT_EQ(lines[0]["run"], "bf16");
  EXPECT_EQ(lines[1]["run"], "mxfp8-deferred");
  EXPECT_EQ(lines[0]["ratio"], 1.0);
  EXPECT_NEAR(lines[1]["ratio"].get<double>(),
              lines[1]["step_ms"].get<double>() / lines[0]["step_ms"].get<double>(), 1e-9);
  for (const std::vector<std::string>& bad :
       {std::vector<std::string>{"bench", "train", "--steps", "3"},
        std::vector<std::string>{"bench", "train", "--reps", "3"},
        std::vector<std::string>{"bench", "gemm", "--rounds", "3"},
        std::vector<std::string>{"bench", "train", "--runs", "bf16,int4"},
        std::vector<std::string>{"bench", "train", "--rounds", "0"}}) {
    const testing_util::RunResult r = Run(bad);
    EXPECT_EQ(r.code, 2) << bad[2];
    EXPECT_NE(r.err.find(bad[2] == "--runs" ? "int4" : bad[2]), std::string::npos) << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
    EXPECT_EQ(r.out, "");
  }
}

}  // namespace
}  // namespace mxtrain
