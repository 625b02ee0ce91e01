// The training loop (train.h).
#include "mxtrain/train/train.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <limits>
#include <sstream>

#include "mxtrain/memory.h"
#include "mxtrain/train/step_bench.h"
#include "train/checkpoint.h"

namespace mxtrain {

namespace {

using Clock = std::chrono::steady_clock;

double Ms(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

// The upper median of a non-empty list (the middle one of an odd count).
template <typename T>
T Median(std::vector<T> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

void Validate(const TrainConfig& c) {
  c.model.Validate();
  MXTRAIN_CHECK(c.steps >= 1, "train: steps must be >= 1, got ", c.steps);
  MXTRAIN_CHECK(c.micro_batches >= 1, "train: micro_batches must be >= 1, got ", c.micro_batches);
  MXTRAIN_CHECK(c.batch_size >= 1, "train: batch_size must be >= 1, got ", c.batch_size);
  MXTRAIN_CHECK(c.eval_batches >= 1, "train: eval_batches must be >= 1, got ", c.eval_batches);
  MXTRAIN_CHECK(c.eval_every >= 0 && c.checkpoint_every >= 0,
                "train: eval_every and checkpoint_every must be >= 0");
  MXTRAIN_CHECK(std::isfinite(c.lr.peak_lr) && c.lr.peak_lr > 0 && std::isfinite(c.lr.min_lr) &&
                    c.lr.min_lr >= 0,
                "train: learning rates must be finite and positive, got ", c.lr.peak_lr, " and ",
                c.lr.min_lr);
  MXTRAIN_CHECK(c.lr.warmup_steps >= 0, "train: warmup_steps must be >= 0");
  MXTRAIN_CHECK(c.stop_after >= 0, "train: stop_after must be >= 0, got ", c.stop_after);
  MXTRAIN_CHECK(c.threads >= 0, "train: threads must be >= 0, got ", c.threads);
  MXTRAIN_CHECK(c.checkpoint_every == 0 || !c.checkpoint_path.empty(),
                "train: checkpoint_every needs a checkpoint path");
}

// ---- several processes -------------------------------------------------------------------

// The processes of a run and the groups its parameters are summed over.
struct Layout {
  Communicator* world = nullptr;  // null: one process
  int size = 1, rank = 0;
  std::unique_ptr<Communicator> ep_group;   // the ranks that share one copy of the experts
  std::unique_ptr<Communicator> expert_dp;  // the ranks that hold the same experts
  // Whether anything crosses processes or a wire: the run's layout goes into checkpoints.
  bool parallel() const { return size > 1 || ep_group != nullptr; }
  ExpertParallel Experts(const TrainConfig& c) const {
    return ExpertParallel{c.wire == ExpertWire::kLocal ? nullptr : ep_group.get(), c.wire};
  }
  std::string Describe(const TrainConfig& c) const {
    return StrCat("world=", size, " expert_parallel=", c.expert_parallel, " wire=", Name(c.wire));
  }
};

void ValidateLayout(const TrainConfig& c, int world_size) {
  MXTRAIN_CHECK(c.expert_parallel >= 1, "train: expert_parallel must be >= 1, got ",
                c.expert_parallel);
  MXTRAIN_CHECK(world_size % c.expert_parallel == 0, "train: expert parallelism ",
                c.expert_parallel, " does not divide the job's ", world_size, " process",
                world_size == 1 ? "" : "es",
                HaveMpi() ? StrCat(" (start a multiple of ", c.expert_parallel, " with mpirun -np)")
                          : std::string(" (and this mxtrain was built without MPI: configure "
                                        "with -DMXTRAIN_WITH_MPI=ON)"));
  MXTRAIN_CHECK(c.model.n_experts % c.expert_parallel == 0, "train: ", c.model.n_experts,
                " experts do not split over ", c.expert_parallel, " expert-parallel ranks");
  MXTRAIN_CHECK(c.expert_parallel == 1 || c.wire != ExpertWire::kLocal, "train: experts on ",
                c.expert_parallel, " ranks need an exchange (wire mxfp8 or hp), not local");
  MXTRAIN_CHECK(c.wire != ExpertWire::kMxfp8 || c.recipe.mxfp8(), "train: the MXFP8 expert wire ",
                "needs an MXFP8 recipe; run '", c.name, "' is ", Name(c.recipe.precision()),
                " (use wire hp)");
}

// Collective over the world: the groups of Megatron's EP inside DP (consecutive ranks share
// the experts).
Layout MakeLayout(const TrainConfig& c) {
  Layout l;
  l.world = c.world != nullptr && c.world->size() > 1 ? c.world : nullptr;
  l.size = l.world != nullptr ? l.world->size() : 1;
  l.rank = l.world != nullptr ? l.world->rank() : 0;
  ValidateLayout(c, l.size);
  if (l.world != nullptr) {
    const int ep = static_cast<int>(c.expert_parallel);
    l.ep_group = l.world->Split(l.rank / ep, l.rank);
    l.expert_dp = l.world->Split(l.rank % ep, l.rank);
  } else if (c.wire != ExpertWire::kLocal) {
    l.ep_group = MakeSingleProcessCommunicator();
  }
  return l;
}

// Every setting that must be the same on every rank, as "key=value" lines.
std::string SettingsLines(const TrainConfig& c, const std::string& data) {
  std::ostringstream o;
  o << "run=" << c.name << "\nmodel=" << c.model.ToString() << "\nrecipe=" << c.recipe.ToString()
    << "\nsteps=" << c.steps << "\nmicro_batches=" << c.micro_batches
    << "\nbatch_size=" << c.batch_size << "\nlr=" << c.lr.peak_lr << "," << c.lr.min_lr << ","
    << c.lr.warmup_steps << "\nclip_norm=" << c.clip_norm << "\nseed=" << c.seed
    << "\neval_every=" << c.eval_every << "\neval_batches=" << c.eval_batches
    << "\ncheckpoint_every=" << c.checkpoint_every << "\nstop_after=" << c.stop_after
    << "\nresume=" << (c.resume_path.empty() ? "no" : "yes")
    << "\nexpert_parallel=" << c.expert_parallel << "\nwire=" << Name(c.wire) << "\ndata=" << data;
  return o.str();
}

// Collective: an Error on every rank, naming the first setting that differs from rank 0's.
void CheckSameSettings(Communicator& w, const std::string& lines) {
  const std::vector<std::string> all = AllGatherStrings(w, lines);
  for (int r = 1; r < w.size(); ++r) {
    if (all[r] == all[0]) continue;
    std::istringstream a(all[0]), b(all[r]);
    std::string la, lb;
    while (std::getline(a, la) && std::getline(b, lb) && la == lb) {
    }
    Fail("train: rank ", r, " was started with ", lb.empty() ? "other settings" : lb,
         ", rank 0 with ", la.empty() ? "other settings" : la,
         "; every rank must get the same flags");
  }
}

// Collective: the sum over ranks of each value, in rank order (one process: the values).
std::vector<double> SumOverRanks(Communicator* w, std::vector<double> v) {
  if (w == nullptr) return v;
  const std::vector<uint8_t> all = w->AllGather(std::span<const uint8_t>(
      reinterpret_cast<const uint8_t*>(v.data()), v.size() * sizeof(double)));
  std::vector<double> each(static_cast<size_t>(w->size()) * v.size());
  std::memcpy(each.data(), all.data(), all.size());
  for (size_t i = 0; i < v.size(); ++i) {
    double sum = 0;
    for (int r = 0; r < w->size(); ++r) sum += each[r * v.size() + i];
    v[i] = sum;
  }
  return v;
}

// Collective: the mean over ranks of each value.
std::vector<double> MeanOverRanks(Communicator* w, std::vector<double> v) {
  if (w == nullptr) return v;
  v = SumOverRanks(w, std::move(v));
  for (double& x : v) x /= static_cast<double>(w->size());
  return v;
}

// Collective: every gradient summed over the ranks that hold the same parameter.
void SumGradients(Model& model, const Layout& l) {
  const auto& params = model.parameters();
  for (size_t i = 0; i < params.size(); ++i) {
    Communicator* over = model.is_expert_parameter(i) ? l.expert_dp.get() : l.world;
    if (over == nullptr || over->size() == 1) continue;
    Tensor& g = params[i]->main_grad();
    over->AllReduceSum(std::span<float>(g.mutable_data<float>(), g.NumElements()));
  }
}

// Collective: the global gradient norm of a run over several processes, summed in one
// order whatever the layout: parameter by parameter, an expert tensor expert by expert
// (each expert's sum of squares in double, gathered over the expert-parallel group), then
// the grads scaled as ClipGradNorm scales them.
double ClipGradNormOverRanks(Model& model, const Layout& l, double max_norm) {
  const auto& params = model.parameters();
  double ss = 0;
  for (size_t i = 0; i < params.size(); ++i) {
    const Tensor& g = params[i]->main_grad();
    const float* v = g.const_data<float>();
    const bool expert = model.is_expert_parameter(i);
    const int64_t pieces = expert ? model.local_experts() : 1;
    const int64_t per = g.NumElements() / pieces;
    std::vector<double> part(static_cast<size_t>(pieces), 0.0);
    for (int64_t p = 0; p < pieces; ++p) {
      for (int64_t j = 0; j < per; ++j)
        part[p] += static_cast<double>(v[p * per + j]) * v[p * per + j];
    }
    if (expert && model.expert_parallel().group != nullptr &&
        model.expert_parallel().group->size() > 1) {
      const std::vector<uint8_t> all =
          model.expert_parallel().group->AllGather(std::span<const uint8_t>(
              reinterpret_cast<const uint8_t*>(part.data()), part.size() * sizeof(double)));
      part.resize(all.size() / sizeof(double));
      std::memcpy(part.data(), all.data(), all.size());
    }
    for (double x : part) ss += x;
  }
  const double norm = std::sqrt(ss);
  ClipGradsToNorm(params, norm, max_norm);
  return norm;
}

double EvalLoss(Model& model, std::span<const uint8_t> data, const TrainConfig& c) {
  double sum = 0;
  for (int64_t i = 0; i < c.eval_batches; ++i) {
    const Batch b = EvalBatch(data, c.model.context, c.batch_size, i, c.eval_batches);
    sum += model.Evaluate(b.ids, b.targets, b.batch);
  }
  model.cache().Clear();  // evaluation's entries must not change the next step's counts
  return sum / static_cast<double>(c.eval_batches);
}

// The settings besides the model that a checkpoint records (the model's are added by
// WriteCheckpoint).
// FNV-1a over both splits: which data a checkpoint was trained on.
std::string DataFingerprint(const Corpus& corpus) {
  uint64_t h = 0xCBF29CE484222325ull;
  for (const std::vector<uint8_t>* part : {&corpus.train, &corpus.val}) {
    for (uint8_t b : *part) h = (h ^ b) * 0x100000001B3ull;
    h = (h ^ 0xFF) * 0x100000001B3ull;  // the split point counts too
  }
  return StrCat(corpus.train.size(), "+", corpus.val.size(), ":", std::hex, h);
}

// What a resumed run must share with the checkpoint's run to repeat it bit for bit
// (besides the model, which ReadCheckpoint checks): the batches' source and sampling.
// A run over several processes adds its layout and the rank (one process: none).
std::vector<std::pair<std::string, std::string>> ResumeKeys(const TrainConfig& c,
                                                            const Corpus& corpus,
                                                            const Layout& layout) {
  std::vector<std::pair<std::string, std::string>> keys = {
      {"run.seed", std::to_string(c.seed)},
      {"run.batch_size", std::to_string(c.batch_size)},
      {"run.micro_batches", std::to_string(c.micro_batches)},
      {"data.fingerprint", DataFingerprint(corpus)}};
  if (layout.parallel()) {
    keys.push_back({"parallel.layout", layout.Describe(c)});
    keys.push_back({"parallel.rank", std::to_string(layout.rank)});
  }
  return keys;
}

// The settings besides the model that a checkpoint records (the model's are added by
// WriteCheckpoint).
std::map<std::string, std::string> RunMetadata(const TrainConfig& c, const Corpus& corpus,
                                               const Layout& layout,
                                               const std::vector<StepMetrics>& steps) {
  std::map<std::string, std::string> m = {{"run.name", c.name},
                                          {"run.recipe", c.recipe.ToString()},
                                          {"run.steps", std::to_string(c.steps)},
                                          {"data.source", corpus.source},
                                          {"metrics.csv", MetricsCsv(steps)}};
  for (auto& [k, v] : ResumeKeys(c, corpus, layout)) m[k] = v;
  return m;
}

void RestoreInto(Model& model, AdamW& opt, const internal::CheckpointState& s) {
  const auto& params = model.parameters();
  for (size_t i = 0; i < params.size(); ++i) {
    std::memcpy(params[i]->value().raw(), s.params[i].raw(), params[i]->value().NumBytes());
    params[i]->MarkModified();
  }
  opt.LoadState(s.step, s.exp_avg, s.exp_avg_sq);
  model.cache().Clear();
}

}  // namespace

NonFiniteLossError::NonFiniteLossError(int64_t step, double value, const char* what)
    : Error(StrCat("training diverged: the ", what, " is ", value, " at step ", step,
                   "; stopped before updating the weights (the last checkpoint, if any, is "
                   "intact)")),
      step_(step) {}

namespace {

void CheckResumable(const std::string& path, const internal::CheckpointState& s,
                    const TrainConfig& config, const Corpus& corpus, const Layout& layout) {
  MXTRAIN_CHECK(s.step >= 0 && s.step <= config.steps, "checkpoint '", path, "' is at step ",
                s.step, ", past the run's ", config.steps, " steps");
  if (!layout.parallel()) {
    auto it = s.metadata.find("parallel.layout");
    MXTRAIN_CHECK(it == s.metadata.end(), "checkpoint '", path, "' was written by a run with ",
                  it == s.metadata.end() ? std::string() : it->second,
                  ", this run is one process; resume it with the same layout");
  }
  for (const auto& [key, want] : ResumeKeys(config, corpus, layout)) {
    auto it = s.metadata.find(key);
    MXTRAIN_CHECK(it != s.metadata.end() && it->second == want, "checkpoint '", path,
                  "' was written by a run with ", key, " ",
                  it == s.metadata.end() ? std::string("(none)") : it->second, ", this run has ",
                  want, key == "data.fingerprint" ? " (other data)" : "",
                  "; resuming would not repeat it");
  }
}

}  // namespace

namespace {

// Collective: the step every rank resumes from, an Error on every rank when they differ.
int64_t AgreedStep(const Layout& l, int64_t step) {
  if (l.world == nullptr) return step;
  const std::vector<uint8_t> all = l.world->AllGather(
      std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(&step), sizeof step));
  std::vector<int64_t> steps(static_cast<size_t>(l.size));
  std::memcpy(steps.data(), all.data(), all.size());
  for (int r = 1; r < l.size; ++r) {
    MXTRAIN_CHECK(steps[r] == steps[0], "checkpoints: rank ", r, "'s is at step ", steps[r],
                  ", rank 0's at step ", steps[0], "; every rank must resume from the same step");
  }
  return step;
}

// The run's AdamW settings on the run's threads (unless they name their own).
AdamWOptions AdamOf(const TrainConfig& c) {
  AdamWOptions o = c.adam;
  if (o.threads == 0) o.threads = c.threads;
  return o;
}

// One optimizer step, the work a step's time measures: the micro-batches' forward and
// backward passes, the gradient sums over ranks, the clip and the AdamW update. The
// returned metrics hold the step, its losses, gradient norm and learning rate.
StepMetrics OptimizerStep(Model& model, AdamW& opt, const LrSchedule& schedule,
                          const TrainConfig& config, const Corpus& corpus, const Layout& layout,
                          int64_t step) {
  // The mean over the global batch: every rank's micro-batches.
  const float grad_scale = 1.0f / static_cast<float>(config.micro_batches * layout.size);
  StepMetrics m;
  m.step = step;
  for (int64_t micro = 0; micro < config.micro_batches; ++micro) {
    // Rank r draws the stream micro * W + r: one process draws what it always did.
    const Batch b = SampleBatch(corpus.train, config.model.context, config.batch_size, config.seed,
                                step, micro * layout.size + layout.rank);
    const LossParts parts = model.ForwardBackward(b.ids, b.targets, b.batch, grad_scale);
    m.train_loss += parts.loss;
    m.aux_loss += parts.aux;
  }
  m.train_loss /= static_cast<double>(config.micro_batches);
  m.aux_loss /= static_cast<double>(config.micro_batches);
  if (layout.world != nullptr) {
    const std::vector<double> mean = MeanOverRanks(layout.world, {m.train_loss, m.aux_loss});
    m.train_loss = mean[0];
    m.aux_loss = mean[1];
  }
  if (!std::isfinite(m.train_loss)) throw NonFiniteLossError(step, m.train_loss);
  SumGradients(model, layout);
  m.grad_norm = layout.world != nullptr ? ClipGradNormOverRanks(model, layout, config.clip_norm)
                                        : ClipGradNorm(model.parameters(), config.clip_norm);
  if (!std::isfinite(m.grad_norm)) throw NonFiniteLossError(step, m.grad_norm, "gradient norm");
  m.lr = schedule.At(step);
  opt.Step(m.lr, &model.cache());
  return m;
}

}  // namespace

int64_t CheckCheckpoint(const std::string& path, const TrainConfig& config, const Corpus& corpus) {
  const Layout layout = MakeLayout(config);
  // Every tensor, against a model of this configuration and rank (about a million
  // parameters: cheap).
  Model model(config.model, config.recipe, config.seed, config.threads, layout.Experts(config));
  std::string error;
  int64_t step = -1;
  try {
    const internal::CheckpointState s = internal::ReadCheckpoint(path, model);
    CheckResumable(path, s, config, corpus, layout);
    step = s.step;
  } catch (const Error& e) {
    if (layout.world == nullptr) throw;
    error = e.what();
  }
  // Every rank learns whether any failed, so that all stop with an error instead of some
  // waiting for the others in a collective.
  if (layout.world != nullptr) {
    const std::vector<std::string> errors = AllGatherStrings(*layout.world, error);
    for (int r = 0; r < layout.size; ++r) {
      MXTRAIN_CHECK(errors[r].empty(), r == layout.rank ? "" : StrCat("rank ", r, ": "), errors[r]);
    }
  }
  return AgreedStep(layout, step);
}

TrainResult Train(const TrainConfig& config, const Corpus& corpus) {
  Validate(config);
  MXTRAIN_CHECK(static_cast<int64_t>(corpus.train.size()) > config.model.context &&
                    static_cast<int64_t>(corpus.val.size()) > config.model.context,
                "train: ", corpus.source, " is too small for a context of ", config.model.context);
  const Clock::time_point run_start = Clock::now();
  const Layout layout = MakeLayout(config);
  if (layout.world != nullptr) {
    CheckSameSettings(*layout.world, SettingsLines(config, DataFingerprint(corpus)));
  }
  Model model(config.model, config.recipe, config.seed, config.threads, layout.Experts(config));
  AdamW opt(model.parameters(), AdamOf(config));
  LrSchedule schedule = config.lr;
  schedule.total_steps = config.steps;

  TrainResult result;
  result.name = config.name;
  result.recipe = config.recipe;
  result.parameters = model.NumParameters();
  result.world_size = layout.size;
  for (size_t i = 0; i < model.parameters().size(); ++i) {
    const Communicator* over = model.is_expert_parameter(i) ? layout.expert_dp.get() : layout.world;
    const int64_t g = over != nullptr ? over->size() : 1;
    result.grad_sum_bytes_per_step +=
        static_cast<int64_t>(model.parameters()[i]->main_grad().NumBytes()) * (g - 1) * layout.size;
  }
  result.expert_parallel = config.expert_parallel;
  result.wire = config.wire;
  if (!config.resume_path.empty()) {
    const internal::CheckpointState s = internal::ReadCheckpoint(config.resume_path, model);
    CheckResumable(config.resume_path, s, config, corpus, layout);
    AgreedStep(layout, s.step);
    RestoreInto(model, opt, s);
    result.resumed_from = s.step;
    auto csv = s.metadata.find("metrics.csv");
    if (csv != s.metadata.end()) {
      for (const StepMetrics& m : ParseMetricsCsv(csv->second)) {
        if (m.step <= s.step) result.steps.push_back(m);
      }
    }
  }
  for (const auto& p : model.parameters()) p->ZeroMainGrad();

  const int64_t tokens_per_step =
      layout.size * config.micro_batches * config.batch_size * config.model.context;
  double step_ms_total = 0;
  std::vector<double> step_times;
  ExpertWireBytes step_wire;  // this rank's, over the steps made here
  const int64_t last =
      config.stop_after > 0 ? std::min(config.stop_after, config.steps) : config.steps;
  for (int64_t step = opt.step() + 1; step <= last; ++step) {
    const WeightCacheStats before = model.cache().stats();
    const ExpertWireBytes wire_before = model.wire_bytes();
    ResetMemoryPeaks();
    const Clock::time_point t0 = Clock::now();
    StepMetrics m = OptimizerStep(model, opt, schedule, config, corpus, layout, step);
    const Clock::time_point t1 = Clock::now();
    const MemoryReport mem = ReadMemory();
    const WeightCacheStats after = model.cache().stats();
    m.step_ms = Ms(t0, t1);
    m.tokens_per_s = static_cast<double>(tokens_per_step) / (m.step_ms / 1000.0);
    m.peak_bytes = mem.total.peak_bytes;
    m.saved_bytes = mem.held_for_backward.peak_bytes;
    m.saved_alloc_bytes =
        mem.by_category[static_cast<int>(MemoryCategory::kSavedForBackward)].peak_bytes;
    m.cache_hits = after.hits - before.hits;
    m.cache_misses = after.misses - before.misses;
    const ExpertWireBytes sent = model.wire_bytes() - wire_before;
    step_wire += sent;
    m.wire_bytes =
        std::llround(SumOverRanks(layout.world, {static_cast<double>(sent.remote())})[0]);
    for (const LayerPolicy& lp : model.last_policies()) {
      m.inputs_deferred += lp.input == SavePolicy::kDeferred;
      m.weights_deferred += lp.weight == SavePolicy::kDeferred;
    }
    m.val_loss = std::numeric_limits<double>::quiet_NaN();
    if ((config.eval_every > 0 && step % config.eval_every == 0) || step == last) {
      m.val_loss = EvalLoss(model, corpus.val, config);
    }
    step_ms_total += m.step_ms;
    step_times.push_back(m.step_ms);
    result.steps.push_back(m);
    if (!config.checkpoint_path.empty() &&
        ((config.checkpoint_every > 0 && step % config.checkpoint_every == 0) || step == last)) {
      internal::WriteCheckpoint(config.checkpoint_path, model, opt,
                                RunMetadata(config, corpus, layout, result.steps));
    }
    if (config.on_step) config.on_step(m);
  }

  result.policies = model.last_policies();
  if (!step_times.empty()) {
    std::vector<double> w = {static_cast<double>(step_wire.dispatch_forward),
                             static_cast<double>(step_wire.combine_forward),
                             static_cast<double>(step_wire.combine_backward),
                             static_cast<double>(step_wire.dispatch_backward),
                             static_cast<double>(step_wire.self)};
    w = SumOverRanks(layout.world, w);  // every rank's together, then per step
    const double per = 1.0 / static_cast<double>(step_times.size());
    int64_t* out[] = {&result.wire_per_step.dispatch_forward, &result.wire_per_step.combine_forward,
                      &result.wire_per_step.combine_backward,
                      &result.wire_per_step.dispatch_backward, &result.wire_per_step.self};
    for (size_t i = 0; i < w.size(); ++i) *out[i] = std::llround(w[i] * per);
  }
  {
    std::vector<int64_t> wire;
    for (const StepMetrics& m : result.steps) wire.push_back(m.wire_bytes);
    if (!wire.empty()) result.wire_bytes_per_step = Median(wire);
  }
  for (const StepMetrics& m : result.steps) {
    result.peak_bytes = std::max(result.peak_bytes, m.peak_bytes);
    result.saved_bytes = std::max(result.saved_bytes, m.saved_bytes);
    result.cache_hits += m.cache_hits;
    result.cache_misses += m.cache_misses;
  }
  if (step_times.empty()) {  // resumed at its last step: the restored steps' figures
    for (const StepMetrics& m : result.steps) {
      step_times.push_back(m.step_ms);
      step_ms_total += m.step_ms;
    }
  }
  if (!step_times.empty()) {
    result.step_ms = Median(step_times);
    result.tokens_per_s =
        static_cast<double>(tokens_per_step * static_cast<int64_t>(step_times.size())) /
        (step_ms_total / 1000.0);
  }
  result.final_train_loss = EvalLoss(model, corpus.train, config);
  result.final_val_loss =
      result.steps.empty() ? EvalLoss(model, corpus.val, config) : result.steps.back().val_loss;
  if (std::isnan(result.final_val_loss))
    result.final_val_loss = EvalLoss(model, corpus.val, config);
  result.seconds = Ms(run_start, Clock::now()) / 1000.0;
  return result;
}

std::vector<StepBenchResult> RunStepBench(const std::vector<TrainConfig>& runs,
                                          const Corpus& corpus, int64_t warmup, int64_t rounds) {
  MXTRAIN_CHECK(!runs.empty(), "bench train: no runs");
  MXTRAIN_CHECK(warmup >= 0 && rounds >= 1, "bench train: needs warmup >= 0 and rounds >= 1, got ",
                warmup, " and ", rounds);
  struct Run {
    TrainConfig config;
    Layout layout;
    std::unique_ptr<Model> model;
    std::unique_ptr<AdamW> opt;
    LrSchedule schedule;
    std::vector<double> ms;  // the timed rounds'
    StepBenchResult result;
  };
  std::vector<Run> state(runs.size());
  for (size_t i = 0; i < runs.size(); ++i) {
    Run& r = state[i];
    r.config = runs[i];
    r.config.steps = warmup + rounds;
    Validate(r.config);
    MXTRAIN_CHECK(r.config.world == nullptr || r.config.world->size() == 1,
                  "bench train: runs in one process");
    MXTRAIN_CHECK(r.config.resume_path.empty() && r.config.checkpoint_path.empty(),
                  "bench train: no checkpoints or resumes");
    MXTRAIN_CHECK(static_cast<int64_t>(corpus.train.size()) > r.config.model.context,
                  "bench train: ", corpus.source, " is too small for a context of ",
                  r.config.model.context);
    r.layout = MakeLayout(r.config);
    r.model = std::make_unique<Model>(r.config.model, r.config.recipe, r.config.seed,
                                      r.config.threads, r.layout.Experts(r.config));
    r.opt = std::make_unique<AdamW>(r.model->parameters(), AdamOf(r.config));
    r.schedule = r.config.lr;
    r.schedule.total_steps = r.config.steps;
    for (const auto& p : r.model->parameters()) p->ZeroMainGrad();
    r.result.name = r.config.name;
  }
  const size_t n = state.size();
  for (int64_t round = 0; round < warmup + rounds; ++round) {
    for (size_t k = 0; k < n; ++k) {
      Run& r = state[(static_cast<size_t>(round) + k) % n];
      const Clock::time_point t0 = Clock::now();
      StepMetrics m =
          OptimizerStep(*r.model, *r.opt, r.schedule, r.config, corpus, r.layout, round + 1);
      m.step_ms = Ms(t0, Clock::now());
      if (round >= warmup) r.ms.push_back(m.step_ms);
      r.result.steps.push_back(m);
    }
  }
  std::vector<StepBenchResult> out;
  for (Run& r : state) {
    std::vector<double> ratios;
    for (size_t j = 0; j < r.ms.size(); ++j) ratios.push_back(r.ms[j] / state[0].ms[j]);
    r.result.step_ms = Median(r.ms);
    r.result.min_step_ms = *std::min_element(r.ms.begin(), r.ms.end());
    r.result.ratio = Median(ratios);
    out.push_back(std::move(r.result));
  }
  return out;
}

}  // namespace mxtrain
