// The runs and the training configuration of the training commands' flags (run_specs.h).
#include "run_specs.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <optional>

#include "mxtrain/error.h"
#include "mxtrain/gemm.h"

namespace mxtrain::cli {

std::vector<RunSpec> RunSpecs(const ParsedArgs& args) {
  std::optional<RecipeFormats> formats;
  std::optional<ScaleRule> scale;
  if (args.Has("recipe")) formats = ParseRecipeFormats(args.Get("recipe"));
  if (args.Has("scale")) scale = ParseScaleRule(args.Get("scale"));
  std::vector<RunSpec> specs;
  if (args.Has("precision")) {
    MXTRAIN_CHECK(!args.Has("runs"), "--precision and --runs cannot be combined");
    RecipeOptions o;
    o.precision = ParsePrecision(args.Get("precision"));
    o.formats = formats;
    o.scale = scale;
    if (args.Has("input-policy")) o.input_policy = ParseSavePolicy(args.Get("input-policy"));
    if (args.Has("weight-policy")) o.weight_policy = ParseSavePolicy(args.Get("weight-policy"));
    o.reuse_quantized_weights = args.Has("reuse-weights");
    if (args.Has("hp-gemms")) o.hp_gemms = ParseGemmSet(args.Get("hp-gemms"));
    if (args.Has("hp-precision")) o.hp_precision = ParsePrecision(args.Get("hp-precision"));
    const Recipe r = Recipe::Make(o);  // rejects MXFP8 options with fp32 / bf16
    std::string name(Name(r.precision()));
    if (r.mxfp8()) {
      name = r.input_policy() == r.weight_policy()
                 ? StrCat("mxfp8-", Name(r.input_policy()))
                 : StrCat("mxfp8-in-", Name(r.input_policy()), "-w-", Name(r.weight_policy()));
      if (!r.hp_gemms().empty()) {
        std::string hp = Name(r.hp_gemms());
        std::replace(hp.begin(), hp.end(), ',', '-');
        name = StrCat("mxfp8-hp-", hp, "-", Name(r.hp_precision()));
      }
    }
    specs.push_back({name, r});
    return specs;
  }
  for (const char* flag : {"input-policy", "weight-policy", "hp-gemms", "hp-precision"}) {
    MXTRAIN_CHECK(!args.Has(flag), "--", flag,
                  " needs --precision mxfp8 (the --runs presets set the policies)");
  }
  const std::string list = args.Get("runs", "bf16,mxfp8-quantized,mxfp8-deferred,mxfp8-auto");
  bool any_mx = false;
  for (std::string_view entry : SplitList(list, "--runs")) {
    const std::string name(entry);
    for (const RunSpec& s : specs) {
      MXTRAIN_CHECK(s.name != name, "--runs names '", name, "' twice");
    }
    RecipeOptions o;
    if (name == "bf16" || name == "fp32") {
      o.precision = ParsePrecision(name);
    } else if (name == "mxfp8-quantized" || name == "mxfp8-deferred" || name == "mxfp8-auto") {
      const SavePolicy p = ParseSavePolicy(name.substr(6));
      o.precision = Precision::kMxfp8;
      o.formats = formats;
      o.scale = scale;
      o.input_policy = p;
      o.weight_policy = p;
      o.reuse_quantized_weights = true;
      any_mx = true;
    } else {
      Fail("--runs entry '", name,
           "' is not one of bf16, fp32, mxfp8-quantized, mxfp8-deferred, mxfp8-auto");
    }
    specs.push_back({name, Recipe::Make(o)});
  }
  if (!any_mx) {
    for (const char* flag : {"recipe", "scale", "reuse-weights"}) {
      MXTRAIN_CHECK(!args.Has(flag), "--", flag, " is only valid when MXFP8 is enabled (--runs '",
                    list, "' has no mxfp8 run)");
    }
  }
  return specs;
}

TrainConfig BaseTrainConfig(const ParsedArgs& args, Communicator* world) {
  TrainConfig base;
  ModelConfig& m = base.model;
  const std::string preset = args.Get("model", "tiny");
  m = ModelConfig::Preset(preset);
  const auto size = [&](const char* flag, int64_t preset_value, int64_t max) {
    return ParseInt(args.Get(flag, std::to_string(preset_value)), StrCat("--", flag), 1, max);
  };
  m.d_model = size("d-model", m.d_model, 8192);
  m.n_layers = size("layers", m.n_layers, 64);
  m.n_heads = size("heads", m.n_heads, 256);
  m.n_experts = size("experts", m.n_experts, 256);
  m.top_k = size("top-k", m.top_k, 256);
  m.d_ff = size("d-ff", m.d_ff, 65536);
  m.context = size("context", m.context, 4096);
  m.Validate();
  const bool small = preset == "small";
  base.steps = ParseInt(args.Get("steps", "150"), "--steps", 1, 10000000);
  base.batch_size = size("batch", 16, 65536);
  base.micro_batches = size("micro-batches", small ? 2 : 4, 1024);
  base.seed = static_cast<uint64_t>(
      ParseInt(args.Get("seed", "1"), "--seed", 0, std::numeric_limits<int64_t>::max()));
  base.threads = static_cast<int>(ParseInt(args.Get("threads", "0"), "--threads", 0, 1024));
  base.checkpoint_every =
      ParseInt(args.Get("checkpoint-every", "0"), "--checkpoint-every", 0, 10000000);
  base.stop_after = ParseInt(args.Get("stop-after", "0"), "--stop-after", 0, 10000000);
  base.eval_every = ParseInt(args.Get("eval-every", "50"), "--eval-every", 0, 10000000);
  base.lr.peak_lr = ParsePositiveDouble(args.Get("lr", "3e-3"), "--lr");
  base.lr.min_lr = base.lr.peak_lr / 10;
  base.lr.warmup_steps = ParseInt(args.Get("warmup", "20"), "--warmup", 0, 10000000);
  base.world = world;
  base.expert_parallel = ParseInt(args.Get("expert-parallel", "1"), "--expert-parallel", 1, 4096);
  return base;
}

void ExecWithTrainingWaitPolicy(const std::vector<std::string>& command,
                                const std::vector<std::string>& argv) {
  // OpenMP threads that spin long between parallel regions (libgomp's default) starve the
  // training loop's serial parts whenever the cores are shared: measured on the 2-core VM
  // under load, 1.3 to 9 s per step against 0.3 s with passive waiting. Purely passive
  // waiting costs a futex wake per region instead, and a step has thousands of small
  // ones: on a quiet machine an mxfp8 step took 144 ms against 64 with a short spin
  // (20000 iterations) before sleeping, which under load costs 1.2x over passive. libgomp
  // reads both once, when it loads, so the command runs itself again with them set; a
  // user's own setting of either is kept.
  if (std::getenv("OMP_WAIT_POLICY") == nullptr && std::getenv("GOMP_SPINCOUNT") == nullptr &&
      setenv("OMP_WAIT_POLICY", "PASSIVE", 1) == 0 && setenv("GOMP_SPINCOUNT", "20000", 1) == 0) {
    std::vector<std::string> args = {"mxtrain"};
    args.insert(args.end(), command.begin(), command.end());
    args.insert(args.end(), argv.begin(), argv.end());
    std::vector<char*> cargs;
    for (std::string& a : args) cargs.push_back(a.data());
    cargs.push_back(nullptr);
    std::fflush(stdout);
    execv("/proc/self/exe", cargs.data());  // returns only on failure: carry on as we are
  }
}

}  // namespace mxtrain::cli
