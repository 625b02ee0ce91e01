// The training loop: micro-batches with gradient accumulation, the optimizer step, the
// metrics of every step, evaluation, checkpoints and resume (DESIGN.md "A training step,
// as data"; docs/decisions.md "Training").
//
//   TrainConfig c;  c.recipe = Recipe::Make({.input_policy = SavePolicy::kDeferred});
//   TrainResult r = Train(c, SplitCorpus(BuiltinCorpus(), c.model.context, "built-in"));
//
// A run is deterministic for a seed and thread count: the initial weights, the batches and
// every sum come from the seed in fixed order, so a resumed run repeats the uninterrupted
// one's losses bit for bit. Memory figures are read from the tracking allocator
// (memory.h): peak_bytes is the peak of every live tensor, saved_bytes the peak of what
// pending backward passes hold (MemoryReport::held_for_backward), each over the step.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "mxtrain/error.h"
#include "mxtrain/recipe.h"
#include "mxtrain/train/data.h"
#include "mxtrain/train/model.h"
#include "mxtrain/train/optim.h"

namespace mxtrain {

struct StepMetrics {
  int64_t step = 0;       // 1-based optimizer step
  double train_loss = 0;  // mean cross-entropy over the step's micro-batches (nats)
  double aux_loss = 0;    // mean of the routers' balance losses (summed over layers)
  double val_loss = 0;    // NaN unless evaluated after this step
  double lr = 0;
  double grad_norm = 0;  // before clipping
  double step_ms = 0;    // forward, backward and optimizer step (no evaluation)
  double tokens_per_s = 0;
  int64_t peak_bytes = 0;         // peak of all live tensors during the step
  int64_t saved_bytes = 0;        // peak held for backward during the step
  int64_t saved_alloc_bytes = 0;  // peak of buffers made for backward (kSavedForBackward)
  int64_t cache_hits = 0;         // weight-quant cache, during the step
  int64_t cache_misses = 0;
  // MXFP8 matmul layers whose input / weight the step's last forward saved deferred (the
  // auto policy's choices; Model::last_policies has them per layer).
  int64_t inputs_deferred = 0;
  int64_t weights_deferred = 0;
  // Expert parallelism: bytes the step's token exchanges sent between ranks (dispatch and
  // combine, forward and backward), summed over every rank; 0 in one process.
  int64_t wire_bytes = 0;
};

struct TrainConfig {
  std::string name = "run";  // names the run in reports
  ModelConfig model;
  Recipe recipe;  // mxfp8, e4m3, rceil, quantized policies
  int64_t steps = 200;
  int64_t micro_batches = 2;  // gradient accumulation: >= 2 exercises the weight cache
  int64_t batch_size = 16;    // sequences per micro-batch
  LrSchedule lr;              // total_steps is set from `steps`
  AdamWOptions adam;
  double clip_norm = 1.0;  // global gradient-norm clip (0: none)
  uint64_t seed = 1;
  int threads = 0;           // 0: all cores
  int64_t eval_every = 50;   // validation loss every this many steps, and after the last
  int64_t eval_batches = 4;  // of batch_size sequences each
  // Checkpoints: written atomically to checkpoint_path every checkpoint_every steps (0:
  // never) and after the last step, when the path is set.
  std::string checkpoint_path;
  int64_t checkpoint_every = 0;
  // Stop after this step (0: run all `steps`), checkpointing there as at the end: a run in
  // pieces, each resumed from the last, repeats the run made at once.
  int64_t stop_after = 0;
  // A checkpoint to continue from (its model must match `model`).
  std::string resume_path;
  // Called after every step (progress reports).
  std::function<void(const StepMetrics&)> on_step;

  // Several processes (docs/training.md "Training on several processes"). `world` null (or
  // of one rank) trains in this process alone. With W ranks, each draws its own batches
  // (data parallelism: the global batch is W x micro_batches x batch_size sequences); the
  // experts are sharded over expert-parallel groups of `expert_parallel` consecutive ranks
  // (Megatron's EP inside DP), each rank holding n_experts / expert_parallel of them; every
  // gradient is summed in fp32 in rank order over the ranks that hold the same parameter
  // (all W for the dense ones, W / expert_parallel for an expert) before the optimizer
  // step. Train is then collective over `world`: every rank calls it with the same config
  // (checked: a difference is an Error on every rank) and its own checkpoint path.
  Communicator* world = nullptr;  // not owned
  int64_t expert_parallel = 1;
  // How tokens reach their experts: kLocal (expert_parallel 1: no exchange), kMxfp8 or
  // kHighPrecision (model.h). kMxfp8 with expert_parallel 1 exchanges within a group of
  // one: the reference that expert_parallel N repeats bit for bit.
  ExpertWire wire = ExpertWire::kLocal;
};

struct TrainResult {
  std::string name;
  Recipe recipe;
  std::vector<StepMetrics> steps;  // every step from 1, including those before a resume
  double final_train_loss = 0;     // on eval_batches fixed batches of the training split
  double final_val_loss = 0;       // on eval_batches fixed batches of the validation split
  // Over the steps this run made (or, resumed at its last step, the restored ones):
  double tokens_per_s = 0;  // tokens / step time
  double step_ms = 0;       // median
  int64_t peak_bytes = 0;   // max over steps
  int64_t saved_bytes = 0;
  int64_t cache_hits = 0, cache_misses = 0;
  int64_t parameters = 0;
  int64_t resumed_from = 0;  // the checkpoint's step, 0 for a fresh run
  // The policies per MXFP8 matmul layer in the last step's last forward (empty with
  // MXFP8 off, or when no step ran here).
  std::vector<LayerPolicy> policies;
  double seconds = 0;  // wall time of the whole run
  // The layout (1, 1, kLocal in one process), the median of the steps' wire_bytes, and per
  // exchange the bytes a training step sent (mean over the steps made here, every rank's
  // together; evaluation's exchanges not counted).
  int64_t world_size = 1;
  int64_t expert_parallel = 1;
  ExpertWire wire = ExpertWire::kLocal;
  int64_t wire_bytes_per_step = 0;
  ExpertWireBytes wire_per_step;
  // The bytes the gradient sums send between ranks per step, every rank's together (each
  // rank sends its gradients to the others of each group it sums over: the communicator's
  // sum is an all-gather).
  int64_t grad_sum_bytes_per_step = 0;
};

// A loss (or gradient norm) that is NaN or Inf: the run stops before updating anything
// (the last checkpoint stays as it was). The CLI exits with code 3.
class NonFiniteLossError : public Error {
 public:
  NonFiniteLossError(int64_t step, double value, const char* what = "loss");
  int64_t step() const { return step_; }

 private:
  int64_t step_;
};

// Runs the training. Throws Error on a bad configuration or checkpoint (before anything
// is written), NonFiniteLossError as above.
TrainResult Train(const TrainConfig& config, const Corpus& corpus);

// Checks that the checkpoint at path can resume `config` on `corpus` (a valid file, the
// same model, every tensor with its parameter's shape, a step within config.steps, and the
// same seed, batch size, micro-batches, data and process layout, without which the resumed
// run would not repeat the original) and returns its step; throws Error naming the problem.
// Train checks as it loads; callers running several runs check every checkpoint before
// starting any, so that nothing is written when one is bad. Collective over config.world:
// every rank checks its own file, and all must be at the same step.
int64_t CheckCheckpoint(const std::string& path, const TrainConfig& config, const Corpus& corpus);

// The per-step metrics as CSV (a header line, one line per step; doubles with 17
// significant digits so that they read back exactly) and back.
std::string MetricsCsv(const std::vector<StepMetrics>& steps);
std::vector<StepMetrics> ParseMetricsCsv(const std::string& csv);

}  // namespace mxtrain
