// `mxtrain train`: trains the MoE byte-level language model (mxtrain/train.h) in one or
// several precisions on the same data and seed, prints the side-by-side table and writes
// the run directory (mxtrain/train/train_report.h). Exit codes: 0 done, 2 bad input (nothing
// written), 3 the loss became NaN or Inf (the last checkpoint stays intact).
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <optional>
#include <string>
#include <vector>

#include "args.h"
#include "commands.h"
#include "mxtrain/comm.h"
#include "mxtrain/error.h"
#include "mxtrain/gemm.h"
#include "mxtrain/hp_gemm.h"
#include "mxtrain/simd.h"
#include "mxtrain/train/data.h"
#include "mxtrain/train/train.h"
#include "mxtrain/train/train_report.h"
#include "run_specs.h"

namespace mxtrain::cli {
namespace {

constexpr char kUsage[] =
    R"(usage: mxtrain train [--runs LIST | --precision fp32|bf16|mxfp8] [--recipe e4m3|hybrid]
         [--scale rceil|floor|ceil|even] [--input-policy quantized|deferred|auto]
         [--weight-policy quantized|deferred|auto] [--reuse-weights]
         [--hp-gemms fprop,dgrad,wgrad] [--hp-precision bf16|fp32] [--steps N]
         [--data FILE] [--out DIR] [--seed S] [--threads T] [--checkpoint-every N]
         [--resume DIR] [--model tiny|small] [--d-model D] [--layers L] [--heads H]
         [--experts E] [--top-k K] [--d-ff F] [--context T] [--batch B]
         [--micro-batches M] [--lr LR] [--warmup N] [--eval-every N] [--stop-after N]
         [--expert-parallel N] [--expert-wire mxfp8|hp]
  Trains a byte-level decoder-only transformer with mixture-of-experts blocks (every
  matmul through the MXFP8 Linear / GroupedLinear ops) and prints, per run, the final
  train and validation loss, the gap to bf16, tokens/s, step time, peak memory and
  saved-for-backward bytes. With no arguments: runs bf16, mxfp8-quantized,
  mxfp8-deferred and mxfp8-auto on the built-in corpus with the same seed.
  --runs LIST        any of bf16, fp32, mxfp8-quantized, mxfp8-deferred, mxfp8-auto
                     (comma-separated; default bf16,mxfp8-quantized,mxfp8-deferred,
                     mxfp8-auto). The mxfp8 runs set both save policies as named and
                     reuse quantized weights across the micro-batches of a step;
                     --recipe and --scale apply to them.
  --precision P      one run in precision P instead; for mxfp8 the recipe, scale rule,
                     policies (default quantized; auto: per layer, what holds less),
                     --reuse-weights and --hp-gemms apply, and are errors with fp32 or bf16
  --hp-gemms LIST    with --precision mxfp8: these GEMMs in high precision (bf16, or
                     --hp-precision fp32) instead of MXFP8; a role an HP GEMM reads
                     takes no policy
  --model NAME       tiny (default: the sizes below) or small (d_model 512, 8 heads,
                     d_ff 1024, context 256; 2 micro-batches of 16): the size flags
                     below override a preset's
  --steps N          optimizer steps per run (default 150)
  --data FILE        train on FILE's bytes (last tenth for validation) instead of the
                     built-in corpus
  --out DIR          the run directory (default: a new folder under runs/); holds
                     summary.json, plot.svg and per run NAME/metrics.csv and
                     NAME/checkpoint.safetensors; refused if it already holds a
                     run (summary.json) unless resuming
  --seed S           initial weights and batch sampling (default 1)
  --threads T        OpenMP threads (default: all cores)
  --checkpoint-every N  also checkpoint every N steps (always at the end)
  --resume DIR       continue the runs from DIR/NAME/checkpoint.safetensors (the same
                     model flags); writes into DIR unless --out is given
  --stop-after N     stop each run after step N of the --steps schedule, checkpointing
                     there (continue later with --resume)
  model (tiny): --d-model 128 --layers 2 --heads 4 --experts 4 --top-k 2 --d-ff 256
                --context 64
  batch: --batch 16 sequences per micro-batch, --micro-batches 4 (gradient accumulation)
  optimizer: --lr 3e-3 peak (cosine to a tenth), --warmup 20 steps; --eval-every 50
  several processes (mpirun -np W mxtrain train ...; docs/training.md): each rank trains
  on its own batches and the gradients are summed over the ranks (data parallelism)
  --expert-parallel N  shard the experts over groups of N ranks (N divides W and the
                     experts); tokens travel to their experts and back (default 1)
  --expert-wire W    how: mxfp8 (default with N > 1: dispatch forward and combine
                     backward as MXFP8 codes + scales, the rest bf16) or hp (all bf16);
                     bf16 and fp32 runs always send their own precision. mxfp8 with
                     N = 1 exchanges within a group of one: the reference N > 1 repeats
                     bit for bit (with --micro-batches 1). Checkpoints are per rank:
                     NAME/checkpoint.rank<r>-of-<W>.safetensors; rank 0 writes the rest
Progress goes to stderr (a bar when it is a terminal). Exit codes: 0 done, 2 bad input
(one line, nothing written), 3 the loss became NaN or Inf (message names the step).)";

std::string Duration(double seconds) {
  const int s = static_cast<int>(std::lround(std::max(0.0, seconds)));
  char buf[32];
  if (s >= 60) {
    std::snprintf(buf, sizeof buf, "%dm%02ds", s / 60, s % 60);
  } else {
    std::snprintf(buf, sizeof buf, "%ds", s);
  }
  return buf;
}

// Progress on stderr: a bar redrawn in place on a terminal, else a plain line every tenth
// of a run.
class Progress {
 public:
  Progress(int64_t total_steps) : total_(total_steps), tty_(isatty(2) != 0) {}
  void Begin(const std::string& run, int64_t steps) {
    run_ = run;
    run_steps_ = steps;
  }
  void Step(const StepMetrics& m) {
    ++done_;
    const double elapsed =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
    const double eta =
        done_ > 0 ? elapsed / static_cast<double>(done_) * static_cast<double>(total_ - done_) : 0;
    if (tty_) {
      constexpr int kWidth = 30;
      const int filled = static_cast<int>(kWidth * done_ / std::max<int64_t>(total_, 1));
      std::fprintf(stderr, "\r%-16s [%s%s] step %lld/%lld  loss %.4f  ETA %s   ", run_.c_str(),
                   std::string(filled, '#').c_str(), std::string(kWidth - filled, '.').c_str(),
                   static_cast<long long>(m.step), static_cast<long long>(run_steps_), m.train_loss,
                   Duration(eta).c_str());
      if (done_ == total_) std::fputs("\n", stderr);
    } else if (m.step % std::max<int64_t>(1, run_steps_ / 10) == 0 || m.step == run_steps_) {
      std::fprintf(stderr, "mxtrain train: %s step %lld/%lld loss %.4f%s (%.0f ms/step, ETA %s)\n",
                   run_.c_str(), static_cast<long long>(m.step), static_cast<long long>(run_steps_),
                   m.train_loss, std::isnan(m.val_loss) ? "" : StrCat(" val ", m.val_loss).c_str(),
                   m.step_ms, Duration(eta).c_str());
    }
    std::fflush(stderr);
  }
  // Ends a bar's line (before an error message).
  void EndLine() {
    if (tty_ && done_ > 0 && done_ < total_) std::fputs("\n", stderr);
  }

 private:
  int64_t total_, done_ = 0, run_steps_ = 0;
  bool tty_;
  std::string run_;
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
};

// The job's processes: null in a process mpirun did not start (nothing is initialized).
std::unique_ptr<Communicator> World() {
  return LaunchedWorldSize() > 1 ? WorldCommunicator() : nullptr;
}

int Train(const ParsedArgs& args, Communicator* world) {
  args.ExpectPositional(0, "no positional arguments");
  const std::vector<RunSpec> specs = RunSpecs(args);
  const int world_size = world != nullptr ? world->size() : 1;
  const int rank = world != nullptr ? world->rank() : 0;
  const bool lead = rank == 0;  // writes the reports and prints the progress

  const TrainConfig base = BaseTrainConfig(args, world);
  const ModelConfig& m = base.model;
  std::optional<ExpertWire> wire;
  if (args.Has("expert-wire")) {
    wire = ParseExpertWire(args.Get("expert-wire"));
    MXTRAIN_CHECK(wire != ExpertWire::kLocal, "--expert-wire is mxfp8 or hp, not local");
  }

  const Corpus corpus = args.Has("data")
                            ? LoadCorpusFile(args.Get("data"), m.context)
                            : SplitCorpus(BuiltinCorpus(), m.context, "the built-in corpus");

  // Every check before anything is written: the checkpoints to resume from, the output.
  const std::string resume = args.Get("resume");
  std::vector<TrainConfig> configs;
  int64_t resumed_steps = 0;
  for (const RunSpec& s : specs) {
    TrainConfig c = base;
    c.name = s.name;
    c.recipe = s.recipe;
    // MXFP8 runs exchange as the flag says (mxfp8 by default with experts on several
    // ranks); bf16 and fp32 runs in their own precision.
    if (wire || c.expert_parallel > 1) {
      const ExpertWire w = wire.value_or(ExpertWire::kMxfp8);
      c.wire = w == ExpertWire::kMxfp8 && !c.recipe.mxfp8() ? ExpertWire::kHighPrecision : w;
    }
    if (!resume.empty()) {
      c.resume_path = CheckpointPath(resume, s.name, rank, world_size);
      resumed_steps += CheckCheckpoint(c.resume_path, c, corpus);
    }
    configs.push_back(std::move(c));
  }
  std::string out = args.Get("out", resume);
  if (!lead) {
    // Rank 0 checks and makes the run directory; the others learn its name.
    out = AllGatherStrings(*world, "")[0];
    MXTRAIN_CHECK(!out.empty(), "rank 0 could not make the run directory");
  } else if (!out.empty()) {
    std::error_code ec;
    MXTRAIN_CHECK(!std::filesystem::exists(out, ec) || std::filesystem::is_directory(out, ec),
                  "--out '", out, "' exists and is not a directory");
    // A new run over an earlier one would leave the earlier runs' files beside the new
    // summary; continuing it is --resume.
    MXTRAIN_CHECK(!resume.empty() || !std::filesystem::exists(out + "/summary.json", ec), "--out '",
                  out,
                  "' already holds a run (summary.json); choose another "
                  "directory, or continue it with --resume");
    std::filesystem::create_directories(out, ec);
    MXTRAIN_CHECK(!ec, "cannot create directory '", out, "': ", ec.message());
  } else {
    out = MakeRunDirectory("runs");
  }
  if (lead && world != nullptr) AllGatherStrings(*world, out);

  // One rank reports: the others train quietly.
  if (!lead && std::freopen("/dev/null", "w", stdout) == nullptr)
    Fail("cannot silence rank ", rank);
  std::printf(
      "mxtrain train: %lld-layer MoE transformer (%s), %s: %zu train / %zu val bytes, "
      "unigram entropy %.3f nats\n",
      static_cast<long long>(m.n_layers), m.ToString().c_str(), corpus.source.c_str(),
      corpus.train.size(), corpus.val.size(), UnigramEntropy(corpus.val));
  std::printf("%lld steps x %lld micro-batches x %lld sequences, seed %llu\n",
              static_cast<long long>(base.steps), static_cast<long long>(base.micro_batches),
              static_cast<long long>(base.batch_size), static_cast<unsigned long long>(base.seed));
  if (world != nullptr) {
    std::printf("%d processes (%s), expert parallelism %lld: %lld of %lld experts per rank\n",
                world_size, world->name().c_str(), static_cast<long long>(base.expert_parallel),
                static_cast<long long>(m.n_experts / base.expert_parallel),
                static_cast<long long>(m.n_experts));
  }
  // The routes this CPU gives each precision (the same choice for the whole process).
  std::printf("GEMMs: mxfp8 %s (SIMD %s), bf16 %s, fp32 %s\n", CurrentGemmPath().c_str(),
              CurrentSimdTarget().c_str(), HpGemmRoute(DType::kBF16).c_str(),
              HpGemmRoute(DType::kF32).c_str());
  std::fflush(stdout);

  const int64_t run_steps =
      base.stop_after > 0 ? std::min(base.stop_after, base.steps) : base.steps;
  Progress progress(run_steps * static_cast<int64_t>(configs.size()) - resumed_steps);
  std::vector<TrainResult> results;
  for (TrainConfig& c : configs) {
    RunSubdirectory(out, c.name);
    c.checkpoint_path = CheckpointPath(out, c.name, rank, world_size);
    progress.Begin(c.name, run_steps);
    if (lead) c.on_step = [&progress](const StepMetrics& s) { progress.Step(s); };
    TrainResult r;
    try {
      r = mxtrain::Train(c, corpus);
    } catch (const NonFiniteLossError& e) {
      progress.EndLine();
      PrintError(StrCat(c.name, ": ", e.what()));
      return 3;
    }
    if (lead) WriteRunMetrics(out, r);
    results.push_back(std::move(r));
  }
  if (!lead) return 0;
  WriteJobSummary(out, results);
  std::fputs(ComparisonTable(results).c_str(), stdout);
  double seconds = 0;
  for (const TrainResult& r : results) seconds += r.seconds;
  for (const TrainResult& r : results) {
    if (r.world_size == 1 && r.wire == ExpertWire::kLocal) continue;
    std::printf("%s: expert wire %s, %.3f MB between ranks per step\n", r.name.c_str(),
                std::string(Name(r.wire)).c_str(),
                static_cast<double>(r.wire_bytes_per_step) / 1e6);
  }
  std::printf(
      "%.1f s in all; wrote %s (summary.json, plot.svg, per run metrics.csv and "
      "checkpoint%s)\n",
      seconds, out.c_str(), world_size > 1 ? "s per rank" : ".safetensors");
  return 0;
}

}  // namespace

int RunTrain(const std::vector<std::string>& argv) {
  ExecWithTrainingWaitPolicy({"train"}, argv);
  return RunReportingErrors([&] {
    const ParsedArgs args = ParsedArgs::Parse(argv, "mxtrain train",
                                              {{"runs"},
                                               {"precision"},
                                               {"recipe"},
                                               {"scale"},
                                               {"input-policy"},
                                               {"weight-policy"},
                                               {"reuse-weights", false},
                                               {"hp-gemms"},
                                               {"hp-precision"},
                                               {"model"},
                                               {"steps"},
                                               {"data"},
                                               {"out"},
                                               {"seed"},
                                               {"threads"},
                                               {"checkpoint-every"},
                                               {"resume"},
                                               {"d-model"},
                                               {"layers"},
                                               {"heads"},
                                               {"experts"},
                                               {"top-k"},
                                               {"d-ff"},
                                               {"context"},
                                               {"batch"},
                                               {"micro-batches"},
                                               {"lr"},
                                               {"warmup"},
                                               {"eval-every"},
                                               {"stop-after"},
                                               {"expert-parallel"},
                                               {"expert-wire"}});
    if (args.help()) {
      std::cout << kUsage << "\n";
      return 0;
    }
    const std::unique_ptr<Communicator> world = World();
    if (world == nullptr) return Train(args, nullptr);
    // Several processes: a rank that fails ends the job, so that no rank waits for it in a
    // collective; an error every rank meets before training (bad flags) is printed by each.
    return RunAbortingJobOnError(*world, [&] { return Train(args, world.get()); });
  });
}

}  // namespace mxtrain::cli
