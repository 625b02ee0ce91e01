// `mxtrain bench quantize [--reps N] [--threads T] [--dtype f32|bf16] [--case KIND]
//  [--shape MxK] [--simd TARGET] [--code-stores auto|cached|streaming]`,
//  `mxtrain bench gemm [--reps N] [--threads T] [--case NAME] [--path NAME]
//  [--baseline onednn-bf16|onednn-f32]` and
//  `mxtrain bench train [--runs LIST] [--recipe R] [--scale S] [--model M] [--threads T]
//  [--rounds N] [--warmup-rounds N]` and
//  `mxtrain bench --list`: JSON lines from the library's benchmark tables (mxtrain/bench.h).
#include <algorithm>
#include <iostream>
#include <optional>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "args.h"
#include "commands.h"
#include "mxtrain/bench/bench.h"
#include "mxtrain/bench/ops_bench.h"
#include "mxtrain/comm.h"
#include "mxtrain/error.h"
#include "mxtrain/gemm.h"
#include "mxtrain/hp_gemm.h"
#include "mxtrain/simd.h"
#include "mxtrain/testing.h"
#include "mxtrain/train/data.h"
#include "mxtrain/train/ep_bench.h"
#include "mxtrain/train/step_bench.h"
#include "run_specs.h"

namespace mxtrain::cli {

namespace {

constexpr const char* kUsage =
    "usage: mxtrain bench quantize [--reps N] [--threads 1|2] [--dtype f32|bf16] "
    "[--code-stores auto|cached|streaming] "
    "[--case rowwise|columnwise|dual|grouped] [--shape MxK] [--simd TARGET]\n"
    "       mxtrain bench gemm [--reps N] [--threads T] [--case NAME] [--path PATH] "
    "[--baseline onednn-bf16|onednn-f32]\n"
    "       mxtrain bench ops [--reps N] [--threads T] [--case NAME] [--tokens T] [--hidden H]\n"
    "       mpirun -np W mxtrain bench ep [--steps N] [--model tiny|small] [--threads T]\n"
    "       mxtrain bench train [--runs LIST] [--recipe e4m3|hybrid] [--scale RULE] "
    "[--model tiny|small] [--threads T] [--rounds N] [--warmup-rounds N]\n"
    "       mxtrain bench --list\n"
    "gemm --case NAME runs the case NAME, or every case whose name starts with NAME_ "
    "(--case layer_fc1: its fprop, dgrad and wgrad); --baseline: oneDNN's bf16 or f32 "
    "matmul beside it (default: bf16 where oneDNN has one); default --reps: 9 quantize, 3 gemm, "
    "3 ops (optimizer steps per policy combination; --tokens and --hidden size the "
    "transformer and moe cases, default 4096 and 1024); ep: the default mxtrain train model "
    "and MXFP8 recipe over the job's W ranks with the experts replicated (ep1) and sharded "
    "over W ranks with the bf16 and the MXFP8 wire: step time and bytes between ranks per "
    "step (default --steps 20, --threads 1); train: the runs of mxtrain train (default bf16, "
    "mxfp8-quantized, mxfp8-deferred, mxfp8-auto), one optimizer step of each in turn per "
    "round: per run the median step time and the median ratio to the first run's step in "
    "the same round (default --rounds 40 after --warmup-rounds 5; --threads: all cores)";

void PrintList() {
  // Built whole first: a bad cap in the environment (simd.h, gemm.h) fails before any line.
  std::ostringstream os;
  os << "quantize cases:";
  for (QuantizeKind k : {QuantizeKind::kRowwise, QuantizeKind::kColumnwise, QuantizeKind::kDual,
                         QuantizeKind::kGrouped}) {
    os << " " << Name(k);
  }
  os << "\nsimd targets:";
  for (const std::string& t : AvailableSimdTargets()) os << " " << t;
  os << "\ngemm cases:";
  for (const GemmBenchCase& c : StandardGemmBenchCases()) os << " " << c.name;
  os << "\nops cases:";
  for (const OpsBenchCase& c : StandardOpsBenchCases()) os << " " << c.name;
  os << "\nops configs:";
  for (const OpsBenchConfig& c : StandardOpsBenchConfigs()) os << " '" << c.Name() << "'";
  os << "\ngemm paths:";
  for (const std::string& p : AvailableGemmPaths()) os << " " << p;
  os << "\ngemm path: " << CurrentGemmPath() << " (peak: " << PeakKind(CurrentGemmPath()) << ")";
  os << "\nhp gemm paths:";
  for (const std::string& p : AvailableHpGemmPaths()) os << " " << p;
  os << "\nbf16 route: " << HpGemmRoute(DType::kBF16);
  os << "\ngemm baseline: " << (HaveOneDnnBaseline() ? GemmBaselineRoute() : "none");
  os << "\n";
  std::cout << os.str();
}

// NAME itself, or a family of cases sharing the prefix NAME_.
bool CaseMatches(const std::string& name, const std::string& selector) {
  return name == selector || name.rfind(selector + "_", 0) == 0;
}

int RunQuantizeBench(const ParsedArgs& args) {
  const int reps = static_cast<int>(ParseInt(args.Get("reps", "9"), "--reps", 1, 1000));
  const int64_t threads =
      args.Has("threads") ? ParseInt(args.Get("threads"), "--threads", 1, 2) : 0;
  if (args.Has("dtype")) {
    MXTRAIN_CHECK(args.Get("dtype") == "f32" || args.Get("dtype") == "bf16",
                  "--dtype must be f32 or bf16, got '", args.Get("dtype"), "'");
  }
  std::optional<std::string> selected;
  if (args.Has("case")) {
    selected = args.Get("case");
    if (*selected == "colwise") {  // the name of mxtrain 0.1, kept for one release
      PrintDeprecation(
          "--case colwise is now --case columnwise; the old name goes in the next "
          "release");
      selected = "columnwise";
    }
    const std::string& c = *selected;
    MXTRAIN_CHECK(c == "rowwise" || c == "columnwise" || c == "dual" || c == "grouped",
                  "--case must be rowwise, columnwise, dual or grouped, got '", c, "'");
  }
  int64_t m = 0, k = 0;
  if (args.Has("shape")) {
    std::tie(m, k) = ParseShape2(args.Get("shape"), "--shape", 1 << 20);
  }
  const CodeStores stores = ParseCodeStores(args.Get("code-stores", "auto"));
  if (args.Has("simd")) ForceSimdTarget(args.Get("simd"));
  for (QuantizeBenchCase c : StandardQuantizeBenchCases()) {
    c.code_stores = stores;
    if (threads > 0 && c.threads != threads) continue;
    if (args.Has("dtype") && Name(c.dtype) != args.Get("dtype")) continue;
    if (selected && Name(c.kind) != *selected) continue;
    if (m > 0) {
      if (c.m != 4096) continue;  // one case per (kind, dtype, threads) at the given shape
      c.m = m;
      c.k = k;
    }
    std::cout << ToJson(MeasureQuantizeBench(c, reps)) << std::endl;
  }
  return 0;
}

int RunGemmBench(const ParsedArgs& args) {
  const int reps = static_cast<int>(ParseInt(args.Get("reps", "3"), "--reps", 1, 1000));
  const int threads = args.Has("threads")
                          ? static_cast<int>(ParseInt(args.Get("threads"), "--threads", 1, 1024))
                          : 0;
  std::vector<GemmBenchCase> cases;
  for (GemmBenchCase& c : StandardGemmBenchCases()) {
    if (args.Has("case") && !CaseMatches(c.name, args.Get("case"))) continue;
    c.threads = threads;
    cases.push_back(std::move(c));
  }
  MXTRAIN_CHECK(!cases.empty(), "--case '", args.Get("case"),
                "' names no gemm case (mxtrain bench --list shows them)");
  if (args.Has("path")) ForceGemmPathFlag(args.Get("path"));
  if (args.Has("baseline")) {
    // The baseline is the high-precision GEMM's route for bf16 values (GemmBaselineRoute):
    // forcing onednn-f32 gives oneDNN's f32 matmul on the same values.
    const std::string baseline = args.Get("baseline");
    std::vector<std::string> onednn;  // the oneDNN matmuls of this build and machine
    std::string listed;
    for (const std::string& p : AvailableHpGemmPaths()) {
      if (p.rfind("onednn-", 0) != 0) continue;
      onednn.push_back(p);
      listed += (listed.empty() ? "" : ", ") + p;
    }
    MXTRAIN_CHECK(std::find(onednn.begin(), onednn.end(), baseline) != onednn.end(),
                  "--baseline value '", baseline, "' is not a oneDNN matmul of this build (",
                  listed.empty() ? "none" : listed, ")");
    ForceHpGemmPath(baseline);
  }
  for (const GemmBenchCase& c : cases) {
    std::cout << ToJson(MeasureGemmBench(c, reps)) << std::endl;
  }
  return 0;
}

int RunOpsBench(const ParsedArgs& args) {
  const int reps = static_cast<int>(ParseInt(args.Get("reps", "3"), "--reps", 1, 1000));
  const int threads = args.Has("threads")
                          ? static_cast<int>(ParseInt(args.Get("threads"), "--threads", 1, 1024))
                          : 0;
  const int64_t tokens = ParseInt(args.Get("tokens", "4096"), "--tokens", 8, int64_t{1} << 24);
  const int64_t hidden = ParseInt(args.Get("hidden", "1024"), "--hidden", 16, int64_t{1} << 16);
  std::vector<OpsBenchCase> cases;
  for (OpsBenchCase& c : StandardOpsBenchCases(tokens, hidden)) {
    // Without --case: the real shapes; the smoke cases only when asked for.
    const bool smoke = c.name.rfind("smoke", 0) == 0;
    if (args.Has("case") ? !CaseMatches(c.name, args.Get("case")) : smoke) continue;
    c.threads = threads;
    cases.push_back(std::move(c));
  }
  MXTRAIN_CHECK(!cases.empty(), "--case '", args.Get("case"),
                "' names no ops case (mxtrain bench --list shows them)");
  const std::vector<OpsBenchConfig> configs = StandardOpsBenchConfigs();
  for (const OpsBenchCase& c : cases) {
    const std::vector<OpsBenchResult> results = MeasureOpsBench(c, configs, reps);
    for (size_t i = 0; i < results.size(); ++i) std::cout << ToJson(results, i) << std::endl;
  }
  return 0;
}

// Several processes: rank 0 prints; a rank that fails ends the job (as mxtrain train).
int RunEpBenchCommand(const ParsedArgs& args) {
  MXTRAIN_CHECK(LaunchedWorldSize() > 1,
                "bench ep needs several processes: mpirun -np 2 mxtrain bench ep");
  const std::unique_ptr<Communicator> world = WorldCommunicator();
  return RunAbortingJobOnError(*world, [&] {
    TrainConfig c;
    c.model = ModelConfig::Preset(args.Get("model", "tiny"));
    c.recipe = Recipe::Make(RecipeOptions{});
    c.steps = ParseInt(args.Get("steps", "20"), "--steps", 1, 100000);
    c.micro_batches = c.model.d_model >= 512 ? 2 : 4;
    c.eval_every = 0;
    c.eval_batches = 1;
    c.threads = static_cast<int>(ParseInt(args.Get("threads", "1"), "--threads", 1, 1024));
    c.world = world.get();
    const Corpus corpus = SplitCorpus(BuiltinCorpus(), c.model.context, "the built-in corpus");
    const std::vector<EpBenchResult> results = RunEpBench(c, corpus);
    if (world->rank() == 0) {
      for (size_t i = 0; i < results.size(); ++i) std::cout << ToJson(results, i) << "\n";
      std::cout << EpBenchTable(results) << std::flush;
    }
    return 0;
  });
}

// The runs of mxtrain train stepped side by side (step_bench.h).
int RunTrainBench(const ParsedArgs& args) {
  const std::vector<RunSpec> specs = RunSpecs(args);
  const TrainConfig base = BaseTrainConfig(args, nullptr);
  const int64_t rounds = ParseInt(args.Get("rounds", "40"), "--rounds", 1, 1000000);
  const int64_t warmup = ParseInt(args.Get("warmup-rounds", "5"), "--warmup-rounds", 0, 1000000);
  std::vector<TrainConfig> runs;
  for (const RunSpec& s : specs) {
    TrainConfig c = base;
    c.name = s.name;
    c.recipe = s.recipe;
    runs.push_back(std::move(c));
  }
  const Corpus corpus = SplitCorpus(BuiltinCorpus(), base.model.context, "the built-in corpus");
  const std::vector<StepBenchResult> results = RunStepBench(runs, corpus, warmup, rounds);
  for (size_t i = 0; i < results.size(); ++i) std::cout << ToJson(results, i, rounds) << "\n";
  std::cout << std::flush;
  return 0;
}

// Each benchmark and its flags.
struct BenchCommand {
  std::string_view name;
  std::vector<std::string_view> flags;
  int (*run)(const ParsedArgs& args);
};
const BenchCommand kBenchCommands[] = {
    {"quantize",
     {"reps", "threads", "dtype", "case", "shape", "simd", "code-stores"},
     RunQuantizeBench},
    {"gemm", {"reps", "threads", "case", "path", "baseline"}, RunGemmBench},
    {"ops", {"reps", "threads", "case", "tokens", "hidden"}, RunOpsBench},
    {"ep", {"steps", "model", "threads"}, RunEpBenchCommand},
    {"train",
     {"runs", "recipe", "scale", "model", "threads", "rounds", "warmup-rounds"},
     RunTrainBench},
};

}  // namespace

int RunBench(const std::vector<std::string>& argv) {
  std::vector<FlagSpec> flags = {{"list", false}};
  for (const BenchCommand& b : kBenchCommands) {
    for (std::string_view f : b.flags) {
      if (std::none_of(flags.begin(), flags.end(),
                       [&](const FlagSpec& s) { return s.name == f; })) {
        flags.push_back({f});
      }
    }
  }
  const ParsedArgs args = ParsedArgs::Parse(argv, "mxtrain bench", flags);
  if (args.help()) {
    std::cout << kUsage << "\n";
    return 0;
  }
  if (args.Has("list")) {
    PrintList();
    return 0;
  }
  MXTRAIN_CHECK(args.positional().size() == 1, kUsage);
  // bench train steps as mxtrain train does, OpenMP's waiting included (the other
  // benchmarks keep libgomp's defaults, whatever their flag values say).
  if (args.positional()[0] == "train") ExecWithTrainingWaitPolicy({"bench"}, argv);
  for (const BenchCommand& b : kBenchCommands) {
    if (args.positional()[0] != b.name) continue;
    // A flag of another benchmark is an error here, not ignored.
    for (const FlagSpec& f : flags) {
      MXTRAIN_CHECK(f.name == "list" || !args.Has(f.name) ||
                        std::find(b.flags.begin(), b.flags.end(), f.name) != b.flags.end(),
                    "--", f.name, " is not a flag of mxtrain bench ", b.name);
    }
    return b.run(args);
  }
  Fail(kUsage);
}

}  // namespace mxtrain::cli
