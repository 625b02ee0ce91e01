// The training model: a byte-level decoder-only transformer language model with
// mixture-of-experts feed-forward blocks (docs/decisions.md "Training").
//
//   x = Embedding(ids)                                       [B*T, D]
//   N blocks:  x += Wo . Attention(Wq . n, Wk . n, Wv . n),  n = RMSNorm(x)
//              x += Unpermute(W2 . SwiGLU(W13 . Permute(n)), router weights),
//                   n = RMSNorm(x), top-k experts from Router . n
//   logits = LMHead . RMSNorm(x);  loss = CrossEntropy(logits, next bytes)
//                                        + aux_coef * sum of the routers' balance losses
//
// Every matmul runs through Linear / GroupedLinear (linear.h) with the model's Recipe: Wq,
// Wk, Wv, Wo, the experts' fused gate/up W13 and down W2, and the LM head. The router's
// small [D, E] projection is a Linear too, always in fp32, as MXFP8 recipes keep it (its
// top-k is a discrete choice that rounding would flip). The rest is fp32 (nn.h), and so is
// the residual stream; as under autocast, what enters a bf16 or MXFP8 matmul (and its
// output gradient) is bf16, so that a matmul's input is saved, or referenced by the
// deferred policy, at 2 bytes per element, and a bf16 copy feeds Wq, Wk and Wv at once.
// Parameters are fp32 master weights; backward accumulates their gradients into
// main_grad, so micro-batches of one optimizer step add up there.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "mxtrain/comm.h"
#include "mxtrain/grouped_linear.h"
#include "mxtrain/linear.h"
#include "mxtrain/parameter.h"
#include "mxtrain/recipe.h"
#include "mxtrain/weight_cache.h"

namespace mxtrain {

namespace nn {
struct Permutation;
}  // namespace nn

struct ModelConfig {
  int64_t vocab = 256;
  int64_t d_model = 128;
  int64_t n_layers = 2;
  int64_t n_heads = 4;
  int64_t n_experts = 4;
  int64_t top_k = 2;
  int64_t d_ff = 256;  // each expert's hidden width
  int64_t context = 64;
  double aux_loss_coef = 0.01;

  // Throws Error naming the first bad field (sizes >= 1, heads dividing d_model, top_k <=
  // n_experts, vocab 256: the model reads bytes).
  void Validate() const;
  // "d_model=128 n_layers=2 ..." and its parse (for checkpoint metadata).
  std::map<std::string, std::string> ToMetadata() const;
  static ModelConfig FromMetadata(const std::map<std::string, std::string>& metadata);
  bool operator==(const ModelConfig& other) const = default;
  std::string ToString() const;

  // Named sizes: "tiny" (the defaults above: d_model 128, context 64; the main job) and
  // "small" (d_model 512, 8 heads, d_ff 1024, context 256: activations outweigh the
  // weights, so the save policies' bytes differ by tens of MB). Error on another name.
  static ModelConfig Preset(std::string_view name);
};

// The save policies one MXFP8 matmul layer applied in a forward (OpContext::input_policy
// and weight_policy: auto resolved; nullopt where the role was not saved in MXFP8).
struct LayerPolicy {
  std::string layer;  // the weight's name without ".weight": "layers.0.attn.wq"
  std::optional<SavePolicy> input;
  std::optional<SavePolicy> weight;
};

// How tokens reach experts that live in other processes (docs/decisions.md "Expert
// parallelism").
enum class ExpertWire : uint8_t {
  kLocal,  // one process holds every expert: no exchange
  // Dispatch forward and combine backward in MXFP8 (rowwise codes + E8M0 scales in the
  // recipe's input / gradient format, quantized once by the sender and read as they are by
  // the experts' GEMMs); combine forward and dispatch backward in the matmul input's
  // precision (bf16).
  kMxfp8,
  kHighPrecision,  // every exchange in the matmul input's precision (bf16; fp32 for fp32)
};
std::string_view Name(ExpertWire wire);             // "local" | "mxfp8" | "hp"
ExpertWire ParseExpertWire(std::string_view name);  // throws Error naming the value

struct ExpertParallel {
  // The ranks that share one copy of the experts, rank r holding experts
  // [r * E / size, (r + 1) * E / size) (not owned; outlives the model). Null: this process
  // holds them all.
  Communicator* group = nullptr;
  // kLocal needs no group or a group of one; kMxfp8 an MXFP8 recipe.
  ExpertWire wire = ExpertWire::kLocal;
};

// Bytes the exchanges of expert parallelism sent, since the model was made: to other
// ranks (the wire) and to this rank itself (a copy), per direction.
struct ExpertWireBytes {
  int64_t dispatch_forward = 0, combine_forward = 0, combine_backward = 0, dispatch_backward = 0;
  int64_t self = 0;  // every direction, to this rank itself
  int64_t remote() const {
    return dispatch_forward + combine_forward + combine_backward + dispatch_backward;
  }
  // Field by field: the bytes between two readings, and their sum.
  ExpertWireBytes operator-(const ExpertWireBytes& o) const {
    return {dispatch_forward - o.dispatch_forward, combine_forward - o.combine_forward,
            combine_backward - o.combine_backward, dispatch_backward - o.dispatch_backward,
            self - o.self};
  }
  ExpertWireBytes& operator+=(const ExpertWireBytes& o) {
    dispatch_forward += o.dispatch_forward;
    combine_forward += o.combine_forward;
    combine_backward += o.combine_backward;
    dispatch_backward += o.dispatch_backward;
    self += o.self;
    return *this;
  }
};

// Losses of one forward pass over a micro-batch.
struct LossParts {
  double loss = 0;  // mean cross-entropy over the micro-batch's tokens (nats)
  double aux = 0;   // sum over layers of the routers' load-balancing losses
};

class Model {
 public:
  // Parameters initialized from `seed` (same seed, same values, on any machine, and each
  // expert the same whichever rank holds it); ops use `recipe` and their own weight cache
  // (reused when the recipe says so). With expert parallelism the forward and backward are
  // collective over ep.group: every rank of it calls them together.
  Model(const ModelConfig& config, const Recipe& recipe, uint64_t seed, int threads = 0,
        ExpertParallel ep = {});
  ~Model();
  Model(const Model&) = delete;
  Model& operator=(const Model&) = delete;

  // Forward and backward over `batch` sequences of config().context bytes: ids and
  // targets [batch * context]. Gradients of (loss + aux_coef * aux) * grad_scale are added
  // into every parameter's main_grad.
  LossParts ForwardBackward(std::span<const int32_t> ids, std::span<const int32_t> targets,
                            int64_t batch, float grad_scale);
  // Forward only (nothing saved): the mean cross-entropy.
  double Evaluate(std::span<const int32_t> ids, std::span<const int32_t> targets, int64_t batch);

  // Every parameter, in a fixed order with unique names ("layers.0.attn.wq.weight").
  const std::vector<std::shared_ptr<Parameter>>& parameters() const { return params_; }
  int64_t NumParameters() const;
  WeightQuantCache& cache() { return cache_; }
  // Per MXFP8 matmul layer, in forward order, the policies of the last ForwardBackward's
  // forward (empty before the first, or with MXFP8 off).
  const std::vector<LayerPolicy>& last_policies() const { return last_policies_; }
  const ModelConfig& config() const { return config_; }
  const Recipe& recipe() const { return recipe_; }
  // Whether parameters()[i] holds this rank's share of the experts ([E / ep size, ...]).
  bool is_expert_parameter(size_t i) const { return expert_param_[i]; }
  int64_t local_experts() const { return local_experts_; }
  const ExpertParallel& expert_parallel() const { return ep_; }
  const ExpertWireBytes& wire_bytes() const { return wire_; }

 private:
  struct Block;
  struct Tape;
  void SetRequiresGrad(bool value);
  // What a matmul of this recipe takes: bf16 (fp32 for the fp32 recipe).
  Tensor ToMatmulInput(const Tensor& t) const;
  // Expert parallelism: the experts of block b over sorted rows xs [T * k, D] (the matmul
  // input's dtype) that travel to their ranks and back; ys [T * k, D] f32 in xs's order.
  // tape null: evaluation (nothing saved).
  Tensor ExchangedExperts(Block& b, const Tensor& xs, const nn::Permutation& perm, Tape* tape,
                          size_t block);
  // Its backward: dxs [T * k, D] f32 for dys [T * k, D] f32; expert gradients added into
  // main_grad per sender, in rank order.
  Tensor ExchangedExpertsBackward(Block& b, const Tensor& dys, Tape& tape, size_t block);

  ModelConfig config_;
  Recipe recipe_;
  int threads_;
  WeightQuantCache cache_;
  std::shared_ptr<Parameter> embed_;
  std::vector<std::unique_ptr<Block>> blocks_;
  std::shared_ptr<Parameter> final_norm_;
  std::unique_ptr<Linear> lm_head_;
  std::vector<std::shared_ptr<Parameter>> params_;
  std::vector<LayerPolicy> last_policies_;
  ExpertParallel ep_;
  int64_t local_experts_ = 0;
  std::vector<bool> expert_param_;
  ExpertWireBytes wire_;
};

}  // namespace mxtrain
