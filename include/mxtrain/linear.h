// Linear: the MXFP8 training op Y = X . W^T + b with its backward (DESIGN.md "A training
// step, as data"), and the types it shares with GroupedLinear (grouped_linear.h).
//
//   Linear fc(1024, 4096, /*bias=*/true, Recipe::Make({.input_policy = SavePolicy::kDeferred}));
//   auto [y, ctx] = fc.Forward(x);            // x [..., 1024] f32/bf16 => y [..., 4096]
//   Grads g = fc.Backward(dy, std::move(ctx)); // g.dx [..., 1024], g.dw [4096, 1024], g.db [4096]
//
// Forward quantizes X and W rowwise for fprop. What it keeps for the backward follows the
// recipe's per-role policies (recipe.h): the columnwise copy (quantized) or a reference to
// the high-precision tensor, quantized columnwise in the backward (deferred). Backward
// quantizes dY (dual-axis when both gradients are wanted), runs dgrad dX = dY . W and
// wgrad dW = dY^T . X, and db = column sums of dY. Every quantization starts from a
// high-precision tensor, so outputs and gradients are bit-identical across policies and
// with or without the weight cache.
//
// The auto policy (SavePolicy::kAuto) picks per layer and role what holds less for the
// backward, counting a high-precision tensor as free when something else keeps it alive
// until the backward:
//   - weight: deferred when the weight is a Parameter's value (alive for the whole training)
//     or borrowed (its owner keeps it); quantized otherwise.
//   - input: deferred when the input is alive anyway: another auto layer took the same
//     buffer as its input (Q, K and V over one activation: one 2-byte reference instead of
//     three 1.03-byte copies), a pending backward already holds it (another layer deferred
//     it, or a model saved it), or an earlier call of this layer saw it still alive at its
//     backward (its caller keeps it); quantized otherwise. The last two are learned: a
//     layer records what it saw (the one piece of state a layer keeps), so a model's first
//     micro-batch may pick differently from the next ones. Outputs and gradients do not
//     depend on the choice, bit for bit; OpContext reports it.
//
// With hp_gemms (recipe.h), a GEMM in high precision reads its operands as the bf16 / fp32
// op would: an HP fprop rounds X and W to the compute type, an HP dgrad reads W (a
// reference, rounded in the backward) and an HP wgrad the input rounded in the forward;
// each output is bit-identical to the one that precision's layer makes.
//
// Only what a gradient needs is made or kept: X's columnwise copy only when W needs a
// gradient (wgrad reads it), W's only when X does (dgrad), dY's layouts likewise, and
// nothing at all when no gradient is wanted. With MXFP8 off the same op runs HpGemm
// (hp_gemm.h) in bf16 or fp32 and saves the operands it rounded.
//
// A layer is shared, a call is not: what one call needs (which gradients, whether the
// weight cache may serve it, how many threads) travels in its CallOptions and then in its
// OpContext, never in the layer or its parameters, so threads may share one layer, one
// training and another evaluating.
//
// The rules of a context (each broken one is an Error naming the layer's weight):
//   - Backward takes the context of a Forward of the same layer, once.
//   - Between Forward and Backward, the tensors a deferred policy references (the input
//     x, the weight's value) must not change. A weight changed through its Parameter
//     (MarkModified / SetVersion) is always caught; any other in-place write to them is
//     caught by the debug build (NDEBUG unset, the dev preset), which keeps a checksum of
//     each referenced tensor and compares it in Backward. Release builds skip that pass.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "mxtrain/group_list.h"
#include "mxtrain/parameter.h"
#include "mxtrain/recipe.h"
#include "mxtrain/saved.h"
#include "mxtrain/tensor.h"
#include "mxtrain/weight_cache.h"

namespace mxtrain {

struct OpOptions {
  // Accumulate dW and db into the parameters' fp32 main_grad (Megatron's gradient-
  // accumulation fusion) instead of returning new tensors; Grads then holds main_grad.
  bool accumulate_grad = false;
  // The weight cache used when the recipe reuses quantized weights; nullptr means
  // WeightQuantCache::Global().
  WeightQuantCache* cache = nullptr;
  int threads = 0;  // 0: omp_get_max_threads() (all cores unless OMP_NUM_THREADS says)
};

// What one Forward call needs; its Backward inherits it through the context.
struct CallOptions {
  bool input_requires_grad = true;  // whether the backward returns dx
  // Whether the backward returns dW / db; unset: the parameter's requires_grad().
  std::optional<bool> weight_requires_grad;
  std::optional<bool> bias_requires_grad;
  // Whether the recipe's weight cache may serve and store this call's weight layouts.
  // False for a call whose weight may not be the one later training calls see under the
  // same version (an evaluation with swapped-in weights): it quantizes afresh and the
  // cache is left as it was.
  bool use_weight_cache = true;
  int threads = -1;  // < 0: the layer's OpOptions::threads
};

struct Grads {
  Tensor dx;  // in x's shape and dtype; undefined unless the input needed a gradient
  Tensor dw;  // weight's shape: in its dtype, or its main_grad (f32) when accumulating
  Tensor db;  // bias's shape, likewise; undefined without a bias that needs a gradient
};

namespace internal {
struct OpState;
struct OpAccess;
struct AutoRecord;
}  // namespace internal

// What a forward keeps for its backward. Move-only; Backward consumes it, and dropping it
// without a backward releases what it held.
class OpContext {
 public:
  OpContext();
  ~OpContext();
  OpContext(OpContext&&) noexcept;
  OpContext& operator=(OpContext&&) noexcept;

  // False when the forward saved nothing (no gradient was wanted) or Backward used it.
  bool defined() const;
  // True once the context has handed what it held to a Backward (or to another context
  // by a move): a second Backward on it is an error that says so.
  bool spent() const { return spent_; }
  // The bytes this context holds for the backward (saved.h).
  SavedMemory saved_memory() const;
  // The save policy the forward applied per role (auto resolved to quantized or deferred);
  // nullopt when the role was not saved, is read by a high-precision GEMM (hp_gemms), or
  // MXFP8 is off.
  std::optional<SavePolicy> input_policy() const;
  std::optional<SavePolicy> weight_policy() const;

 private:
  friend struct internal::OpAccess;
  std::unique_ptr<internal::OpState> state_;
  bool spent_ = false;
};

struct Forwarded {
  Tensor y;
  OpContext ctx;
};

// What Linear and GroupedLinear hold: their parameters and configuration.
class LinearParams {
 public:
  Parameter& weight() const { return *weight_; }
  Parameter* bias() const { return bias_.get(); }
  const std::shared_ptr<Parameter>& weight_ptr() const { return weight_; }
  const std::shared_ptr<Parameter>& bias_ptr() const { return bias_; }
  const Recipe& recipe() const { return recipe_; }
  const OpOptions& options() const { return options_; }
  // What the auto input policy learned about this layer's input (linear.h, above).
  const std::shared_ptr<internal::AutoRecord>& auto_record() const { return auto_record_; }

 protected:
  // Checks the weight's rank and that the bias (if any) has the weight's shape without its
  // last dimension.
  LinearParams(std::shared_ptr<Parameter> weight, std::shared_ptr<Parameter> bias, Recipe recipe,
               OpOptions options, int weight_rank, const char* op);

 private:
  std::shared_ptr<Parameter> weight_;
  std::shared_ptr<Parameter> bias_;
  Recipe recipe_;
  OpOptions options_;
  std::shared_ptr<internal::AutoRecord> auto_record_;
};

class Linear : public LinearParams {
 public:
  // A layer with a new weight [out_features, in_features] (and bias [out_features]) of
  // param_dtype (f32 or bf16), zero-filled: initialize value() in place, then MarkModified.
  Linear(int64_t in_features, int64_t out_features, bool bias, Recipe recipe = {},
         OpOptions options = {}, DType param_dtype = DType::kF32, std::string name = "linear");
  // A layer over existing parameters: weight [N, K], bias [N] or nullptr.
  Linear(std::shared_ptr<Parameter> weight, std::shared_ptr<Parameter> bias, Recipe recipe = {},
         OpOptions options = {});

  // y [..., N] = x [..., K] . W^T + b; x is f32 or bf16 of rank >= 2, y has its dtype.
  Forwarded Forward(const Tensor& x, const CallOptions& call) const;
  // input_requires_grad: whether the backward must return dx; the rest as CallOptions{}.
  Forwarded Forward(const Tensor& x, bool input_requires_grad = true) const;
  // Gradients for dy [..., N] (x's leading shape, y's dtype), with the forward call's
  // options. Throws Error if ctx is empty, spent or another layer's, dy's shape does not
  // match, or a tensor the forward deferred changed in place since (see the rules above).
  Grads Backward(const Tensor& dy, OpContext ctx) const;

  int64_t in_features() const { return weight().shape()[1]; }
  int64_t out_features() const { return weight().shape()[0]; }
};

}  // namespace mxtrain
