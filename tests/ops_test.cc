// Linear and GroupedLinear: every combination of op x input policy x weight policy x
// weight cache x input-needs-grad x recipe x input and parameter dtype runs forward and
// backward, and
//  - its outputs and gradients are bit-identical to the (quantized, quantized, no cache)
//    run of the same op, recipe and flags;
//  - that run is within NUMERICS.md §7's bound of a double-precision chain rule on the
//    operands quantized by the scalar reference (ref::), and within 25 dB SQNR of the
//    unquantized fp32 layer;
//  - the bytes it keeps for the backward equal the closed-form figures.
// Then: the weight cache across micro-batches, gradient accumulation into main_grad,
// frozen weights, the MXFP8-off baselines, and the errors.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <tuple>
#include <string>
#include <vector>

#include "gemm_test_util.h"
#include "mxtrain/elementwise.h"
#include "mxtrain/error.h"
#include "mxtrain/gemm.h"
#include "mxtrain/grouped_linear.h"
#include "mxtrain/linear.h"
#include "mxtrain/quantize.h"
#include "test_util.h"

namespace mxtrain {
namespace {

using testing_util::BytesEqual;
using testing_util::ExpectWithinBound;
using testing_util::MakeBf16;
using testing_util::MakeF32;
using testing_util::RandomValues;

// ---- problem data ------------------------------------------------------------------------

struct Problem {
  bool grouped;
  Shape x_shape;  // dense: [2, 35, K] (3-D, flattened by the op); grouped: [M, K]
  int64_t m, k, n, experts;
  GroupList groups;  // grouped only
  std::vector<float> x, w, b, dy;
};

Problem MakeProblem(bool grouped, uint64_t seed) {
  Problem p;
  p.grouped = grouped;
  if (grouped) {
    p.m = 100, p.k = 64, p.n = 48, p.experts = 4;
    p.x_shape = Shape{p.m, p.k};
    // An empty expert and sizes that are not multiples of 32.
    p.groups = GroupList::Make(std::vector<int64_t>{31, 0, 45, 24}, GroupListType::kCounts, p.m);
  } else {
    p.m = 70, p.k = 96, p.n = 40, p.experts = 1;
    p.x_shape = Shape{2, 35, p.k};
  }
  p.x = RandomValues(p.m * p.k, seed, -1, 1);
  p.w = RandomValues(p.experts * p.n * p.k, seed + 1, -3, -2);
  p.b = RandomValues(p.experts * p.n, seed + 2, -2, 0);
  p.dy = RandomValues(p.m * p.n, seed + 3, -8, -6);
  return p;
}

Shape WeightShape(const Problem& p) {
  return p.grouped ? Shape{p.experts, p.n, p.k} : Shape{p.n, p.k};
}
Shape BiasShape(const Problem& p) { return p.grouped ? Shape{p.experts, p.n} : Shape{p.n}; }
Shape YShape(const Problem& p) {
  Shape s = p.x_shape;
  s[-1] = p.n;
  return s;
}

Tensor MakeHp(DType dtype, const Shape& shape, const std::vector<float>& v) {
  return dtype == DType::kF32 ? MakeF32(shape, v) : MakeBf16(shape, v);
}

// A value as the op saw it (bf16 inputs are the rounded values).
std::vector<double> AsDoubles(const Tensor& t) {
  std::vector<double> out(static_cast<size_t>(t.NumElements()));
  for (size_t i = 0; i < out.size(); ++i) {
    out[i] = t.dtype() == DType::kF32 ? t.data<float>()[i] : Bf16ToF32(t.data<uint16_t>()[i]);
  }
  return out;
}

// One layer, dense or grouped, behind one interface for the combination runs.
struct Layer {
  std::unique_ptr<Linear> dense;
  std::unique_ptr<GroupedLinear> grouped;
  const GroupList* groups = nullptr;

  Layer(const Problem& p, const Recipe& r, const OpOptions& o, DType param_dtype = DType::kF32) {
    auto w = std::make_shared<Parameter>(MakeHp(param_dtype, WeightShape(p), p.w), "w");
    auto b = std::make_shared<Parameter>(MakeHp(param_dtype, BiasShape(p), p.b), "b");
    if (p.grouped) {
      grouped = std::make_unique<GroupedLinear>(w, b, r, o);
      groups = &p.groups;
    } else {
      dense = std::make_unique<Linear>(w, b, r, o);
    }
  }
  Parameter& weight() const { return dense ? dense->weight() : grouped->weight(); }
  Parameter& bias() const { return dense ? *dense->bias() : *grouped->bias(); }
  Forwarded Forward(const Tensor& x, bool input_grad = true) const {
    return dense ? dense->Forward(x, input_grad) : grouped->Forward(x, *groups, input_grad);
  }
  Grads Backward(const Tensor& dy, OpContext ctx) const {
    return dense ? dense->Backward(dy, std::move(ctx)) : grouped->Backward(dy, std::move(ctx));
  }
};

// ---- the combination runs -----------------------------------------------------------------

struct Combo {
  bool grouped;
  SavePolicy input_policy;
  SavePolicy weight_policy;
  bool cache;
  bool input_grad;
  RecipeFormats formats;
  DType x_dtype;
  DType param_dtype;

  std::string Name() const {
    return StrCat(grouped ? "grouped" : "dense", " input=", mxtrain::Name(input_policy),
                  " weight=", mxtrain::Name(weight_policy), cache ? " cache" : " no-cache",
                  input_grad ? " dx" : " no-dx", " ", mxtrain::Name(formats), " x=",
                  mxtrain::Name(x_dtype), " params=", mxtrain::Name(param_dtype));
  }
  Recipe MakeRecipe() const {
    RecipeOptions o;
    o.formats = formats;
    o.input_policy = input_policy;
    o.weight_policy = weight_policy;
    o.reuse_quantized_weights = cache;
    return Recipe::Make(o);
  }
};

struct RunResult {
  Tensor y, dx, dw, db;
  SavedMemory saved;
  int64_t held_delta;  // MemoryReport::held_for_backward after the forward, minus before
};

RunResult RunCombo(const Problem& p, const Combo& c) {
  WeightQuantCache cache;
  OpOptions o;
  o.cache = &cache;
  const Layer layer(p, c.MakeRecipe(), o, c.param_dtype);
  const Tensor x = MakeHp(c.x_dtype, p.x_shape, p.x);
  const Tensor dy = MakeHp(c.x_dtype, YShape(p), p.dy);
  RunResult r;
  const int64_t held_before = ReadMemory().held_for_backward.live_bytes;
  Forwarded f = layer.Forward(x, c.input_grad);
  r.held_delta = ReadMemory().held_for_backward.live_bytes - held_before;
  r.saved = f.ctx.saved_memory();
  r.y = f.y;
  Grads g = layer.Backward(dy, std::move(f.ctx));
  EXPECT_EQ(ReadMemory().held_for_backward.live_bytes, held_before) << "backward released all";
  r.dx = g.dx;
  r.dw = g.dw;
  r.db = g.db;
  return r;
}

// The closed-form bytes a combination keeps: an FP8 columnwise copy of [R, C] costs R*C
// element bytes plus one scale byte per column per started block of 32 rows.
SavedMemory ExpectedSaved(const Problem& p, const Combo& c) {
  SavedMemory m;
  const int64_t x_scale_rows = p.grouped ? p.groups.ScaleRows() : CeilDiv(p.m, 32);
  const int64_t x_col = p.m * p.k + x_scale_rows * p.k;
  const int64_t w_col = p.experts * (p.n * p.k + CeilDiv(p.n, 32) * p.k);
  const int64_t x_hp = p.m * p.k * static_cast<int64_t>(DTypeSize(c.x_dtype));
  const int64_t w_hp = p.experts * p.n * p.k * static_cast<int64_t>(DTypeSize(c.param_dtype));
  // wgrad always runs (the weight needs a gradient), so X is kept one way or the other.
  if (c.input_policy == SavePolicy::kQuantized) {
    m.allocated_bytes += x_col;
  } else {
    m.referenced_bytes += x_hp;
  }
  if (c.input_grad) {  // dgrad runs: W columnwise is kept, cached, or made later from W
    if (c.weight_policy == SavePolicy::kDeferred) {
      m.referenced_bytes += w_hp;
    } else if (c.cache) {
      m.referenced_bytes += w_col;  // the cache's entry
    } else {
      m.allocated_bytes += w_col;
    }
  }
  return m;
}

double Sqnr(const Tensor& got, const std::vector<double>& want) {
  const std::vector<double> g = AsDoubles(got);
  double signal = 0, noise = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    signal += want[i] * want[i];
    noise += (g[i] - want[i]) * (g[i] - want[i]);
  }
  return 10.0 * std::log10(signal / std::max(noise, 1e-300));
}

// The unquantized layer in double: Y = X W^T + b, dX = dY W, dW = dY^T X, per expert.
struct Exact {
  std::vector<double> y, dx, dw;
};

Exact ExactLayer(const Problem& p, const std::vector<double>& x, const std::vector<double>& dy) {
  Exact e;
  e.y.assign(static_cast<size_t>(p.m * p.n), 0.0);
  e.dx.assign(static_cast<size_t>(p.m * p.k), 0.0);
  e.dw.assign(static_cast<size_t>(p.experts * p.n * p.k), 0.0);
  for (int g = 0; g < p.experts; ++g) {
    const int64_t r0 = p.grouped ? p.groups.begin(g) : 0, r1 = p.grouped ? p.groups.end(g) : p.m;
    const float* w = p.w.data() + g * p.n * p.k;
    for (int64_t i = r0; i < r1; ++i) {
      for (int64_t j = 0; j < p.n; ++j) {
        double s = p.b[g * p.n + j];
        for (int64_t k = 0; k < p.k; ++k) s += x[i * p.k + k] * w[j * p.k + k];
        e.y[i * p.n + j] = s;
        for (int64_t k = 0; k < p.k; ++k) {
          e.dx[i * p.k + k] += dy[i * p.n + j] * w[j * p.k + k];
          e.dw[(g * p.n + j) * p.k + k] += dy[i * p.n + j] * x[i * p.k + k];
        }
      }
    }
  }
  return e;
}

// The reference combination against the oracle: each GEMM within §7's bound of the
// double-precision product of the operands that the scalar reference quantizes.
void CheckAgainstOracle(const Problem& p, const Combo& c, const RunResult& r) {
  const Recipe recipe = c.MakeRecipe();
  const QuantizeOptions qx{recipe.input_format(), recipe.scale()};
  const QuantizeOptions qw{recipe.weight_format(), recipe.scale()};
  const QuantizeOptions qg{recipe.grad_format(), recipe.scale()};
  const Tensor x = MakeHp(c.x_dtype, {p.m, p.k}, p.x);
  const Tensor dy = MakeHp(c.x_dtype, {p.m, p.n}, p.dy);
  const Tensor w = MakeF32(WeightShape(p), p.w);
  const Tensor b = MakeF32(BiasShape(p), p.b);
  const Tensor y2 = r.y.Reshape({p.m, p.n});
  const MxTensor x_row = ref::QuantizeRowwise(x, qx), w_row = ref::QuantizeRowwise(w, qw);
  const MxTensor dy_row = ref::QuantizeRowwise(dy, qg), w_col = ref::QuantizeColumnwise(w, qw);
  const std::string what = c.Name();
  if (!p.grouped) {
    ExpectWithinBound(y2, x_row, w_row, what + " fprop", &b);
    if (c.input_grad) ExpectWithinBound(r.dx.Reshape({p.m, p.k}), dy_row, w_col, what + " dgrad");
    ExpectWithinBound(r.dw, ref::QuantizeColumnwise(dy, qg), ref::QuantizeColumnwise(x, qx),
                      what + " wgrad");
    return;
  }
  const MxTensor dy_g = ref::QuantizeGrouped(dy, p.groups, qg);
  const MxTensor x_g = ref::QuantizeGrouped(x, p.groups, qx);
  for (int e = 0; e < p.experts; ++e) {
    const int64_t r0 = p.groups.begin(e), r1 = p.groups.end(e);
    const Tensor dw_e = r.dw.Slice(e, e + 1).Reshape({p.n, p.k});
    if (r0 == r1) {  // no tokens: no rows, zero weight gradient
      for (double v : AsDoubles(dw_e)) ASSERT_EQ(v, 0.0) << what;
      continue;
    }
    const Tensor b_e = b.Slice(e, e + 1).Reshape({p.n});
    ExpectWithinBound(y2.Slice(r0, r1), x_row.Rows(r0, r1), w_row.Matrix(e), what + " fprop", &b_e);
    if (c.input_grad) {
      ExpectWithinBound(r.dx.Slice(r0, r1), dy_row.Rows(r0, r1), w_col.Matrix(e), what + " dgrad");
    }
    ExpectWithinBound(dw_e, dy_g.Group(e), x_g.Group(e), what + " wgrad");
  }
}

// The SQNR a product reaches when its operands carry independent quantization noise of
// the given SQNRs (noise powers relative to the signal add), less 1 dB of slack.
double PredictedSqnr(double a_db, double b_db) {
  return -10.0 * std::log10(std::pow(10.0, -a_db / 10) + std::pow(10.0, -b_db / 10)) - 1.0;
}

// SQNR of one MX layout of t against t itself.
double QuantSqnr(const MxTensor& q, const Tensor& t) { return Sqnr(Dequantize(q), AsDoubles(t)); }

void CheckSqnrAndBias(const Problem& p, const Combo& c, const RunResult& r) {
  const Tensor x = MakeHp(c.x_dtype, {p.m, p.k}, p.x);
  const Tensor dy = MakeHp(c.x_dtype, {p.m, p.n}, p.dy);
  const Tensor w = MakeF32(WeightShape(p), p.w);
  const std::vector<double> dyd = AsDoubles(dy);
  const Exact e = ExactLayer(p, AsDoubles(x), dyd);
  // MXFP8 against the unquantized layer: 25 dB (issue 4). E5M2 gradients (hybrid) hold 2
  // mantissa bits, so dY alone quantizes at ~25 dB and no MX kernel can bring dX or dW to
  // 25; there the floor is what the operands' own quantization noise predicts.
  const Recipe recipe = c.MakeRecipe();
  const QuantizeOptions qx{recipe.input_format(), recipe.scale()};
  const QuantizeOptions qw{recipe.weight_format(), recipe.scale()};
  const QuantizeOptions qg{recipe.grad_format(), recipe.scale()};
  double dx_floor = 25.0, dw_floor = 25.0;
  if (c.formats == RecipeFormats::kHybrid) {
    dx_floor = PredictedSqnr(QuantSqnr(QuantizeRowwise(dy, qg), dy), QuantSqnr(QuantizeColumnwise(w, qw), w));
    dw_floor = PredictedSqnr(QuantSqnr(QuantizeColumnwise(dy, qg), dy), QuantSqnr(QuantizeColumnwise(x, qx), x));
    EXPECT_GT(dx_floor, 22.0) << c.Name();  // the prediction itself stays sane
    EXPECT_GT(dw_floor, 22.0) << c.Name();
  }
  EXPECT_GE(Sqnr(r.y, e.y), 25.0) << c.Name() << " Y";
  if (c.input_grad) {
    EXPECT_GE(Sqnr(r.dx, e.dx), dx_floor) << c.Name() << " dX";
  }
  EXPECT_GE(Sqnr(r.dw, e.dw), dw_floor) << c.Name() << " dW";
  // db: fp32 sums of the high-precision dY over each expert's rows (then rounded once to
  // a bf16 bias's dtype).
  const std::vector<double> db = AsDoubles(r.db);
  const double round = c.param_dtype == DType::kBF16 ? 0x1p-8 : 0.0;
  for (int g = 0; g < p.experts; ++g) {
    for (int64_t j = 0; j < p.n; ++j) {
      double s = 0, abs = 0;
      const int64_t r0 = p.grouped ? p.groups.begin(g) : 0, r1 = p.grouped ? p.groups.end(g) : p.m;
      for (int64_t i = r0; i < r1; ++i) s += dyd[i * p.n + j], abs += std::fabs(dyd[i * p.n + j]);
      EXPECT_NEAR(db[g * p.n + j], s, (r1 - r0 + 1) * 0x1p-24 * abs + round * std::fabs(s))
          << c.Name();
    }
  }
}

// The problem with weights and biases rounded to bf16, so that bf16 parameters hold
// exactly the values the fp32 oracle uses.
Problem WithBf16Params(Problem p) {
  for (float& v : p.w) v = Bf16ToF32(F32ToBf16(v));
  for (float& v : p.b) v = Bf16ToF32(F32ToBf16(v));
  return p;
}

TEST(Ops, EveryCombinationMatchesTheReferenceRunAndTheOracle) {
  int runs = 0;
  for (bool grouped : {false, true}) {
    const Problem f32_params = MakeProblem(grouped, grouped ? 700 : 500);
    const Problem bf16_params = WithBf16Params(f32_params);
    for (RecipeFormats formats : {RecipeFormats::kE4M3, RecipeFormats::kHybrid}) {
      // bf16 parameters with bf16 inputs only: the parameter dtype is independent of the
      // input's, and the combinations stay affordable under sanitizers.
      for (const auto& [x_dtype, param_dtype] : std::vector<std::pair<DType, DType>>{
               {DType::kF32, DType::kF32}, {DType::kBF16, DType::kF32}, {DType::kBF16, DType::kBF16}}) {
        const Problem& p = param_dtype == DType::kF32 ? f32_params : bf16_params;
        for (bool input_grad : {true, false}) {
          const Combo base{grouped, SavePolicy::kQuantized, SavePolicy::kQuantized, false,
                           input_grad, formats, x_dtype, param_dtype};
          const RunResult want = RunCombo(p, base);
          CheckAgainstOracle(p, base, want);
          CheckSqnrAndBias(p, base, want);
          EXPECT_EQ(want.dx.defined(), input_grad) << base.Name();
          EXPECT_EQ(want.dw.dtype(), param_dtype) << base.Name();
          EXPECT_EQ(want.db.dtype(), param_dtype) << base.Name();
          for (SavePolicy ip : {SavePolicy::kQuantized, SavePolicy::kDeferred}) {
            for (SavePolicy wp : {SavePolicy::kQuantized, SavePolicy::kDeferred}) {
              for (bool cache : {false, true}) {
                const Combo c{grouped, ip, wp, cache, input_grad, formats, x_dtype, param_dtype};
                const RunResult got = RunCombo(p, c);
                ++runs;
                ASSERT_EQ(got.y.shape(), YShape(p)) << c.Name();
                EXPECT_TRUE(BytesEqual(got.y, want.y)) << c.Name() << " Y";
                EXPECT_TRUE(BytesEqual(got.dw, want.dw)) << c.Name() << " dW";
                EXPECT_TRUE(BytesEqual(got.db, want.db)) << c.Name() << " db";
                ASSERT_EQ(got.dx.defined(), input_grad) << c.Name();
                if (input_grad) {
                  ASSERT_EQ(got.dx.shape(), p.x_shape) << c.Name();
                  EXPECT_TRUE(BytesEqual(got.dx, want.dx)) << c.Name() << " dX";
                }
                const SavedMemory expected = ExpectedSaved(p, c);
                EXPECT_EQ(got.saved.allocated_bytes, expected.allocated_bytes) << c.Name();
                EXPECT_EQ(got.saved.referenced_bytes, expected.referenced_bytes) << c.Name();
                EXPECT_EQ(got.held_delta, expected.allocated_bytes + expected.referenced_bytes)
                    << c.Name();
              }
            }
          }
        }
      }
    }
  }
  EXPECT_EQ(runs, 2 * 2 * 3 * 2 * 8);
}

// ---- memory: what a policy costs on top of the tensors a model holds anyway -------------

TEST(Ops, DeferredInputCostsNothingWhenHeldElsewhere) {
  const Problem p = MakeProblem(false, 11);
  for (SavePolicy ip : {SavePolicy::kQuantized, SavePolicy::kDeferred}) {
    RecipeOptions ro;
    ro.input_policy = ip;
    ro.weight_policy = SavePolicy::kDeferred;
    const Layer layer(p, Recipe::Make(ro), {});
    const Tensor x = MakeBf16(p.x_shape, p.x);  // the caller keeps x alive
    ReleaseCachedMemory();
    const int64_t before = ReadMemory().total.live_bytes;
    Forwarded f = layer.Forward(x);
    const int64_t extra = ReadMemory().total.live_bytes - before - static_cast<int64_t>(f.y.NumBytes());
    const int64_t x_col = p.m * p.k + CeilDiv(p.m, 32) * p.k;
    EXPECT_EQ(extra, ip == SavePolicy::kQuantized ? x_col : 0) << Name(ip);
    // Two layers reading the same x (Q, K and V projections): held once under deferred.
    Forwarded f2 = layer.Forward(x);
    const int64_t held = ReadMemory().held_for_backward.live_bytes;
    EXPECT_EQ(held, ip == SavePolicy::kQuantized ? 2 * x_col + 0 + 4 * p.n * p.k
                                                 : static_cast<int64_t>(x.NumBytes()) + 4 * p.n * p.k)
        << Name(ip);
  }
  EXPECT_EQ(ReadMemory().held_for_backward.live_bytes, 0) << "dropped contexts release";
}

// A tensor over a framework's memory (Tensor::Borrow: what the Python package passes in)
// is read in place and never counted: deferred keeps a reference to the very buffer, the
// owner lives as long as that reference, and a borrowed weight works as an owned one.
TEST(Ops, BorrowedInputIsReferencedNotCopiedNorCounted) {
  const Problem p = MakeProblem(false, 13);
  RecipeOptions ro;
  ro.input_policy = SavePolicy::kDeferred;
  ro.weight_policy = SavePolicy::kDeferred;
  const Layer owned(p, Recipe::Make(ro), {});
  auto x_buffer = std::make_shared<std::vector<float>>(p.x);
  auto w_buffer = std::make_shared<std::vector<float>>(p.w);
  std::weak_ptr<std::vector<float>> x_alive = x_buffer;
  ReleaseCachedMemory();
  const MemoryReport before = ReadMemory();
  Tensor x = Tensor::Borrow(x_buffer->data(), DType::kF32, p.x_shape, x_buffer);
  auto w = std::make_shared<Parameter>(
      Tensor::Borrow(w_buffer->data(), DType::kF32, WeightShape(p), w_buffer), "w");
  auto b = std::make_shared<Parameter>(MakeF32(BiasShape(p), p.b), "b");
  x_buffer.reset();
  EXPECT_EQ(x.raw(), x_alive.lock()->data()) << "borrowed, not copied";
  EXPECT_EQ(ReadMemory().total.live_bytes - before.total.live_bytes,
            static_cast<int64_t>(b->value().NumBytes()))
      << "borrowing counts nothing";
  x.storage()->Recategorize(MemoryCategory::kSavedForBackward);
  EXPECT_EQ(x.storage()->category(), MemoryCategory::kActivation) << "never re-categorized";

  const Linear layer(w, b, Recipe::Make(ro), {});
  const int64_t held_before = ReadMemory().held_for_backward.live_bytes;
  Forwarded f = layer.Forward(x);
  // Deferred input and weight: the context references both borrowed buffers, which cost
  // nothing in the allocator's figures.
  const SavedMemory saved = f.ctx.saved_memory();
  EXPECT_EQ(saved.allocated_bytes, 0);
  EXPECT_EQ(saved.referenced_bytes, static_cast<int64_t>(x.NumBytes() + w->value().NumBytes()));
  EXPECT_EQ(ReadMemory().held_for_backward.live_bytes, held_before);
  x = Tensor();  // the caller lets go: the context still holds the buffer
  EXPECT_FALSE(x_alive.expired());

  // Same results, bit for bit, as the layer over owned copies of the same values.
  const Tensor x_owned = MakeF32(p.x_shape, p.x);
  Forwarded fo = owned.Forward(x_owned);
  EXPECT_TRUE(BytesEqual(f.y, fo.y));
  const Tensor dy = MakeF32(YShape(p), p.dy);
  const Grads g = layer.Backward(dy, std::move(f.ctx));
  const Grads go = owned.Backward(dy, std::move(fo.ctx));
  EXPECT_TRUE(BytesEqual(g.dx, go.dx));
  EXPECT_TRUE(BytesEqual(g.dw, go.dw));
  EXPECT_TRUE(BytesEqual(g.db, go.db));
  EXPECT_TRUE(x_alive.expired()) << "the backward released the last reference";
  EXPECT_THROW(Tensor::Borrow(nullptr, DType::kF32, Shape{2, 32}, nullptr), Error);
}

TEST(Ops, FrozenWeightKeepsNoInputCopy) {
  const Problem p = MakeProblem(false, 12);
  const Layer layer(p, Recipe(), {});
  layer.weight().set_requires_grad(false);
  layer.bias().set_requires_grad(false);
  const Tensor x = MakeF32(p.x_shape, p.x);
  Forwarded f = layer.Forward(x, true);
  // Only dgrad runs: W columnwise, no X copy.
  EXPECT_EQ(f.ctx.saved_memory().allocated_bytes, p.n * p.k + CeilDiv(p.n, 32) * p.k);
  Grads g = layer.Backward(MakeF32(YShape(p), p.dy), std::move(f.ctx));
  EXPECT_TRUE(g.dx.defined());
  EXPECT_FALSE(g.dw.defined());
  EXPECT_FALSE(g.db.defined());
  // Nothing needs a gradient: nothing is saved, and backward refuses.
  Forwarded inference = layer.Forward(x, false);
  EXPECT_FALSE(inference.ctx.defined());
  EXPECT_EQ(inference.ctx.saved_memory().allocated_bytes, 0);
  EXPECT_THROW(layer.Backward(MakeF32(YShape(p), p.dy), std::move(inference.ctx)), Error);
}

// ---- the weight cache -----------------------------------------------------------------

TEST(Ops, WeightCacheAcrossMicroBatches) {
  for (bool grouped : {false, true}) {
    for (SavePolicy wp : {SavePolicy::kQuantized, SavePolicy::kDeferred}) {
      const Problem p = MakeProblem(grouped, 21);
      WeightQuantCache cache;
      OpOptions o;
      o.cache = &cache;
      o.accumulate_grad = true;
      RecipeOptions ro;
      ro.weight_policy = wp;
      ro.reuse_quantized_weights = true;
      const Layer layer(p, Recipe::Make(ro), o);
      OpOptions plain_o;
      plain_o.accumulate_grad = true;
      RecipeOptions plain_ro;
      plain_ro.weight_policy = wp;
      const Layer plain(p, Recipe::Make(plain_ro), plain_o);
      const std::string what = StrCat(grouped ? "grouped " : "dense ", Name(wp));
      // Four micro-batches of one step: each weight layout is quantized once.
      for (int mb = 0; mb < 4; ++mb) {
        const Tensor x = MakeF32(p.x_shape, RandomValues(p.m * p.k, 100 + mb, -1, 1));
        const Tensor dy = MakeF32(YShape(p), RandomValues(p.m * p.n, 200 + mb, -6, -5));
        Forwarded f = layer.Forward(x);
        layer.Backward(dy, std::move(f.ctx));
        Forwarded pf = plain.Forward(x);
        plain.Backward(dy, std::move(pf.ctx));
        const WeightCacheStats s = cache.stats();
        EXPECT_EQ(s.misses, 2) << what << " micro-batch " << mb;  // rowwise + columnwise
        EXPECT_EQ(s.hits, 2 * mb) << what << " micro-batch " << mb;
        EXPECT_EQ(s.entries, 2) << what;
        EXPECT_EQ(s.bytes_held, 2 * p.experts * p.n * p.k +
                                    p.experts * (p.n * CeilDiv(p.k, 32) + CeilDiv(p.n, 32) * p.k))
            << what;
      }
      // Accumulated gradients equal those without the cache, bit for bit.
      EXPECT_TRUE(BytesEqual(layer.weight().main_grad(), plain.weight().main_grad())) << what;
      EXPECT_TRUE(BytesEqual(layer.bias().main_grad(), plain.bias().main_grad())) << what;
      // An in-place update: the next forward misses and drops the stale entries.
      layer.weight().value().data<float>()[0] += 1.0f;
      layer.weight().MarkModified();
      const Tensor x = MakeF32(p.x_shape, p.x);
      Forwarded f = layer.Forward(x);
      EXPECT_EQ(cache.stats().misses, wp == SavePolicy::kQuantized ? 4 : 3) << what;
      EXPECT_EQ(cache.stats().entries, wp == SavePolicy::kQuantized ? 2 : 1) << what;
      // The optimizer step clears it; a pending backward keeps what it took.
      cache.Clear();
      EXPECT_EQ(cache.stats().entries, 0);
      EXPECT_EQ(cache.stats().bytes_held, 0);
      layer.Backward(MakeF32(YShape(p), p.dy), std::move(f.ctx));
    }
  }
}

TEST(Ops, DeferredWeightModifiedBeforeBackwardRaises) {
  const Problem p = MakeProblem(false, 31);
  RecipeOptions ro;
  ro.weight_policy = SavePolicy::kDeferred;
  const Layer layer(p, Recipe::Make(ro), {});
  Forwarded f = layer.Forward(MakeF32(p.x_shape, p.x));
  layer.weight().MarkModified();
  EXPECT_THROW(layer.Backward(MakeF32(YShape(p), p.dy), std::move(f.ctx)), Error);
}

// ---- gradient accumulation ------------------------------------------------------------

TEST(Ops, AccumulateIntoMainGrad) {
  for (bool grouped : {false, true}) {
    const Problem p = MakeProblem(grouped, 41);
    OpOptions acc;
    acc.accumulate_grad = true;
    const Layer layer(p, Recipe(), acc);
    const Layer fresh(p, Recipe(), {});
    const Tensor x = MakeF32(p.x_shape, p.x);
    const Tensor dy = MakeF32(YShape(p), p.dy);
    // main_grad starts at a known value; an empty expert's slice must keep it.
    Tensor& mg = layer.weight().main_grad();
    for (int64_t i = 0; i < mg.NumElements(); ++i) mg.data<float>()[i] = 0.25f;
    Forwarded f = layer.Forward(x);
    Grads g = layer.Backward(dy, std::move(f.ctx));
    EXPECT_EQ(g.dw.storage(), mg.storage()) << "dW is main_grad";
    Forwarded ff = fresh.Forward(x);
    Grads want = fresh.Backward(dy, std::move(ff.ctx));
    for (int64_t i = 0; i < mg.NumElements(); ++i) {
      const double w = 0.25 + want.dw.data<float>()[i];
      ASSERT_NEAR(mg.data<float>()[i], w, 1e-5 * (1 + std::fabs(w))) << i;
    }
    if (grouped) {  // expert 1 has no tokens
      for (int64_t i = 0; i < p.n * p.k; ++i) ASSERT_EQ(mg.data<float>()[p.n * p.k + i], 0.25f);
    }
  }
}

// ---- MXFP8 off: the bf16 and fp32 baselines --------------------------------------------

TEST(Ops, BaselinesAgainstTheExactLayer) {
  for (bool grouped : {false, true}) {
    const Problem p = MakeProblem(grouped, 51);
    for (Precision prec : {Precision::kFp32, Precision::kBf16}) {
      RecipeOptions ro;
      ro.precision = prec;
      const Layer layer(p, Recipe::Make(ro), {});
      const DType xd = prec == Precision::kFp32 ? DType::kF32 : DType::kBF16;
      const Tensor x = MakeHp(xd, p.x_shape, p.x);
      const Tensor dy = MakeHp(xd, YShape(p), p.dy);
      Forwarded f = layer.Forward(x);
      // bf16: the fp32 weight is rounded for the GEMM and that copy kept for dgrad; fp32:
      // both operands are referenced, nothing is copied.
      const SavedMemory sm = f.ctx.saved_memory();
      if (prec == Precision::kBf16) {
        EXPECT_EQ(sm.allocated_bytes, p.experts * p.n * p.k * 2);
        EXPECT_EQ(sm.referenced_bytes, p.m * p.k * 2);
      } else {
        EXPECT_EQ(sm.allocated_bytes, 0);
        EXPECT_EQ(sm.referenced_bytes, p.m * p.k * 4 + p.experts * p.n * p.k * 4);
      }
      Grads g = layer.Backward(dy, std::move(f.ctx));
      // The exact layer on the operands as the GEMMs saw them (bf16-rounded weights).
      Problem q = p;
      if (prec == Precision::kBf16) {
        for (float& v : q.w) v = Bf16ToF32(F32ToBf16(v));
      }
      const Exact e = ExactLayer(q, AsDoubles(x), AsDoubles(dy));
      const double floor_db = prec == Precision::kFp32 ? 100.0 : 45.0;
      EXPECT_GE(Sqnr(f.y, e.y), floor_db) << Name(prec);
      EXPECT_GE(Sqnr(g.dx, e.dx), floor_db) << Name(prec);
      EXPECT_GE(Sqnr(g.dw, e.dw), floor_db) << Name(prec);
    }
  }
}

// ---- odd shapes: no tokens, one token, contractions that are not multiples of 32 -------

TEST(Ops, OddShapesAgreeAcrossPolicies) {
  for (const auto& [m, k, n] : std::vector<std::tuple<int64_t, int64_t, int64_t>>{
           {0, 50, 33}, {1, 50, 33}, {33, 1, 7}, {65, 31, 1}}) {
    const std::vector<float> wv = RandomValues(n * k, 81, -2, -1);
    const std::vector<float> xv = RandomValues(m * k, 82, -1, 1);
    const std::vector<float> dyv = RandomValues(m * n, 83, -6, -5);
    Grads want;
    Tensor want_y;
    for (SavePolicy policy : {SavePolicy::kQuantized, SavePolicy::kDeferred}) {
      RecipeOptions ro;
      ro.input_policy = policy;
      ro.weight_policy = policy;
      Linear fc(std::make_shared<Parameter>(MakeF32({n, k}, wv)),
                std::make_shared<Parameter>(Tensor::Zeros(DType::kF32, {n})), Recipe::Make(ro));
      Forwarded f = fc.Forward(MakeF32({m, k}, xv));
      ASSERT_EQ(f.y.shape(), (Shape{m, n}));
      Grads g = fc.Backward(MakeF32({m, n}, dyv), std::move(f.ctx));
      ASSERT_EQ(g.dx.shape(), (Shape{m, k}));
      ASSERT_EQ(g.dw.shape(), (Shape{n, k}));
      if (m == 0) {  // no tokens: zero weight and bias gradients
        for (double v : AsDoubles(g.dw)) ASSERT_EQ(v, 0.0);
        for (double v : AsDoubles(g.db)) ASSERT_EQ(v, 0.0);
      }
      if (policy == SavePolicy::kQuantized) {
        want = g;
        want_y = f.y;
        const MxTensor dy_c = ref::QuantizeColumnwise(MakeF32({m, n}, dyv), {});
        const MxTensor x_c = ref::QuantizeColumnwise(MakeF32({m, k}, xv), {});
        ExpectWithinBound(g.dw, dy_c, x_c, StrCat("wgrad ", m, "x", k, "x", n));
      } else {
        EXPECT_TRUE(BytesEqual(f.y, want_y)) << m << "x" << k << "x" << n;
        EXPECT_TRUE(BytesEqual(g.dx, want.dx)) << m << "x" << k << "x" << n;
        EXPECT_TRUE(BytesEqual(g.dw, want.dw)) << m << "x" << k << "x" << n;
      }
    }
  }
}

// ---- recipes and errors ---------------------------------------------------------------

TEST(Ops, RecipeValidation) {
  for (Precision prec : {Precision::kFp32, Precision::kBf16}) {
    RecipeOptions defer;
    defer.precision = prec;
    defer.input_policy = SavePolicy::kDeferred;
    EXPECT_THROW(Recipe::Make(defer), Error);
    RecipeOptions reuse;
    reuse.precision = prec;
    reuse.reuse_quantized_weights = true;
    EXPECT_THROW(Recipe::Make(reuse), Error);
    RecipeOptions scale;
    scale.precision = prec;
    scale.scale = ScaleRule::kFloor;
    EXPECT_THROW(Recipe::Make(scale), Error);
    RecipeOptions plain;
    plain.precision = prec;
    EXPECT_FALSE(Recipe::Make(plain).mxfp8());
  }
  RecipeOptions hybrid;
  hybrid.formats = RecipeFormats::kHybrid;
  const Recipe r = Recipe::Make(hybrid);
  EXPECT_EQ(r.grad_format(), ElementFormat::kE5M2);
  EXPECT_EQ(r.weight_format(), ElementFormat::kE4M3);
  try {
    RecipeOptions bad;
    bad.precision = Precision::kBf16;
    bad.weight_policy = SavePolicy::kDeferred;
    Recipe::Make(bad);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("only valid when MXFP8 is enabled"), std::string::npos);
  }
  EXPECT_THROW(ParseSavePolicy("lazy"), Error);
  EXPECT_EQ(ParseRecipeFormats("hybrid"), RecipeFormats::kHybrid);
}

TEST(Ops, BadInputsRaise) {
  const Problem p = MakeProblem(false, 61);
  const Layer layer(p, Recipe(), {});
  EXPECT_THROW(layer.Forward(MakeF32({p.m, p.k + 1}, std::vector<float>(p.m * (p.k + 1)))), Error);
  EXPECT_THROW(layer.Forward(MakeF32({p.k}, p.x)), Error);  // rank 1
  EXPECT_THROW(layer.Forward(Tensor::Zeros(DType::kU8, {p.m, p.k})), Error);
  Forwarded f = layer.Forward(MakeF32(p.x_shape, p.x));
  EXPECT_THROW(layer.Backward(MakeF32({p.m, p.n + 1}, std::vector<float>(p.m * (p.n + 1))),
                              std::move(f.ctx)),
               Error);
  EXPECT_THROW(layer.Backward(MakeF32(YShape(p), p.dy), OpContext()), Error);  // no context
  // Grouped: a group list for another number of experts or tokens.
  const Problem g = MakeProblem(true, 62);
  const Layer gl(g, Recipe(), {});
  const Tensor gx = MakeF32(g.x_shape, g.x);
  const GroupList three = GroupList::Make(std::vector<int64_t>{50, 25, 25}, GroupListType::kCounts, g.m);
  EXPECT_THROW(gl.grouped->Forward(gx, three), Error);
  const GroupList short_list =
      GroupList::Make(std::vector<int64_t>{10, 10, 10, 10}, GroupListType::kCounts, 40);
  EXPECT_THROW(gl.grouped->Forward(gx, short_list), Error);
  EXPECT_THROW(Linear(std::make_shared<Parameter>(Tensor::Zeros(DType::kF32, {4, 4, 4})), nullptr),
               Error);
  EXPECT_THROW(Linear(std::make_shared<Parameter>(Tensor::Zeros(DType::kF32, {4, 8})),
                      std::make_shared<Parameter>(Tensor::Zeros(DType::kF32, {8}))),
               Error);
}

}  // namespace
}  // namespace mxtrain
