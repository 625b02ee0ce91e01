// The training loop (train.h).
#include "mxtrain/train/train.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <limits>

#include "mxtrain/memory.h"
#include "train/checkpoint.h"

namespace mxtrain {

namespace {

using Clock = std::chrono::steady_clock;

double Ms(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
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
std::vector<std::pair<std::string, std::string>> ResumeKeys(const TrainConfig& c,
                                                            const Corpus& corpus) {
  return {{"run.seed", std::to_string(c.seed)},
          {"run.batch_size", std::to_string(c.batch_size)},
          {"run.micro_batches", std::to_string(c.micro_batches)},
          {"data.fingerprint", DataFingerprint(corpus)}};
}

// The settings besides the model that a checkpoint records (the model's are added by
// WriteCheckpoint).
std::map<std::string, std::string> RunMetadata(const TrainConfig& c, const Corpus& corpus,
                                               const std::vector<StepMetrics>& steps) {
  std::map<std::string, std::string> m = {{"run.name", c.name},
                                          {"run.recipe", c.recipe.ToString()},
                                          {"run.steps", std::to_string(c.steps)},
                                          {"data.source", corpus.source},
                                          {"metrics.csv", MetricsCsv(steps)}};
  for (auto& [k, v] : ResumeKeys(c, corpus)) m[k] = v;
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
                    const TrainConfig& config, const Corpus& corpus) {
  MXTRAIN_CHECK(s.step >= 0 && s.step <= config.steps, "checkpoint '", path, "' is at step ",
                s.step, ", past the run's ", config.steps, " steps");
  for (const auto& [key, want] : ResumeKeys(config, corpus)) {
    auto it = s.metadata.find(key);
    MXTRAIN_CHECK(it != s.metadata.end() && it->second == want, "checkpoint '", path,
                  "' was written by a run with ", key, " ",
                  it == s.metadata.end() ? std::string("(none)") : it->second, ", this run has ",
                  want, key == "data.fingerprint" ? " (other data)" : "",
                  "; resuming would not repeat it");
  }
}

}  // namespace

int64_t CheckCheckpoint(const std::string& path, const TrainConfig& config, const Corpus& corpus) {
  // Every tensor, against a model of this configuration (about a million parameters: cheap).
  Model model(config.model, config.recipe, config.seed, config.threads);
  const internal::CheckpointState s = internal::ReadCheckpoint(path, model);
  CheckResumable(path, s, config, corpus);
  return s.step;
}

TrainResult Train(const TrainConfig& config, const Corpus& corpus) {
  Validate(config);
  MXTRAIN_CHECK(static_cast<int64_t>(corpus.train.size()) > config.model.context &&
                    static_cast<int64_t>(corpus.val.size()) > config.model.context,
                "train: ", corpus.source, " is too small for a context of ", config.model.context);
  const Clock::time_point run_start = Clock::now();
  Model model(config.model, config.recipe, config.seed, config.threads);
  AdamW opt(model.parameters(), config.adam);
  LrSchedule schedule = config.lr;
  schedule.total_steps = config.steps;

  TrainResult result;
  result.name = config.name;
  result.recipe = config.recipe;
  result.parameters = model.NumParameters();
  if (!config.resume_path.empty()) {
    const internal::CheckpointState s = internal::ReadCheckpoint(config.resume_path, model);
    CheckResumable(config.resume_path, s, config, corpus);
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

  const int64_t tokens_per_step = config.micro_batches * config.batch_size * config.model.context;
  const float grad_scale = 1.0f / static_cast<float>(config.micro_batches);
  double step_ms_total = 0;
  std::vector<double> step_times;
  const int64_t last =
      config.stop_after > 0 ? std::min(config.stop_after, config.steps) : config.steps;
  for (int64_t step = opt.step() + 1; step <= last; ++step) {
    const WeightCacheStats before = model.cache().stats();
    ResetMemoryPeaks();
    const Clock::time_point t0 = Clock::now();
    StepMetrics m;
    m.step = step;
    for (int64_t micro = 0; micro < config.micro_batches; ++micro) {
      const Batch b = SampleBatch(corpus.train, config.model.context, config.batch_size,
                                  config.seed, step, micro);
      const LossParts parts = model.ForwardBackward(b.ids, b.targets, b.batch, grad_scale);
      m.train_loss += parts.loss;
      m.aux_loss += parts.aux;
    }
    m.train_loss /= static_cast<double>(config.micro_batches);
    m.aux_loss /= static_cast<double>(config.micro_batches);
    if (!std::isfinite(m.train_loss)) throw NonFiniteLossError(step, m.train_loss);
    m.grad_norm = ClipGradNorm(model.parameters(), config.clip_norm);
    if (!std::isfinite(m.grad_norm)) throw NonFiniteLossError(step, m.grad_norm, "gradient norm");
    m.lr = schedule.At(step);
    opt.Step(m.lr, &model.cache());
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
                                RunMetadata(config, corpus, result.steps));
    }
    if (config.on_step) config.on_step(m);
  }

  result.policies = model.last_policies();
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
    std::sort(step_times.begin(), step_times.end());
    result.step_ms = step_times[step_times.size() / 2];
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

}  // namespace mxtrain
