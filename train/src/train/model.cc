// The training model (model.h): parameters, and the forward and backward of one
// micro-batch written against Linear / GroupedLinear and the fp32 layers of nn.h.
#include "mxtrain/train/model.h"

#include <cmath>
#include <cstring>

#include "mxtrain/elementwise.h"
#include "mxtrain/error.h"
#include "mxtrain/quantize.h"
#include "mxtrain/saved.h"
#include "mxtrain/train/nn.h"
#include "nn/expert_exchange.h"
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

// What the MXFP8 expert wire sends: rows quantized rowwise once, by the sender, in the
// recipe's format for their role and its scale rule.
MxTensor ForWire(const Tensor& rows, ElementFormat format, const Recipe& r, int threads,
                 MemoryCategory category) {
  QuantizeOptions q;
  q.format = format;
  q.rule = r.scale();
  q.threads = threads;
  q.category = category;
  return QuantizeRowwise(rows, q);
}

Recipe RouterRecipe() {
  RecipeOptions o;
  o.precision = Precision::kFp32;
  return Recipe::Make(o);
}

}  // namespace

std::string_view Name(ExpertWire wire) {
  switch (wire) {
    case ExpertWire::kLocal:
      return "local";
    case ExpertWire::kMxfp8:
      return "mxfp8";
    case ExpertWire::kHighPrecision:
      return "hp";
  }
  return "?";
}

ExpertWire ParseExpertWire(std::string_view name) {
  for (ExpertWire w : {ExpertWire::kLocal, ExpertWire::kMxfp8, ExpertWire::kHighPrecision}) {
    if (name == Name(w)) return w;
  }
  Fail("expert wire '", name, "' is not one of local, mxfp8, hp");
}

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
    // Expert parallelism: the exchange's route, and per sender the experts' contexts and
    // SwiGLU inputs (in place of c13, c2 and gu).
    nn::ExpertRoute ep_route;
    std::vector<OpContext> ep_c13, ep_c2;
    std::vector<Tensor> ep_gu;
    SavedTensors saved;
  };
  std::vector<BlockTape> blocks;
  Tensor x_final, rstd_final;
  OpContext head;
  SavedTensors saved;
};

Model::Model(const ModelConfig& config, const Recipe& recipe, uint64_t seed, int threads,
             ExpertParallel ep)
    : config_(config), recipe_(recipe), threads_(threads), ep_(ep) {
  config_.Validate();
  const int64_t d = config_.d_model, e = config_.n_experts, f = config_.d_ff;
  const int ep_size = ep_.group != nullptr ? ep_.group->size() : 1;
  const int ep_rank = ep_.group != nullptr ? ep_.group->rank() : 0;
  MXTRAIN_CHECK(e % ep_size == 0, "model: ", e, " experts do not split evenly over ", ep_size,
                " expert-parallel ranks");
  MXTRAIN_CHECK(ep_.wire != ExpertWire::kLocal || ep_size == 1, "model: experts on ", ep_size,
                " ranks need an exchange (wire mxfp8 or hp)");
  MXTRAIN_CHECK(ep_.wire == ExpertWire::kLocal || ep_.group != nullptr,
                "model: an expert wire needs the expert-parallel group");
  MXTRAIN_CHECK(ep_.wire != ExpertWire::kMxfp8 || recipe_.mxfp8(),
                "model: the MXFP8 expert wire needs an MXFP8 recipe, this one is ",
                Name(recipe_.precision()), " (use wire hp)");
  local_experts_ = e / ep_size;
  OpOptions ops;
  ops.accumulate_grad = true;
  ops.cache = &cache_;
  ops.threads = threads;
  // Exchanged experts add each sender's gradient into main_grad themselves, in rank order.
  OpOptions expert_ops = ops;
  expert_ops.accumulate_grad = ep_.wire == ExpertWire::kLocal;
  uint64_t stream = 0;
  auto linear = [&](int64_t in, int64_t out, const std::string& name, double scale,
                    const Recipe& r) {
    auto l = std::make_unique<Linear>(in, out, false, r, ops, DType::kF32, name);
    InitNormal(l->weight(), scale / std::sqrt(static_cast<double>(in)), seed, ++stream);
    params_.push_back(l->weight_ptr());
    return l;
  };
  // Every expert's initial value as the whole [E, out, in] tensor has it; this rank keeps
  // its share.
  auto grouped = [&](int64_t in, int64_t out, const std::string& name, double scale) {
    auto l = std::make_unique<GroupedLinear>(local_experts_, in, out, false, recipe_, expert_ops,
                                             DType::kF32, name);
    Parameter all(Tensor::Zeros(DType::kF32, {e, out, in}), name);
    InitNormal(all, scale / std::sqrt(static_cast<double>(in)), seed, ++stream);
    std::memcpy(l->weight().value().raw(),
                all.value().data<float>() + ep_rank * local_experts_ * out * in,
                l->weight().value().NumBytes());
    l->weight().MarkModified();
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
  for (const auto& p : params_) {
    bool expert = false;
    for (const auto& b : blocks_) {
      expert = expert || p == b->w13->weight_ptr() || p == b->w2->weight_ptr();
    }
    expert_param_.push_back(expert);
  }
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

// The SwiGLU gradient for the output gradient dh and the saved input gu, each as its GEMM
// gave it (the matmul dtype): in that dtype where the two agree (bf16 read and written as
// it is), else both widened to f32 (exact), the result then cast by the caller's In().
Tensor SwiGluGrad(const Tensor& dh, const Tensor& gu, int threads) {
  if (dh.dtype() == gu.dtype()) return nn::SwiGluBackward(dh, gu, threads);
  return nn::SwiGluBackward(CastTo(dh, DType::kF32, MemoryCategory::kGradient, threads),
                            CastTo(gu, DType::kF32, MemoryCategory::kActivation, threads), threads);
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
    if (ep_.wire != ExpertWire::kLocal) {
      t.ys = ExchangedExperts(b, In(nn::Permute(n2.y, t.perm, th)), t.perm, &tape, i);
      for (size_t s = 0; s < t.ep_c13.size(); ++s) {
        if (!t.ep_c13[s].defined()) continue;  // no rows from this sender
        note(*b.w13, t.ep_c13[s]);
        note(*b.w2, t.ep_c2[s]);
        break;
      }
    } else {
      Forwarded gu = b.w13->Forward(In(nn::Permute(n2.y, t.perm, th)), t.perm.groups);
      t.gu = gu.y;  // the matmul dtype: SwiGLU reads bf16 as it is and writes its In()
      note(*b.w13, gu.ctx);
      t.c13 = std::move(gu.ctx);
      Forwarded ys = b.w2->Forward(In(nn::SwiGluForward(t.gu, th)), t.perm.groups);
      t.ys = F32(ys.y);
      note(*b.w2, ys.ctx);
      t.c2 = std::move(ys.ctx);
    }
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
    Tensor dn2;
    if (ep_.wire != ExpertWire::kLocal) {
      const Tensor dxs = ExchangedExpertsBackward(b, ug.dys, tape, i);
      ug.dys = Tensor();
      dn2 = nn::PermuteBackward(dxs, t.perm, th);
    } else {
      Grads g2 = b.w2->Backward(In(ug.dys), std::move(t.c2));
      ug.dys = Tensor();
      const Tensor dgu = SwiGluGrad(g2.dx, t.gu, th);
      g2 = Grads();
      Grads g13 = b.w13->Backward(In(dgu), std::move(t.c13));
      dn2 = nn::PermuteBackward(F32(g13.dx), t.perm, th);
    }
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
    Tensor ys;
    if (ep_.wire != ExpertWire::kLocal) {
      ys = ExchangedExperts(b, In(nn::Permute(n2, perm, th)), perm, nullptr, 0);
    } else {
      const Tensor gu = b.w13->Forward(In(nn::Permute(n2, perm, th)), perm.groups, false).y;
      ys = F32(b.w2->Forward(In(nn::SwiGluForward(gu, th)), perm.groups, false).y);
    }
    x = nn::Add(mid, nn::Unpermute(ys, perm, route.weights, th), th);
  }
  const Tensor nf = nn::RmsNormForward(x, final_norm_->value(), kNormEps, th).y;
  return nn::CrossEntropy(F32(lm_head_->Forward(In(nf), false).y), targets, nullptr, 1.0f, th);
}

Tensor Model::ExchangedExperts(Block& b, const Tensor& xs, const nn::Permutation& perm, Tape* tape,
                               size_t block) {
  Communicator& group = *ep_.group;
  const int th = threads_;
  const bool mx = ep_.wire == ExpertWire::kMxfp8;
  nn::WireBytes dispatch{0, 0}, combine{0, 0};
  nn::ExpertRoute route = nn::ExchangeCounts(group, perm, local_experts_);
  // Dispatch: quantized once by the sender (MXFP8), or as the matmul input.
  MxTensor rows_mx;
  Tensor rows_hp;
  if (mx) {
    rows_mx = nn::SendRows(
        group, ForWire(xs, recipe_.input_format(), recipe_, th, MemoryCategory::kActivation), route,
        true, &dispatch);
  } else {
    rows_hp = nn::SendRows(group, xs, route, true, &dispatch);
  }
  const int64_t d = config_.d_model;
  Tensor ys_all = Tensor::Empty(xs.dtype(), {route.recv_total, d}, MemoryCategory::kActivation);
  Tape::BlockTape* t = tape != nullptr ? &tape->blocks[block] : nullptr;
  const size_t senders = route.recv_rows.size();
  if (t != nullptr) {
    t->ep_c13.resize(senders);
    t->ep_c2.resize(senders);
    t->ep_gu.resize(senders);
  }
  CallOptions call;
  call.input_requires_grad = t != nullptr;
  for (size_t s = 0; s < senders; ++s) {
    const int64_t begin = route.recv_begin[s], end = begin + route.recv_rows[s];
    if (begin == end) continue;
    const GroupList& groups = route.recv_groups[s];
    Forwarded gu = mx ? b.w13->Forward(rows_mx.Rows(begin, end), groups, call)
                      : b.w13->Forward(rows_hp.Slice(begin, end), groups, call);
    Forwarded ys = b.w2->Forward(ToMatmulInput(nn::SwiGluForward(gu.y, th)), groups, call);
    std::memcpy(ys_all.Slice(begin, end).raw(), ys.y.raw(), ys.y.NumBytes());
    if (t != nullptr) {
      t->ep_c13[s] = std::move(gu.ctx);
      t->ep_c2[s] = std::move(ys.ctx);
      t->ep_gu[s] = gu.y;
      t->saved.Hold(gu.y);
    }
  }
  rows_mx = MxTensor();
  rows_hp = Tensor();
  // Combine: back to the tokens' ranks in high precision.
  const Tensor back = nn::SendRows(group, ys_all, route, false, &combine);
  wire_.dispatch_forward += dispatch.remote;
  wire_.combine_forward += combine.remote;
  wire_.self += dispatch.local + combine.local;
  if (t != nullptr) t->ep_route = std::move(route);
  return CastTo(back, DType::kF32, MemoryCategory::kActivation, th);
}

Tensor Model::ExchangedExpertsBackward(Block& b, const Tensor& dys, Tape& tape, size_t block) {
  Communicator& group = *ep_.group;
  Tape::BlockTape& t = tape.blocks[block];
  const nn::ExpertRoute& route = t.ep_route;
  const int th = threads_;
  const bool mx = ep_.wire == ExpertWire::kMxfp8;
  nn::WireBytes combine{0, 0}, dispatch{0, 0};
  const Tensor dys_in = ToMatmulInput(dys);
  // Combine backward: the output gradient, quantized once by the tokens' rank (MXFP8 in the
  // recipe's gradient format), or as the matmul input.
  MxTensor grads_mx;
  Tensor grads_hp;
  if (mx) {
    grads_mx = nn::SendRows(
        group, ForWire(dys_in, recipe_.grad_format(), recipe_, th, MemoryCategory::kGradient),
        route, true, &combine);
  } else {
    grads_hp = nn::SendRows(group, dys_in, route, true, &combine);
  }
  Tensor dx_all =
      Tensor::Empty(dys_in.dtype(), {route.recv_total, config_.d_model}, MemoryCategory::kGradient);
  for (size_t s = 0; s < route.recv_rows.size(); ++s) {
    const int64_t begin = route.recv_begin[s], end = begin + route.recv_rows[s];
    if (begin == end) continue;
    Grads g2 = mx ? b.w2->Backward(grads_mx.Rows(begin, end), std::move(t.ep_c2[s]))
                  : b.w2->Backward(grads_hp.Slice(begin, end), std::move(t.ep_c2[s]));
    nn::AddInPlace(b.w2->weight().main_grad(), g2.dw, th);
    const Tensor dgu = SwiGluGrad(g2.dx, t.ep_gu[s], th);
    g2 = Grads();
    Grads g13 = b.w13->Backward(ToMatmulInput(dgu), std::move(t.ep_c13[s]));
    nn::AddInPlace(b.w13->weight().main_grad(), g13.dw, th);
    std::memcpy(dx_all.Slice(begin, end).raw(), g13.dx.raw(), g13.dx.NumBytes());
  }
  grads_mx = MxTensor();
  grads_hp = Tensor();
  // Dispatch backward: the input gradient back to the tokens' ranks in high precision.
  const Tensor back = nn::SendRows(group, dx_all, route, false, &dispatch);
  wire_.combine_backward += combine.remote;
  wire_.dispatch_backward += dispatch.remote;
  wire_.self += combine.local + dispatch.local;
  return CastTo(back, DType::kF32, MemoryCategory::kGradient, th);
}

}  // namespace mxtrain
