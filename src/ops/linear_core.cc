// The body of Linear and GroupedLinear (linear_core.h): what each policy quantizes and
// keeps, and the three GEMMs. Numerics live in the kernels; this file only decides which
// layouts exist when, so that every layout is quantized from a high-precision tensor.
#include "ops/linear_core.h"

#include <cstring>

#include "mxtrain/elementwise.h"
#include "mxtrain/error.h"
#include "mxtrain/gemm.h"
#include "mxtrain/hp_gemm.h"
#include "mxtrain/quantize.h"

namespace mxtrain::internal {
namespace {

QuantizeOptions QuantOptions(ElementFormat format, const LayerView& l) {
  QuantizeOptions q;
  q.format = format;
  q.rule = l.recipe->scale();
  q.threads = l.options.threads;
  q.category = MemoryCategory::kQuantized;
  return q;
}

WeightQuantCache* CacheOf(const LayerView& l) {
  if (!l.recipe->reuse_quantized_weights() || !l.use_weight_cache) return nullptr;
  return l.options.cache != nullptr ? l.options.cache : &WeightQuantCache::Global();
}

// A buffer made only to be kept for the backward is counted as saved from now on.
void MarkSaved(const Tensor& t) {
  if (t.defined()) t.storage()->Recategorize(MemoryCategory::kSavedForBackward);
}
void MarkSaved(const MxTensor& t) {
  MarkSaved(t.data());
  MarkSaved(t.scales());
}

// [prod(leading), last] view of a tensor of rank >= 2.
Tensor Flatten(const Tensor& t) {
  int64_t rows = 1;
  for (int i = 0; i + 1 < t.rank(); ++i) rows *= t.shape()[i];
  return t.Reshape({rows, t.shape()[-1]});
}

#ifndef NDEBUG
// FNV-1a over 8-byte words (and the tail bytes): debug builds only, to catch an in-place
// write to a tensor a deferred backward references (linear.h, "rules of a context").
uint64_t Checksum(const Tensor& t) {
  if (!t.defined()) return 0;
  constexpr uint64_t kPrime = 0x100000001b3ULL;
  uint64_t h = 0xcbf29ce484222325ULL;
  const auto* p = static_cast<const unsigned char*>(t.raw());
  const size_t n = t.NumBytes();
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    uint64_t w;
    std::memcpy(&w, p + i, 8);
    h = (h ^ w) * kPrime;
  }
  for (; i < n; ++i) h = (h ^ p[i]) * kPrime;
  return h;
}

void CheckUnchanged(const LayerView& l, const Tensor& t, uint64_t want, const char* what) {
  const uint64_t got = Checksum(t);
  MXTRAIN_CHECK(got == want, l.op, " (weight '", l.weight->name(), "'): the ", what,
                " a deferred backward reads was modified in place between forward and backward",
                " (checksum ", want, " -> ", got, "); the backward would not use its values");
}
#endif

bool IsHighPrecision(const Tensor& t) {
  return t.defined() && (t.dtype() == DType::kF32 || t.dtype() == DType::kBF16);
}

// The bias as the GEMMs take it (f32).
Tensor Bias32(const LayerView& l) {
  if (l.bias == nullptr) return Tensor();
  return CastTo(l.bias->value(), DType::kF32, MemoryCategory::kWorkspace, l.options.threads);
}

void CheckForwardInput(const LayerView& l, const Tensor& x, const GroupList* groups) {
  const Shape& w = l.weight->shape();
  const int64_t k = w[-1];
  MXTRAIN_CHECK(IsHighPrecision(x), l.op, ": input must be an f32 or bf16 tensor");
  MXTRAIN_CHECK(x.rank() >= 2, l.op, ": input must have rank >= 2, got ", x.shape().ToString());
  MXTRAIN_CHECK(x.shape()[-1] == k, l.op, ": input ", x.shape().ToString(), " has ", x.shape()[-1],
                " features but weight '", l.weight->name(), "' ", w.ToString(), " takes ", k);
  if (groups != nullptr) {
    MXTRAIN_CHECK(x.rank() == 2, l.op, ": input must be 2-D [tokens, features], got ",
                  x.shape().ToString());
    MXTRAIN_CHECK(groups->num_groups() == w[0], l.op, ": ", groups->num_groups(), " groups for ",
                  w[0], " experts");
    MXTRAIN_CHECK(groups->total_rows() == x.shape()[0], l.op, ": group list covers ",
                  groups->total_rows(), " tokens but the input has ", x.shape()[0]);
  }
}

// The policies a forward applies: auto resolved (linear.h "The auto policy").
SavePolicy ResolveInputPolicy(const LayerView& l, const Tensor& x2, OpState& st) {
  const SavePolicy p = l.recipe->input_policy();
  if (p != SavePolicy::kAuto) return p;
  const std::shared_ptr<AutoRecord>& record = *l.auto_record;
  NoteAutoConsumer(x2.storage(), record);
  const int consumers = record->consumers.load(std::memory_order_relaxed);
  st.x_watch = x2.storage();
  // Alive anyway (a pending backward holds it, or the caller kept it before): free.
  if (x2.storage()->backward_holds() > 0 || record->input_alive.load(std::memory_order_relaxed)) {
    return SavePolicy::kDeferred;
  }
  // Else one reference for all consumers against a columnwise copy each (1 + 1/32 bytes
  // per element): bf16 wins from 2 consumers, f32 from 4.
  const auto copies_x32 = static_cast<size_t>(consumers) * (kMxBlock + 1);
  return DTypeSize(x2.dtype()) * kMxBlock < copies_x32 ? SavePolicy::kDeferred
                                                       : SavePolicy::kQuantized;
}

SavePolicy ResolveWeightPolicy(const LayerView& l) {
  const SavePolicy p = l.recipe->weight_policy();
  if (p != SavePolicy::kAuto) return p;
  const Storage& w = *l.weight->value().storage();
  return w.persistent() || w.borrowed() ? SavePolicy::kDeferred : SavePolicy::kQuantized;
}

// After an auto input's backward: was the input alive anyway? A deferred input is, when
// anything besides this context references its buffer (the context's tensor and its hold
// are two references); a quantized one, when its buffer outlived the forward.
void RecordAutoInput(const LayerView& l, const OpState& st) {
  // Resolved from auto: an MX wgrad read the input under a policy the forward chose.
  if (l.recipe->input_policy() != SavePolicy::kAuto || !st.input_policy) return;
  bool alive;
  if (st.input_policy == SavePolicy::kDeferred) {
    alive = st.x_hp.defined() && st.x_hp.storage().use_count() > 2;
  } else {
    alive = !st.x_watch.expired();
  }
  if (alive) (*l.auto_record)->input_alive.store(true, std::memory_order_relaxed);
}

// Forward with MXFP8: x2 [M, K] rowwise for fprop (unless fprop runs in high precision);
// the columnwise layouts per policy, or the high-precision operands an HP dgrad / wgrad
// reads.
Tensor ForwardMx(const LayerView& l, const Tensor& x2, const MxTensor* x_mx,
                 const GroupList* groups, OpState& st) {
  const Recipe& r = *l.recipe;
  Parameter& w = *l.weight;
  const QuantizeOptions qx = QuantOptions(r.input_format(), l);
  const QuantizeOptions qw = QuantOptions(r.weight_format(), l);
  WeightQuantCache* cache = CacheOf(l);
  const DType c = r.compute_dtype();
  const int threads = l.options.threads;
  const bool mx_fprop = r.mx(TrainingGemm::kFprop);
  // The high-precision operands rounded to the compute type, when an HP GEMM reads them.
  Tensor xc, wc;
  if (!mx_fprop || (st.need_dw && !r.mx(TrainingGemm::kWgrad))) {
    xc = CastTo(x2, c, MemoryCategory::kWorkspace, threads);
  }
  if (!mx_fprop) wc = CastTo(w.value(), c, MemoryCategory::kWorkspace, threads);

  // The input: rowwise for an MX fprop; for the wgrad, a columnwise copy (quantized), a
  // reference (deferred), or the rounded input an HP wgrad reads.
  MxTensor x_row;
  if (st.need_dw && !r.mx(TrainingGemm::kWgrad)) {
    st.x_hp = xc;
    if (xc.storage() != x2.storage()) MarkSaved(xc);
  } else if (st.need_dw && x_mx != nullptr) {
    // Arrived quantized: a columnwise copy and a reference to the codes cost the same
    // 1 + 1/32 bytes per element, and nothing else keeps the codes: auto quantizes.
    const SavePolicy p = r.input_policy();
    st.input_policy = p == SavePolicy::kAuto ? SavePolicy::kQuantized : p;
  } else if (st.need_dw) {
    st.input_policy = ResolveInputPolicy(l, x2, st);
  }
  const bool x_col_now = st.input_policy == SavePolicy::kQuantized;
  if (x_mx != nullptr) {
    // The codes as they arrived serve the fprop; the columnwise copy comes from their
    // dequantization (quantized now, or in the backward from the kept codes).
    if (mx_fprop) x_row = *x_mx;
    if (x_col_now)
      st.x_col = groups ? QuantizeGrouped(x2, *groups, qx) : QuantizeColumnwise(x2, qx);
    if (st.input_policy == SavePolicy::kDeferred) st.x_row = *x_mx;
  } else if (mx_fprop && x_col_now) {
    DualMx d = groups ? QuantizeDualGrouped(x2, *groups, qx) : QuantizeDual(x2, qx);
    x_row = std::move(d.rowwise);
    st.x_col = std::move(d.columnwise);
  } else if (x_col_now) {
    st.x_col = groups ? QuantizeGrouped(x2, *groups, qx) : QuantizeColumnwise(x2, qx);
  } else if (mx_fprop) {
    x_row = QuantizeRowwise(x2, qx);
  }
  if (x_col_now) MarkSaved(st.x_col);
  if (st.input_policy == SavePolicy::kDeferred && x_mx == nullptr) st.x_hp = x2;  // a reference

  // The weight likewise, for the dgrad. An HP dgrad references the parameter and rounds it
  // in the backward: the parameter is alive anyway.
  if (st.need_dx && r.mx(TrainingGemm::kDgrad)) st.weight_policy = ResolveWeightPolicy(l);
  const bool w_col_now = st.weight_policy == SavePolicy::kQuantized;
  MxTensor w_row;
  if (mx_fprop && w_col_now) {
    DualMx d = cache ? cache->GetDual(w, qw) : QuantizeDual(w.value(), qw);
    w_row = std::move(d.rowwise);
    st.w_col = std::move(d.columnwise);
  } else if (w_col_now) {
    st.w_col =
        cache ? cache->Get(w, BlockAxis::kColumnwise, qw) : QuantizeColumnwise(w.value(), qw);
  } else if (mx_fprop) {
    w_row = cache ? cache->Get(w, BlockAxis::kRowwise, qw) : QuantizeRowwise(w.value(), qw);
  }
  if (w_col_now && cache == nullptr) MarkSaved(st.w_col);
  if (st.need_dx && st.weight_policy != SavePolicy::kQuantized) {
    st.w_hp = w.value();
    st.w_version = w.version();
  }

  const Tensor bias = Bias32(l);
  GemmOptions o;
  o.out_dtype = x2.dtype();
  o.bias = bias.defined() ? &bias : nullptr;
  o.threads = threads;
  if (!mx_fprop) {
    return groups ? HpGroupedGemm(xc, wc, Contract::kLast, *groups, c, o)
                  : HpGemm(xc, Contract::kLast, wc, Contract::kLast, c, o);
  }
  return groups ? MxGroupedGemm(x_row, w_row, *groups, o) : MxGemm(x_row, w_row, o);
}

// Forward with MXFP8 off: the operands rounded to the compute type, kept if needed.
Tensor ForwardHp(const LayerView& l, const Tensor& x2, const GroupList* groups, OpState& st) {
  const DType c = l.recipe->compute_dtype();
  const int threads = l.options.threads;
  Parameter& w = *l.weight;
  const Tensor xc = CastTo(x2, c, MemoryCategory::kWorkspace, threads);
  const Tensor wc = CastTo(w.value(), c, MemoryCategory::kWorkspace, threads);
  if (st.need_dw) {
    st.x_hp = xc;
    if (xc.storage() != x2.storage()) MarkSaved(xc);
  }
  if (st.need_dx) {
    st.w_hp = wc;
    if (wc.storage() != w.value().storage()) {
      MarkSaved(wc);
    } else {
      st.w_version = w.version();
    }
  }
  const Tensor bias = Bias32(l);
  GemmOptions o;
  o.out_dtype = x2.dtype();
  o.bias = bias.defined() ? &bias : nullptr;
  o.threads = threads;
  return groups ? HpGroupedGemm(xc, wc, Contract::kLast, *groups, c, o)
                : HpGemm(xc, Contract::kLast, wc, Contract::kLast, c, o);
}

// Where dW / db go: into main_grad, or a new f32 tensor of the parameter's shape.
GemmOptions GradOptions(const LayerView& l, Parameter& p) {
  GemmOptions o;
  o.threads = l.options.threads;
  o.category = MemoryCategory::kGradient;
  if (l.options.accumulate_grad) o.accumulate = &p.main_grad();
  return o;
}

// A new f32 gradient in the parameter's dtype (accumulated ones stay f32 main_grad).
Tensor InParamDtype(const LayerView& l, const Parameter& p, Tensor g32) {
  if (l.options.accumulate_grad) return g32;
  return CastTo(g32, p.value().dtype(), MemoryCategory::kGradient, l.options.threads);
}

void CheckWeightUnchanged(const LayerView& l, const OpState& st) {
  if (!st.w_version.has_value()) return;
  MXTRAIN_CHECK(l.weight->version() == *st.w_version, l.op, ": weight '", l.weight->name(),
                "' was modified in place between forward and backward (version ", *st.w_version,
                " -> ", l.weight->version(),
                "); the backward would not use the weights the forward used");
}

void BackwardMx(const LayerView& l, const Tensor& dy2, const MxTensor* dy_mx,
                const GroupList* groups, OpState& st, Grads& g) {
  const Recipe& r = *l.recipe;
  Parameter& w = *l.weight;
  const DType c = r.compute_dtype();
  const int threads = l.options.threads;
  const bool mx_dgrad = r.mx(TrainingGemm::kDgrad), mx_wgrad = r.mx(TrainingGemm::kWgrad);
  const QuantizeOptions qg = QuantOptions(r.grad_format(), l);
  // dY in the layouts the MX GEMMs read, and rounded to the compute type for the HP ones.
  const bool need_row = st.need_dx && mx_dgrad, need_col = st.need_dw && mx_wgrad;
  MxTensor dy_row, dy_col;
  if (dy_mx != nullptr) {  // arrived quantized: the codes serve the dgrad as they are
    if (need_row) dy_row = *dy_mx;
    if (need_col) dy_col = groups ? QuantizeGrouped(dy2, *groups, qg) : QuantizeColumnwise(dy2, qg);
  } else if (need_row && need_col) {
    DualMx d = groups ? QuantizeDualGrouped(dy2, *groups, qg) : QuantizeDual(dy2, qg);
    dy_row = std::move(d.rowwise);
    dy_col = std::move(d.columnwise);
  } else if (need_row) {
    dy_row = QuantizeRowwise(dy2, qg);
  } else if (need_col) {
    dy_col = groups ? QuantizeGrouped(dy2, *groups, qg) : QuantizeColumnwise(dy2, qg);
  }
  Tensor dyc;
  if ((st.need_dx && !mx_dgrad) || (st.need_dw && !mx_wgrad)) {
    dyc = CastTo(dy2, c, MemoryCategory::kWorkspace, threads);
  }

  if (st.need_dx) {
    GemmOptions o;
    o.out_dtype = st.x_dtype;
    o.threads = threads;
    o.category = MemoryCategory::kGradient;
    if (!mx_dgrad) {
      CheckWeightUnchanged(l, st);
      const Tensor wc = CastTo(st.w_hp, c, MemoryCategory::kWorkspace, threads);
      g.dx = groups ? HpGroupedGemm(dyc, wc, Contract::kFirst, *groups, c, o)
                    : HpGemm(dyc, Contract::kLast, wc, Contract::kFirst, c, o);
    } else {
      MxTensor w_col = std::move(st.w_col);
      if (!w_col.defined()) {  // deferred weight
        CheckWeightUnchanged(l, st);
        const QuantizeOptions qw = QuantOptions(r.weight_format(), l);
        WeightQuantCache* cache = CacheOf(l);
        w_col =
            cache ? cache->Get(w, BlockAxis::kColumnwise, qw) : QuantizeColumnwise(w.value(), qw);
      }
      g.dx = groups ? MxGroupedGemm(dy_row, w_col, *groups, o) : MxGemm(dy_row, w_col, o);
      st.saved.Drop(w_col);  // dgrad was their only reader
    }
    st.saved.Drop(st.w_hp);
  }
  if (st.need_dw) {
    const GemmOptions o = GradOptions(l, w);
    if (!mx_wgrad) {
      g.dw = InParamDtype(l, w,
                          groups ? HpGroupedWgrad(dyc, st.x_hp, *groups, c, o)
                                 : HpGemm(dyc, Contract::kFirst, st.x_hp, Contract::kFirst, c, o));
    } else {
      MxTensor x_col = std::move(st.x_col);
      if (!x_col.defined()) {  // deferred input
        const QuantizeOptions qx = QuantOptions(r.input_format(), l);
        const Tensor x_hp =
            st.x_row.defined() ? Dequantize(st.x_row, DType::kBF16, threads) : st.x_hp;
        x_col = groups ? QuantizeGrouped(x_hp, *groups, qx) : QuantizeColumnwise(x_hp, qx);
        st.saved.Drop(st.x_row);
      }
      g.dw =
          InParamDtype(l, w, groups ? MxGroupedWgrad(dy_col, x_col, o) : MxGemm(dy_col, x_col, o));
      st.saved.Drop(x_col);
    }
    st.saved.Drop(st.x_hp);
  }
}

void BackwardHp(const LayerView& l, const Tensor& dy2, const GroupList* groups, OpState& st,
                Grads& g) {
  const DType c = l.recipe->compute_dtype();
  const Tensor dyc = CastTo(dy2, c, MemoryCategory::kWorkspace, l.options.threads);
  if (st.need_dx) {
    CheckWeightUnchanged(l, st);
    GemmOptions o;
    o.out_dtype = st.x_dtype;
    o.threads = l.options.threads;
    o.category = MemoryCategory::kGradient;
    g.dx = groups ? HpGroupedGemm(dyc, st.w_hp, Contract::kFirst, *groups, c, o)
                  : HpGemm(dyc, Contract::kLast, st.w_hp, Contract::kFirst, c, o);
    st.saved.Drop(st.w_hp);
  }
  if (st.need_dw) {
    const GemmOptions o = GradOptions(l, *l.weight);
    g.dw = InParamDtype(l, *l.weight,
                        groups ? HpGroupedWgrad(dyc, st.x_hp, *groups, c, o)
                               : HpGemm(dyc, Contract::kFirst, st.x_hp, Contract::kFirst, c, o));
    st.saved.Drop(st.x_hp);
  }
}

}  // namespace

void CheckArrivingMx(const LayerView& l, const MxTensor& t, ElementFormat want, const char* what) {
  MXTRAIN_CHECK(l.recipe->mxfp8(), l.op, " (weight '", l.weight->name(), "'): a quantized ", what,
                " needs an MXFP8 recipe, this one is ", Name(l.recipe->precision()));
  MXTRAIN_CHECK(t.defined() && t.axis() == BlockAxis::kRowwise && t.shape().rank() == 2, l.op,
                " (weight '", l.weight->name(), "'): a quantized ", what,
                " must be a 2-D rowwise MxTensor");
  MXTRAIN_CHECK(t.format() == want && t.rule() == l.recipe->scale(), l.op, " (weight '",
                l.weight->name(), "'): the ", what, " arrived as ", Name(t.format()), " / ",
                Name(t.rule()), " but the recipe gives it ", Name(want), " / ",
                Name(l.recipe->scale()));
}

Forwarded LinearForward(const LayerView& l, const Tensor& x, const GroupList* groups,
                        const CallOptions& call, const MxTensor* x_mx) {
  CheckForwardInput(l, x, groups);
  const Tensor x2 = Flatten(x);
  auto st = std::make_unique<OpState>();
  st->weight_id = l.weight->id();
  st->threads = l.options.threads;
  st->use_weight_cache = l.use_weight_cache;
  st->need_dx = call.input_requires_grad;
  st->need_dw = call.weight_requires_grad.value_or(l.weight->requires_grad());
  st->need_db = l.bias != nullptr && call.bias_requires_grad.value_or(l.bias->requires_grad());
  st->x_shape = x.shape();
  st->x_dtype = x.dtype();
  if (groups != nullptr) st->groups = *groups;

  Tensor y2 =
      l.recipe->mxfp8() ? ForwardMx(l, x2, x_mx, groups, *st) : ForwardHp(l, x2, groups, *st);
  Shape y_shape = x.shape();
  y_shape[-1] = y2.shape()[1];

  Forwarded out{y2.Reshape(y_shape), OpContext()};
  if (st->need_dx || st->need_dw || st->need_db) {
    for (const MxTensor* t : {&st->x_col, &st->w_col, &st->x_row}) {
      if (t->defined()) st->saved.Hold(*t);
    }
    st->saved.Hold(st->x_hp);
    st->saved.Hold(st->w_hp);
#ifndef NDEBUG
    st->x_checksum = Checksum(st->x_hp);
    st->w_checksum = Checksum(st->w_hp);
#endif
    OpAccess::Set(out.ctx, std::move(st));
  }
  return out;
}

Grads LinearBackward(const LayerView& layer, const Tensor& dy, OpContext ctx,
                     const MxTensor* dy_mx) {
  MXTRAIN_CHECK(!ctx.spent(), layer.op, " (weight '", layer.weight->name(),
                "'): this context was already used by a backward; a forward's context "
                "serves one backward");
  std::unique_ptr<OpState> st = OpAccess::Take(ctx);
  MXTRAIN_CHECK(st != nullptr, layer.op, " (weight '", layer.weight->name(),
                "'): backward needs the context of a forward that saved for it (none given, "
                "or no gradient was wanted)");
  MXTRAIN_CHECK(st->weight_id == layer.weight->id(), layer.op, " (weight '", layer.weight->name(),
                "', id ", layer.weight->id(),
                "): backward got the context of a forward of another layer (weight id ",
                st->weight_id, ")");
  // The forward call's threads and cache choice, not whatever the layer says now.
  LayerView l = layer;
  l.options.threads = st->threads;
  l.use_weight_cache = st->use_weight_cache;
  CheckWeightUnchanged(l, *st);  // the precise message first, when the version says it
#ifndef NDEBUG
  CheckUnchanged(l, st->x_hp, st->x_checksum, "input");
  CheckUnchanged(l, st->w_hp, st->w_checksum, "weight");
#endif
  Shape want = st->x_shape;
  want[-1] = l.weight->shape()[-2];
  MXTRAIN_CHECK(IsHighPrecision(dy) && dy.shape() == want, l.op,
                ": output gradient must be f32 "
                "or bf16 of shape ",
                want.ToString(), ", got ",
                dy.defined() ? dy.shape().ToString() : std::string("nothing"));
  const Tensor dy2 = Flatten(dy);
  const GroupList* groups = st->groups ? &*st->groups : nullptr;

  Grads g;
  if (l.recipe->mxfp8()) {
    RecordAutoInput(l, *st);
    BackwardMx(l, dy2, dy_mx, groups, *st, g);
  } else {
    BackwardHp(l, dy2, groups, *st, g);
  }
  if (g.dx.defined()) g.dx = g.dx.Reshape(st->x_shape);
  if (st->need_db) {
    Tensor* acc = l.options.accumulate_grad ? &l.bias->main_grad() : nullptr;
    Tensor db = groups ? SumRowsGrouped(dy2, *groups, acc, l.options.threads)
                       : SumRows(dy2, acc, l.options.threads);
    g.db = InParamDtype(l, *l.bias, std::move(db));
  }
  return g;  // st's holds end here
}

}  // namespace mxtrain::internal
