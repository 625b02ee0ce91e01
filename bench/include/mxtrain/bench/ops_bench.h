// The ops benchmark (`mxtrain bench ops`): one optimizer step of a stack of Linear or
// GroupedLinear layers (forward and backward over several micro-batches with gradients
// accumulated into main_grad, then an in-place SGD update that bumps each weight's version
// and clears the weight cache), per save-policy combination, beside the bf16 ops on the
// same shapes in the same run.
//
// Stacks: "transformer" (QKV H->3H, attention output H->H, FC1 H->4H, FC2 4H->H) and
// "moe" (expert FC1 H->F and FC2 F->H, E experts with uneven token counts, one empty).
// Every layer's input is a bf16 activation the caller holds for the whole step, as a model
// holds its residual stream and norm outputs; so a deferred input costs no bytes beyond
// what the caller keeps, and the quantized policy's columnwise copies are the difference.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "mxtrain/memory.h"
#include "mxtrain/recipe.h"
#include "mxtrain/saved.h"

namespace mxtrain {

struct OpsBenchCase {
  std::string name;  // "transformer" | "moe" (with a "smoke_" prefix for the tiny ones)
  bool moe = false;
  int64_t tokens = 0;  // per micro-batch
  int64_t hidden = 0;
  int64_t ffn = 0;                    // transformer: 4 * hidden; moe: the expert FFN width
  std::vector<int64_t> group_counts;  // moe: tokens per expert (sum: tokens)
  int micro_batches = 4;
  int threads = 0;  // 0: all cores
};

// "smoke_transformer" and "smoke_moe" (seconds under sanitizers), then "transformer" and
// "moe" at `tokens` tokens and hidden size `hidden` (expert FFN 11/16 of hidden, 8 experts).
std::vector<OpsBenchCase> StandardOpsBenchCases(int64_t tokens = 4096, int64_t hidden = 1024);

struct OpsBenchConfig {
  Precision precision = Precision::kMxfp8;
  SavePolicy input_policy = SavePolicy::kQuantized;
  SavePolicy weight_policy = SavePolicy::kQuantized;
  bool reuse = false;
  // "bf16", or "mxfp8 input=deferred weight=quantized reuse"
  std::string Name() const;
  Recipe MakeRecipe() const;
};

// bf16 first, then MXFP8 with every (input policy, weight policy, reuse) combination of
// quantized and deferred, then both policies auto with and without reuse.
std::vector<OpsBenchConfig> StandardOpsBenchConfigs();

struct OpsBenchResult {
  OpsBenchCase c;
  OpsBenchConfig config;
  int threads = 0;
  // The GEMM the config ran: the MX path (CurrentGemmPath(): "amx-bf16", ...) for mxfp8;
  // for bf16 the high-precision route (HpGemmRoute(kBF16): "onednn-bf16", "onednn-f32" on
  // CPUs without a oneDNN bf16 matmul, or "portable").
  std::string gemm;
  double step_ms = 0;  // median over the measured steps
  // Peaks over one step, from the tracking allocator (memory.h).
  int64_t peak_bytes = 0;
  std::array<int64_t, kNumMemoryCategories> peak_by_category{};
  int64_t peak_held_for_backward = 0;
  // The closed-form bytes of the copies made for the backward of one micro-batch (what
  // peak_by_category[kSavedForBackward] must read): an FP8 columnwise copy of [R, C] is
  // R*C + ceil(R/32)*C bytes (token-grouped: sum_g ceil(r_g/32)*C scale bytes); the bf16
  // baseline keeps a bf16 copy of each fp32 weight.
  int64_t closed_form_saved_bytes = 0;
  // Per layer, what its context keeps for the backward (OpContext::saved_memory): the
  // per-layer report of what each policy saves.
  struct Layer {
    std::string name;  // "qkv", "proj", "fc1", "fc2" | "expert_fc1", "expert_fc2"
    SavedMemory saved;
    // The policies its forward applied (auto resolved), in the last measured step.
    std::optional<SavePolicy> input_policy, weight_policy;
  };
  std::vector<Layer> layers;
};

// One result per config, in order. The configs share the case's weights, input values and
// output gradients (so the step's fixed bytes are counted once) and run interleaved: one
// warm-up step each, then `steps` rounds of one step of every config, so that a noisy
// machine slows all of them alike. Medians. Each micro-batch's input is a fresh buffer
// that the stack drops after the forward, as a model's activations are: it lives on only
// if a context references it.
std::vector<OpsBenchResult> MeasureOpsBench(const OpsBenchCase& c,
                                            const std::vector<OpsBenchConfig>& configs, int steps);

// One JSON line for results[i]: {"case", "precision", "input_policy", "weight_policy",
// "reuse", "tokens", "hidden", "ffn", "experts", "micro_batches", "threads", "gemm",
// "baseline" (bf16's "gemm"), "step_ms", "peak_bytes", "saved_bytes" (peak held for
// backward), "saved_allocated_bytes" (peak of category saved_for_backward),
// "closed_form_saved_bytes", "peak_by_category": {...}, "layers": [{"name",
// "allocated_bytes", "referenced_bytes", "persistent_bytes", "input_policy",
// "weight_policy"}, ...], "bf16_step_ms", "ratio_to_bf16" (step_ms / bf16's),
// "time_vs_quantized" (step_ms over the run with both policies quantized and the same
// reuse), "saved_vs_quantized_bytes" (that run's saved_allocated_bytes minus this one's),
// and the two fixed policies' figures beside this one's, same reuse: "quantized_step_ms",
// "deferred_step_ms", "quantized_saved_bytes", "deferred_saved_bytes"}. A figure of a
// config that `results` lacks is null.
std::string ToJson(const std::vector<OpsBenchResult>& results, size_t i);

}  // namespace mxtrain
