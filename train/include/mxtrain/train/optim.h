// The optimizer side of a training step: AdamW on fp32 master weights with decoupled weight
// decay (Loshchilov & Hutter), global-norm gradient clipping, and the learning-rate
// schedule (linear warm-up, then cosine decay to a floor).
//
// Gradients are read from each parameter's main_grad (parameter.h), where the ops
// accumulate them over the micro-batches of a step. Step() updates the values in place,
// bumps every parameter's version (MarkModified) and clears the weight-quant cache
// (weight_cache.h): the quantized copies of the old weights must never serve the new ones.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "mxtrain/parameter.h"
#include "mxtrain/tensor.h"
#include "mxtrain/weight_cache.h"

namespace mxtrain {

struct AdamWOptions {
  double beta1 = 0.9;
  double beta2 = 0.95;
  double eps = 1e-8;
  double weight_decay = 0.1;  // applied to parameters of rank >= 2 only (not norm gains)
  int threads = 0;            // OpenMP threads of the update (0: all cores); any count
                              // gives the same bytes
};

// Linear warm-up from 0 over warmup_steps, then cosine from peak_lr to min_lr at
// total_steps (and min_lr after). Step numbers start at 1.
struct LrSchedule {
  double peak_lr = 3e-3;
  double min_lr = 3e-4;
  int64_t warmup_steps = 10;
  int64_t total_steps = 100;
  double At(int64_t step) const;
};

// sqrt of the sum of squares of every main_grad (summed in double, in order); when above
// max_norm (> 0), scales every main_grad by max_norm / norm. Returns the norm before.
double ClipGradNorm(const std::vector<std::shared_ptr<Parameter>>& params, double max_norm);
// The scaling half, for a norm computed elsewhere (over several processes): when norm is
// finite and above max_norm (> 0), every main_grad times max_norm / norm.
void ClipGradsToNorm(const std::vector<std::shared_ptr<Parameter>>& params, double norm,
                     double max_norm);

class AdamW {
 public:
  AdamW(std::vector<std::shared_ptr<Parameter>> params, AdamWOptions options);

  // One update with learning rate lr from the main_grads, then MarkModified on each
  // parameter and cache->Clear() (when given). Zeroes the main_grads for the next step.
  void Step(double lr, WeightQuantCache* cache);

  int64_t step() const { return step_; }
  // The moment estimates, one per parameter in order (f32, the parameter's shape): for
  // checkpoints.
  const std::vector<Tensor>& exp_avg() const { return m_; }
  const std::vector<Tensor>& exp_avg_sq() const { return v_; }
  // Restores a checkpoint's state: step count and moments (shapes must match).
  void LoadState(int64_t step, const std::vector<Tensor>& exp_avg,
                 const std::vector<Tensor>& exp_avg_sq);

 private:
  std::vector<std::shared_ptr<Parameter>> params_;
  AdamWOptions options_;
  std::vector<Tensor> m_, v_;
  int64_t step_ = 0;
};

}  // namespace mxtrain
