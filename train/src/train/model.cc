// The training model (model.h): parameters, and the forward and backward of one
// micro-batch written against Linear / GroupedLinear and the fp32 layers of nn.h.
#include "mxtrain/train/model.h"

#include <cmath>

#include "mxtrain/elementwise.h"
#include "mxtrain/error.h"
#include "mxtrain/saved.h"
#include "mxtrain/train/nn.h"
#include "train/rng.h"

namespace mxtrain {

namespace {

constexpr float kNormEps = 1e-5f;

std::shared_ptr<Parameter> NewParam(Shape shape, const std::string& name) {
  return std::make_shared<Parameter>(Tensor::Zeros(DType::kF32, std::move(shape)), name);
}

// N(0, stddev^2) values from the parameter's own stream of the model seed: a parameter's
// initial value does not depend on how many others come before it.
void InitNormal(Parameter& p, double stddev, uint64_t seed, uint64_t stream) {
  internal::Rng rng(seed, stream);
  float* v = p.value().data<float>();
  for (int64_t i = 0; i < p.value().NumElements(); ++i) {
    v[i] = static_cast<float>(rng.Normal() * stddev);
  }
  p.MarkModified();
}

void InitOnes(Parameter& p) {
  float* v = p.value().data<float>();
  for (int64_t i = 0; i < p.value().NumElements(); ++i) v[i] = 1.0f;
  p.MarkModified();
}

Recipe RouterRecipe() {
  RecipeOptions o;
  o.precision = Precision::kFp32;
  return Recipe::Make(o);
}

}  // namespace

struct Model::Block {
  std::shared_ptr<Parameter> norm1, norm2;
  std::unique_ptr<Linear> wq, wk, wv, wo, router;
  std::unique_ptr<GroupedLinear> w13, w2;
};

// What one block's forward keeps for its backward: the op contexts and the fp32 layers'
// inputs, held in `saved` so that the memory accounting counts them (saved.h).
struct Model::Tape {
  struct BlockTape {
    Tensor x_in, rstd1, q, k, v, probs, x_mid, rstd2, gu, ys;
    OpContext cq, ck, cv, co, cr, c13, c2;
    nn::RouterOut route;
    nn::Permutation perm;
    SavedTensors saved;
  };
  std::vector<BlockTape> blocks;
  Tensor x_final, rstd_final;
  OpContext head;
  SavedTensors saved;
};

Model::Model(const ModelConfig& config, const Recipe& recipe, uint64_t seed, int threads)
    : config_(config), recipe_(recipe), threads_(threads) {
  config_.Validate();
  const int64_t d = config_.d_model, e = config_.n_experts, f = config_.d_ff;
  OpOptions ops;
  ops.accumulate_grad = true;
  ops.cache = &cache_;
  ops.threads = threads;
  uint64_t stream = 0;
  auto linear = [&](int64_t in, int64_t out, const std::string& name, double scale,
                    const Recipe& r) {
    auto l = std::make_unique<Linear>(in, out, false, r, ops, DType::kF32, name);
    InitNormal(l->weight(), scale / std::sqrt(static_cast<double>(in)), seed, ++stream);
    params_.push_back(l->weight_ptr());
    return l;
  };
  auto grouped = [&](int64_t in, int64_t out, const std::string& name, double scale) {
    auto l = std::make_unique<GroupedLinear>(e, in, out, false, recipe_, ops, DType::kF32, name);
    InitNormal(l->weight(), scale / std::sqrt(static_cast<double>(in)), seed, ++stream);
    params_.push_back(l->weight_ptr());
    return l;
  };
  // Residual branches' output projections start smaller, by 1/sqrt(2 * layers) (GPT-2).
  const double out_scale = 1.0 / std::sqrt(2.0 * static_cast<double>(config_.n_layers));

  embed_ = NewParam({config_.vocab, d}, "embed.weight");
  InitNormal(*embed_, 1.0, seed, ++stream);
  params_.push_back(embed_);
  for (int64_t i = 0; i < config_.n_layers; ++i) {
    const std::string p = StrCat("layers.", i, ".");
    auto b = std::make_unique<Block>();
    b->norm1 = NewParam({d}, p + "attn_norm.weight");
    InitOnes(*b->norm1);
    params_.push_back(b->norm1);
    b->wq = linear(d, d, p + "attn.wq", 1.0, recipe_);
    b->wk = linear(d, d, p + "attn.wk", 1.0, recipe_);
    b->wv = linear(d, d, p + "attn.wv", 1.0, recipe_);
    b->wo = linear(d, d, p + "attn.wo", out_scale, recipe_);
    b->norm2 = NewParam({d}, p + "moe_norm.weight");
    InitOnes(*b->norm2);
    params_.push_back(b->norm2);
    b->router = linear(d, e, p + "moe.router", 1.0, RouterRecipe());
    b->w13 = grouped(d, 2 * f, p + "moe.w13", 1.0);
    b->w2 = grouped(f, d, p + "moe.w2", out_scale);
    blocks_.push_back(std::move(b));
  }
  final_norm_ = NewParam({d}, "final_norm.weight");
  InitOnes(*final_norm_);
  params_.push_back(final_norm_);
  lm_head_ = linear(d, config_.vocab, "lm_head", 1.0, recipe_);
}

Model::~Model() = default;

int64_t Model::NumParameters() const {
  int64_t n = 0;
  for (const auto& p : params_) n += p->value().NumElements();
  return n;
}

Tensor Model::ToMatmulInput(const Tensor& t) const {
  return CastTo(t, recipe_.precision() == Precision::kFp32 ? DType::kF32 : DType::kBF16,
                MemoryCategory::kActivation, threads_);
}

void Model::SetRequiresGrad(bool value) {
  for (const auto& p : params_) p->set_requires_grad(value);
}

namespace {

void CheckBatch(const ModelConfig& c, std::span<const int32_t> ids,
                std::span<const int32_t> targets, int64_t batch) {
  MXTRAIN_CHECK(batch >= 1 && static_cast<int64_t>(ids.size()) == batch * c.context &&
                    ids.size() == targets.size(),
                "model: ", ids.size(), " ids and ", targets.size(), " targets for ", batch,
                " sequences of ", c.context);
}

}  // namespace

LossParts Model::ForwardBackward(std::span<const int32_t> ids, std::span<const int32_t> targets,
                                 int64_t batch, float grad_scale) {
  CheckBatch(config_, ids, targets, batch);
  const int th = threads_;
  const int64_t heads = config_.n_heads;
  const int k = static_cast<int>(config_.top_k), e = static_cast<int>(config_.n_experts);
  const int64_t n = batch * config_.context;
  const auto In = [this](const Tensor& t) { return ToMatmulInput(t); };
  const auto F32 = [th](const Tensor& t) {
    return CastTo(t, DType::kF32, MemoryCategory::kActivation, th);
  };
  Tape tape;
  tape.blocks.resize(blocks_.size());
  LossParts out;
  std::vector<LayerPolicy> policies;
  const auto note = [&](const LinearParams& l, const OpContext& ctx) {
    if (!recipe_.mxfp8()) return;
    std::string name = l.weight().name();
    if (name.ends_with(".weight")) name.resize(name.size() - 7);
    policies.push_back({std::move(name), ctx.input_policy(), ctx.weight_policy()});
  };

  // Forward.
  Tensor x = nn::EmbeddingForward(embed_->value(), ids, th);
  for (size_t i = 0; i < blocks_.size(); ++i) {
    Block& b = *blocks_[i];
    Tape::BlockTape& t = tape.blocks[i];
    t.x_in = x;
    nn::RmsNormOut n1 = nn::RmsNormForward(x, b.norm1->value(), kNormEps, th);
    t.rstd1 = n1.rstd;
    const Tensor n1x = In(n1.y);  // one bf16 copy shared by the three projections
    Forwarded q = b.wq->Forward(n1x), kk = b.wk->Forward(n1x), v = b.wv->Forward(n1x);
    t.q = F32(q.y);
    t.k = F32(kk.y);
    t.v = F32(v.y);
    note(*b.wq, q.ctx);
    note(*b.wk, kk.ctx);
    note(*b.wv, v.ctx);
    t.cq = std::move(q.ctx);
    t.ck = std::move(kk.ctx);
    t.cv = std::move(v.ctx);
    nn::AttentionOut att = nn::CausalAttentionForward(t.q, t.k, t.v, batch, heads, th);
    t.probs = att.probs;
    Forwarded o = b.wo->Forward(In(att.out));
    note(*b.wo, o.ctx);
    t.co = std::move(o.ctx);
    t.x_mid = nn::Add(x, F32(o.y), th);
    nn::RmsNormOut n2 = nn::RmsNormForward(t.x_mid, b.norm2->value(), kNormEps, th);
    t.rstd2 = n2.rstd;
    Forwarded r = b.router->Forward(n2.y);
    t.cr = std::move(r.ctx);
    t.route = nn::RouterForward(r.y, k);
    out.aux += t.route.aux_loss;
    t.perm = nn::MakePermutation(t.route.experts, n, k, e);
    Forwarded gu = b.w13->Forward(In(nn::Permute(n2.y, t.perm, th)), t.perm.groups);
    t.gu = F32(gu.y);
    note(*b.w13, gu.ctx);
    t.c13 = std::move(gu.ctx);
    Forwarded ys = b.w2->Forward(In(nn::SwiGluForward(t.gu, th)), t.perm.groups);
    t.ys = F32(ys.y);
    note(*b.w2, ys.ctx);
    t.c2 = std::move(ys.ctx);
    x = nn::Add(t.x_mid, nn::Unpermute(t.ys, t.perm, t.route.weights, th), th);
    for (const Tensor* s : {&t.x_in, &t.rstd1, &t.q, &t.k, &t.v, &t.probs, &t.x_mid, &t.rstd2,
                            &t.gu, &t.ys, &t.route.weights, &t.route.probs}) {
      t.saved.Hold(*s);
    }
  }
  tape.x_final = x;
  nn::RmsNormOut nf = nn::RmsNormForward(x, final_norm_->value(), kNormEps, th);
  tape.rstd_final = nf.rstd;
  tape.saved.Hold(tape.x_final);
  tape.saved.Hold(tape.rstd_final);
  Tensor dlogits;
  {
    Forwarded logits = lm_head_->Forward(In(nf.y));
    note(*lm_head_, logits.ctx);
    tape.head = std::move(logits.ctx);
    out.loss = nn::CrossEntropy(F32(logits.y), targets, &dlogits, grad_scale, th);
  }
  nf = nn::RmsNormOut();
  x = Tensor();

  // Backward.
  Grads gh = lm_head_->Backward(In(dlogits), std::move(tape.head));
  dlogits = Tensor();
  Tensor dx = nn::RmsNormBackward(F32(gh.dx), tape.x_final, final_norm_->value(), tape.rstd_final,
                                  final_norm_->main_grad(), th);
  gh = Grads();
  tape.saved.Release();
  const double aux_scale = config_.aux_loss_coef * grad_scale;
  for (size_t i = blocks_.size(); i-- > 0;) {
    Block& b = *blocks_[i];
    Tape::BlockTape& t = tape.blocks[i];
    // MoE branch.
    nn::UnpermuteGrads ug = nn::UnpermuteBackward(dx, t.ys, t.perm, t.route.weights, th);
    Grads g2 = b.w2->Backward(In(ug.dys), std::move(t.c2));
    ug.dys = Tensor();
    const Tensor dgu = nn::SwiGluBackward(F32(g2.dx), t.gu, th);
    g2 = Grads();
    Grads g13 = b.w13->Backward(In(dgu), std::move(t.c13));
    Tensor dn2 = nn::PermuteBackward(F32(g13.dx), t.perm, th);
    g13 = Grads();
    const Tensor dlr = nn::RouterBackward(t.route, ug.dweights, aux_scale);
    Grads gr = b.router->Backward(dlr, std::move(t.cr));
    nn::AddInPlace(dn2, gr.dx, th);
    Tensor dmid =
        nn::RmsNormBackward(dn2, t.x_mid, b.norm2->value(), t.rstd2, b.norm2->main_grad(), th);
    nn::AddInPlace(dmid, dx, th);
    // Attention branch.
    Grads go = b.wo->Backward(In(dmid), std::move(t.co));
    nn::AttentionGrads ag =
        nn::CausalAttentionBackward(F32(go.dx), t.q, t.k, t.v, t.probs, batch, heads, th);
    go = Grads();
    Grads gq = b.wq->Backward(In(ag.dq), std::move(t.cq));
    Grads gk = b.wk->Backward(In(ag.dk), std::move(t.ck));
    Grads gv = b.wv->Backward(In(ag.dv), std::move(t.cv));
    Tensor dn1 = CastTo(gq.dx, DType::kF32, MemoryCategory::kGradient, th);
    nn::AddInPlace(dn1, F32(gk.dx), th);
    nn::AddInPlace(dn1, F32(gv.dx), th);
    dx = nn::RmsNormBackward(dn1, t.x_in, b.norm1->value(), t.rstd1, b.norm1->main_grad(), th);
    nn::AddInPlace(dx, dmid, th);
    t = Tape::BlockTape();  // releases the block's holds
  }
  nn::EmbeddingBackward(dx, ids, embed_->main_grad());
  last_policies_ = std::move(policies);
  return out;
}

double Model::Evaluate(std::span<const int32_t> ids, std::span<const int32_t> targets,
                       int64_t batch) {
  CheckBatch(config_, ids, targets, batch);
  const int th = threads_;
  const int k = static_cast<int>(config_.top_k), e = static_cast<int>(config_.n_experts);
  const int64_t n = batch * config_.context;
  const auto In = [this](const Tensor& t) { return ToMatmulInput(t); };
  const auto F32 = [th](const Tensor& t) {
    return CastTo(t, DType::kF32, MemoryCategory::kActivation, th);
  };
  SetRequiresGrad(false);
  struct Restore {
    Model* m;
    ~Restore() { m->SetRequiresGrad(true); }
  } restore{this};
  Tensor x = nn::EmbeddingForward(embed_->value(), ids, th);
  for (const auto& bp : blocks_) {
    Block& b = *bp;
    const Tensor n1 = nn::RmsNormForward(x, b.norm1->value(), kNormEps, th).y;
    const Tensor n1x = In(n1);
    const Tensor q = F32(b.wq->Forward(n1x, false).y), kk = F32(b.wk->Forward(n1x, false).y),
                 v = F32(b.wv->Forward(n1x, false).y);
    const Tensor att = nn::CausalAttentionForward(q, kk, v, batch, config_.n_heads, th).out;
    const Tensor mid = nn::Add(x, F32(b.wo->Forward(In(att), false).y), th);
    const Tensor n2 = nn::RmsNormForward(mid, b.norm2->value(), kNormEps, th).y;
    const nn::RouterOut route = nn::RouterForward(b.router->Forward(n2, false).y, k);
    const nn::Permutation perm = nn::MakePermutation(route.experts, n, k, e);
    const Tensor gu = F32(b.w13->Forward(In(nn::Permute(n2, perm, th)), perm.groups, false).y);
    const Tensor ys = F32(b.w2->Forward(In(nn::SwiGluForward(gu, th)), perm.groups, false).y);
    x = nn::Add(mid, nn::Unpermute(ys, perm, route.weights, th), th);
  }
  const Tensor nf = nn::RmsNormForward(x, final_norm_->value(), kNormEps, th).y;
  return nn::CrossEntropy(F32(lm_head_->Forward(In(nf), false).y), targets, nullptr, 1.0f, th);
}

}  // namespace mxtrain
