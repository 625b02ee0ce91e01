// `mxtrain train` end to end on a tiny model: the run directory's files (summary.json with
// its keys, metrics.csv per run, checkpoints whose safetensors header is checked by hand
// and that load back), resume through the CLI, bad input (exit 2, one line, nothing
// written) and a diverging run (exit 3, the last good checkpoint intact).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <sstream>
#include <string>
#include <vector>

#include "io/json_util.h"
#include "mxtrain/safetensors.h"
// After the library headers (a block of its own, so that include sorting keeps it here).
#include "cli_test_util.h"
#include "test_util.h"

namespace mxtrain {
namespace {

namespace fs = std::filesystem;
using testing_util::ReadBytes;
using testing_util::RunResult;
using testing_util::WriteBytes;

class CliTrainTest : public testing_util::CliFixture {
 protected:
  // A model small enough for a few steps under the sanitizers in about a second.
  static std::vector<std::string> Tiny(std::vector<std::string> args) {
    for (const char* a :
         {"--d-model",    "32", "--layers",  "1",  "--heads",   "2",  "--experts", "4",
          "--top-k",      "2",  "--d-ff",    "32", "--context", "16", "--batch",   "4",
          "--eval-every", "2",  "--threads", "2"}) {
      args.push_back(a);
    }
    return args;
  }
  RunResult RunTrain(std::vector<std::string> args) const {
    args.insert(args.begin(), "train");
    return Run(Tiny(args));
  }
};

// The train_loss column of a metrics.csv.
std::vector<std::string> TrainLosses(const std::string& csv_path) {
  std::istringstream in(ReadBytes(csv_path));
  std::string line;
  std::getline(in, line);
  EXPECT_EQ(line.rfind("step,train_loss,", 0), 0u) << line;
  std::vector<std::string> losses;
  while (std::getline(in, line)) {
    const size_t a = line.find(',');
    losses.push_back(line.substr(a + 1, line.find(',', a + 1) - a - 1));
  }
  return losses;
}

// The safetensors header by hand: 8-byte little-endian length, JSON whose entries have an
// F32 dtype, the loaded tensor's shape and offsets that tile the data buffer in order.
void ExpectCheckpointLoads(const std::string& path, int64_t step) {
  SCOPED_TRACE(path);
  const std::string bytes = ReadBytes(path);
  ASSERT_GE(bytes.size(), 8u);
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = n << 8 | static_cast<unsigned char>(bytes[i]);
  ASSERT_LE(8 + n, bytes.size());
  const internal::Json header = internal::ParseJson(std::string_view(bytes).substr(8, n));
  const SafetensorsFile file = ReadSafetensors(path);
  EXPECT_EQ(file.metadata.at("train.step"), std::to_string(step));
  EXPECT_EQ(file.metadata.at("model.d_model"), "32");
  int64_t offset = 0, params = 0;
  for (const NamedTensor& t : file.tensors) {
    const internal::Json& e = header.at(t.name);
    EXPECT_EQ(e.at("dtype").get<std::string>(), "F32");
    std::vector<int64_t> shape;
    for (const internal::Json& d : e.at("shape")) shape.push_back(d.get<int64_t>());
    EXPECT_EQ(shape, t.tensor.shape().dims()) << t.name;
    EXPECT_EQ(e.at("data_offsets").at(0).get<int64_t>(), offset) << t.name;
    offset += static_cast<int64_t>(t.tensor.NumBytes());
    EXPECT_EQ(e.at("data_offsets").at(1).get<int64_t>(), offset) << t.name;
    params += t.name.rfind("param/", 0) == 0;
  }
  EXPECT_EQ(static_cast<uint64_t>(offset), bytes.size() - 8 - n);
  // Per layer: 2 norms, q, k, v, o, router, w13, w2; plus embedding, final norm, head.
  EXPECT_EQ(params, 9 + 3);
  EXPECT_EQ(file.tensors.size(), 3u * 12);
}

TEST_F(CliTrainTest, WritesTheRunDirectory) {
  const RunResult r = RunTrain({"--steps", "4", "--out", Out("run")});
  ASSERT_EQ(r.code, 0) << r.err;
  for (const char* want :
       {"gap_bf16", "\nbf16 ", "\nmxfp8-quantized ", "\nmxfp8-deferred ", "\nmxfp8-auto "}) {
    EXPECT_NE(r.out.find(want), std::string::npos) << want << " in\n" << r.out;
  }
  const internal::Json summary = internal::ParseJson(ReadBytes(Out("run/summary.json")));
  ASSERT_EQ(summary.size(), 4u);
  const char* names[] = {"bf16", "mxfp8-quantized", "mxfp8-deferred", "mxfp8-auto"};
  for (size_t i = 0; i < 4; ++i) {
    const internal::Json& s = summary.at(i);
    EXPECT_EQ(s.at("name").get<std::string>(), names[i]);
    for (const char* key : {"final_train_loss", "final_val_loss", "tokens_per_s", "step_ms"}) {
      EXPECT_GT(s.at(key).get<double>(), 0) << key;
    }
    for (const char* key : {"peak_bytes", "saved_bytes"})
      EXPECT_GT(s.at(key).get<int64_t>(), 0) << key;
    const std::string run = Out(std::string("run/") + names[i]);
    EXPECT_EQ(TrainLosses(run + "/metrics.csv").size(), 4u);
    ExpectCheckpointLoads(run + "/checkpoint.safetensors", 4);
  }
  EXPECT_EQ(summary.at(0).at("precision").get<std::string>(), "bf16");
  EXPECT_TRUE(summary.at(0).at("input_policy").is_null());
  EXPECT_EQ(summary.at(1).at("input_policy").get<std::string>(), "quantized");
  EXPECT_EQ(summary.at(2).at("weight_policy").get<std::string>(), "deferred");
  // The MXFP8 policies compute the same numbers.
  for (size_t i : {2, 3}) {
    EXPECT_EQ(summary.at(1).at("final_val_loss").get<double>(),
              summary.at(i).at("final_val_loss").get<double>());
  }
  // Per layer, what each run saved: auto references the bf16 input Q, K and V share and the
  // parameters, and quantizes the single-consumer inputs (linear.h "The auto policy").
  EXPECT_TRUE(summary.at(0).at("policies").is_null());
  const internal::Json& fixed = summary.at(1).at("policies");
  EXPECT_EQ(fixed.size(), 6u + 1);  // the block's q, k, v, o, w13, w2; the LM head
  EXPECT_EQ(fixed.at("layers.0.attn.wq").at("input").get<std::string>(), "quantized");
  const internal::Json& autos = summary.at(3).at("policies");
  for (const char* layer : {"layers.0.attn.wq", "layers.0.attn.wk", "layers.0.attn.wv"}) {
    EXPECT_EQ(autos.at(layer).at("input").get<std::string>(), "deferred") << layer;
  }
  for (const char* layer : {"layers.0.attn.wo", "layers.0.moe.w13", "layers.0.moe.w2", "lm_head"}) {
    EXPECT_EQ(autos.at(layer).at("input").get<std::string>(), "quantized") << layer;
    EXPECT_EQ(autos.at(layer).at("weight").get<std::string>(), "deferred") << layer;
  }
  // Held for the backward: auto at most the smaller of the two fixed policies.
  EXPECT_LE(summary.at(3).at("saved_bytes").get<int64_t>(),
            std::min(summary.at(1).at("saved_bytes").get<int64_t>(),
                     summary.at(2).at("saved_bytes").get<int64_t>()));
  EXPECT_NE(ReadBytes(Out("run/plot.svg")).find("<svg"), std::string::npos);
}

TEST_F(CliTrainTest, OneRunWithItsRecipe) {
  const RunResult r = RunTrain({"--precision", "mxfp8", "--recipe", "hybrid", "--scale", "floor",
                                "--input-policy", "deferred", "--steps", "2", "--out", Out("one")});
  ASSERT_EQ(r.code, 0) << r.err;
  const internal::Json summary = internal::ParseJson(ReadBytes(Out("one/summary.json")));
  ASSERT_EQ(summary.size(), 1u);
  EXPECT_EQ(summary.at(0).at("name").get<std::string>(), "mxfp8-in-deferred-w-quantized");
  EXPECT_EQ(summary.at(0).at("recipe").get<std::string>(),
            "mxfp8 hybrid floor input=deferred weight=quantized");
  EXPECT_EQ(summary.at(0).at("cache_hits").get<int64_t>(), 0);  // no --reuse-weights
  EXPECT_EQ(r.out.find("gap_bf16") != std::string::npos, true);
}

TEST_F(CliTrainTest, HighPrecisionGemmsAndTheSmallModel) {
  const RunResult r = RunTrain({"--precision", "mxfp8", "--hp-gemms", "wgrad", "--weight-policy",
                                "auto", "--steps", "2", "--out", Out("hp")});
  ASSERT_EQ(r.code, 0) << r.err;
  const internal::Json summary = internal::ParseJson(ReadBytes(Out("hp/summary.json")));
  EXPECT_EQ(summary.at(0).at("name").get<std::string>(), "mxfp8-hp-wgrad-bf16");
  EXPECT_EQ(summary.at(0).at("recipe").get<std::string>(),
            "mxfp8 e4m3 rceil input=quantized weight=auto hp=wgrad:bf16");
  const internal::Json& lm = summary.at(0).at("policies").at("lm_head");
  EXPECT_EQ(lm.at("input").get<std::string>(), "hp");
  EXPECT_EQ(lm.at("weight").get<std::string>(), "deferred");
  // Contradictions and unknown names: one line, exit 2, nothing written.
  for (const auto& [args, needle] : std::vector<std::pair<std::vector<std::string>, std::string>>{
           {{"--precision", "mxfp8", "--hp-gemms", "wgrad", "--input-policy", "deferred"},
            "contradicts a high-precision wgrad"},
           {{"--precision", "mxfp8", "--hp-gemms", "fprop,dgrad,wgrad"}, "use precision bf16"},
           {{"--precision", "mxfp8", "--hp-gemms", "xgrad"}, "unknown GEMM 'xgrad'"},
           {{"--runs", "bf16,,mxfp8-deferred"}, "--runs 'bf16,,mxfp8-deferred' has an empty entry"},
           {{"--runs", "bf16, bf16"}, "--runs names 'bf16' twice"},
           {{"--hp-gemms", "wgrad"}, "--hp-gemms needs --precision mxfp8"},
           {{"--model", "medium"}, "unknown model preset 'medium'"}}) {
    std::vector<std::string> a = args;
    a.insert(a.end(), {"--steps", "1", "--out", Out("bad")});
    const RunResult bad = RunTrain(a);
    EXPECT_EQ(bad.code, 2) << needle;
    EXPECT_NE(bad.err.find(needle), std::string::npos) << bad.err;
    EXPECT_FALSE(std::filesystem::exists(Out("bad/summary.json"))) << needle;
  }
  // The small preset's sizes, overridable flag by flag (one short step).
  const RunResult small =
      Run({"train", "--precision",     "mxfp8",     "--input-policy", "auto", "--model",
           "small", "--layers",        "1",         "--context",      "32",   "--batch",
           "2",     "--micro-batches", "1",         "--steps",        "1",    "--threads",
           "2",     "--out",           Out("small")});
  ASSERT_EQ(small.code, 0) << small.err;
  for (const char* want : {"d_model=512", "heads=8", "d_ff=1024", "context=32", "x 1 micro"}) {
    EXPECT_NE(small.out.find(want), std::string::npos) << want << " in " << small.out;
  }
}

TEST_F(CliTrainTest, ResumeContinuesBitForBit) {
  const std::vector<std::string> run = {"--runs", "bf16,mxfp8-deferred", "--steps", "6"};
  auto with = [&](std::vector<std::string> extra) {
    std::vector<std::string> args = run;
    args.insert(args.end(), extra.begin(), extra.end());
    return args;
  };
  ASSERT_EQ(RunTrain(with({"--out", Out("full")})).code, 0);
  ASSERT_EQ(RunTrain(with({"--out", Out("part"), "--stop-after", "3"})).code, 0);
  ExpectCheckpointLoads(Out("part/bf16/checkpoint.safetensors"), 3);
  const RunResult r = RunTrain(with({"--resume", Out("part")}));
  ASSERT_EQ(r.code, 0) << r.err;
  for (const char* name : {"bf16", "mxfp8-deferred"}) {
    SCOPED_TRACE(name);
    const std::vector<std::string> full = TrainLosses(Out("full/") + name + "/metrics.csv");
    EXPECT_EQ(full.size(), 6u);
    EXPECT_EQ(TrainLosses(Out("part/") + name + "/metrics.csv"), full);
    ExpectCheckpointLoads(Out("part/") + name + "/checkpoint.safetensors", 6);
  }
  const auto val_loss = [&](const std::string& run) {
    return internal::ParseJson(ReadBytes(Out(run + "/summary.json"))).at(0).at("final_val_loss");
  };
  EXPECT_EQ(val_loss("part").get<double>(), val_loss("full").get<double>());
}

TEST_F(CliTrainTest, DivergingRunExitsThreeKeepingTheLastGoodCheckpoint) {
  const RunResult r = RunTrain({"--runs", "fp32", "--steps", "10", "--lr", "1e30", "--warmup", "0",
                                "--checkpoint-every", "1", "--out", Out("nan")});
  EXPECT_EQ(r.code, 3) << r.err;
  const std::string tail = r.err.substr(r.err.rfind("mxtrain: error: "));
  EXPECT_EQ(std::count(tail.begin(), tail.end(), '\n'), 1) << r.err;
  EXPECT_NE(tail.find("fp32: training diverged"), std::string::npos) << tail;
  const size_t at = tail.find("at step ");
  ASSERT_NE(at, std::string::npos) << tail;
  const int64_t step = std::stoll(tail.substr(at + 8));
  EXPECT_GE(step, 2);
  ExpectCheckpointLoads(Out("nan/fp32/checkpoint.safetensors"), step - 1);
}

TEST_F(CliTrainTest, BadInputExitsTwoWritingNothing) {
  WriteBytes(In("empty.txt"), "");
  WriteBytes(In("short.txt"), std::string(20, 'x'));
  const std::string out = Out("run");
  ExpectBadInput(Tiny({"train", "--data", In("missing.txt"), "--out", out}), "does not exist");
  ExpectBadInput(Tiny({"train", "--data", In("empty.txt"), "--out", out}), "is empty");
  ExpectBadInput(Tiny({"train", "--data", In("short.txt"), "--out", out}), "too few");
  ExpectBadInput(Tiny({"train", "--data", base_ + "/in", "--out", out}), "is a directory");
  ExpectBadInput({"train", "--precision", "bf16", "--input-policy", "deferred", "--out", out},
                 "only valid when MXFP8 is enabled");
  ExpectBadInput({"train", "--precision", "fp32", "--reuse-weights", "--out", out},
                 "only valid when MXFP8 is enabled");
  ExpectBadInput({"train", "--runs", "bf16", "--recipe", "hybrid", "--out", out},
                 "only valid when MXFP8 is enabled");
  ExpectBadInput({"train", "--weight-policy", "deferred", "--out", out}, "needs --precision mxfp8");
  ExpectBadInput({"train", "--runs", "bf16,fp8", "--out", out}, "'fp8'");
  ExpectBadInput({"train", "--runs", "bf16", "--precision", "bf16", "--out", out},
                 "cannot be combined");
  ExpectBadInput({"train", "--steps", "0", "--out", out}, "--steps");
  ExpectBadInput({"train", "--heads", "3", "--out", out}, "n_heads");
  ExpectBadInput({"train", "--scale", "round", "--out", out}, "round");
  ExpectBadInput({"train", "--lr", "-1", "--out", out}, "--lr");
  ExpectBadInput({"train", "--resume", Out("nowhere"), "--out", out}, "does not exist");
}

TEST_F(CliTrainTest, NewRunOverAnEarlierOneExitsTwoLeavingItAsItWas) {
  ASSERT_EQ(RunTrain({"--runs", "bf16", "--steps", "2", "--out", Out("a")}).code, 0);
  const std::string summary = ReadBytes(Out("a/summary.json"));
  const std::string ckpt = ReadBytes(Out("a/bf16/checkpoint.safetensors"));
  ExpectBadInput(Tiny({"train", "--runs", "fp32", "--steps", "2", "--out", Out("a")}),
                 "already holds a run", {"a"});
  EXPECT_EQ(ReadBytes(Out("a/summary.json")), summary);
  EXPECT_EQ(ReadBytes(Out("a/bf16/checkpoint.safetensors")), ckpt);
  EXPECT_FALSE(fs::exists(Out("a/fp32")));
}

TEST_F(CliTrainTest, MismatchedCheckpointExitsTwoLeavingItAsItWas) {
  ASSERT_EQ(RunTrain({"--runs", "bf16", "--steps", "2", "--out", Out("a")}).code, 0);
  const std::string ckpt = Out("a/bf16/checkpoint.safetensors");
  const std::string before = ReadBytes(ckpt);
  const std::string metrics = ReadBytes(Out("a/bf16/metrics.csv"));
  // --d-ff 64 after Tiny's 32: parsed flags may not repeat, so build the line by hand.
  ExpectBadInput({"train", "--runs",    "bf16", "--steps", "4", "--resume",  Out("a"), "--d-model",
                  "32",    "--layers",  "1",    "--heads", "2", "--experts", "4",      "--d-ff",
                  "64",    "--context", "16",   "--batch", "4"},
                 "d_ff=32", {"a"});
  EXPECT_EQ(ReadBytes(ckpt), before);
  EXPECT_EQ(ReadBytes(Out("a/bf16/metrics.csv")), metrics);
  WriteBytes(In("other.txt"), std::string(4000, 'z'));
  ExpectBadInput(Tiny({"train", "--runs", "bf16", "--steps", "4", "--resume", Out("a"), "--data",
                       In("other.txt")}),
                 "other data", {"a"});
  ExpectBadInput(
      Tiny({"train", "--runs", "bf16", "--steps", "4", "--resume", Out("a"), "--seed", "7"}),
      "run.seed 1, this run has 7", {"a"});
  EXPECT_EQ(ReadBytes(ckpt), before);
  WriteBytes(ckpt, "not a checkpoint");
  ExpectBadInput(Tiny({"train", "--runs", "bf16", "--steps", "4", "--resume", Out("a")}),
                 "checkpoint.safetensors", {"a"});
}

TEST_F(CliTrainTest, HelpListsTheCommand) {
  const RunResult r = Run({"--help"});
  EXPECT_EQ(r.code, 0);
  EXPECT_NE(r.out.find("mxtrain train [--runs LIST"), std::string::npos);
}

}  // namespace
}  // namespace mxtrain
