// The policies mxtrain chooses (recipe.h, linear.h "The auto policy"):
//  - auto learns what is alive anyway: an input shared by several layers (Q, K, V), one a
//    pending backward holds, one the caller keeps until the backward; a single-consumer
//    input stays quantized; a Parameter's weight is referenced. Every choice gives the
//    bytes of the fixed policies, and the held bytes are the closed-form figures.
//  - hp_gemms: each subset of {fprop, dgrad, wgrad} (all but all three), with bf16 and fp32
//    compute, dense and grouped, with and without dx: each output is bit-identical to the
//    one the all-MXFP8 layer or the bf16 / fp32 layer makes for the same GEMM, and the
//    saved bytes are what the chosen GEMMs need.
//  - the recipe's contradictions are errors that name them.
#include <gtest/gtest.h>

#include "ops_test_util.h"

namespace mxtrain {
namespace {

using namespace ops_testing;  // NOLINT: the shared problems of the ops tests

Recipe PolicyRecipe(SavePolicy input, SavePolicy weight, bool cache = false) {
  RecipeOptions o;
  o.input_policy = input;
  o.weight_policy = weight;
  o.reuse_quantized_weights = cache;
  return Recipe::Make(o);
}

Recipe AutoRecipe(bool cache = false) {
  return PolicyRecipe(SavePolicy::kAuto, SavePolicy::kAuto, cache);
}

// A fixed input policy; the weight deferred as auto leaves it, so that held bytes compare
// inputs only.
Recipe FixedRecipe(SavePolicy input) { return PolicyRecipe(input, SavePolicy::kDeferred); }

// Three layers over one input, as Q, K and V over one normalized activation.
struct Qkv {
  std::vector<std::unique_ptr<Problem>> problems;  // a grouped Layer points at its groups
  std::vector<std::unique_ptr<Layer>> layers;
  Qkv(const Problem& p, const Recipe& r) {
    for (int i = 0; i < 3; ++i) {
      problems.push_back(std::make_unique<Problem>(p));
      problems.back()->w = RandomValues(p.experts * p.n * p.k, 900 + i, -1, 1);
      layers.push_back(std::make_unique<Layer>(*problems.back(), r, OpOptions{}));
    }
  }
};

struct QkvRun {
  std::vector<Tensor> y, dx, dw;
  std::vector<std::optional<SavePolicy>> input_policy;
  int64_t held = 0;  // held_for_backward after the three forwards, minus before
};

// One micro-batch: the input is made, fed to the three layers and dropped by the caller
// before the backwards (it lives on only if a context references it).
QkvRun RunQkv(const Problem& p, const Qkv& qkv, DType x_dtype) {
  QkvRun r;
  const int64_t before = ReadMemory().held_for_backward.live_bytes;
  std::vector<OpContext> ctx;
  {
    const Tensor x = MakeHp(x_dtype, p.x_shape, p.x);
    for (const auto& l : qkv.layers) {
      Forwarded f = l->Forward(x);
      r.y.push_back(f.y);
      r.input_policy.push_back(f.ctx.input_policy());
      ctx.push_back(std::move(f.ctx));
    }
  }
  r.held = ReadMemory().held_for_backward.live_bytes - before;
  const Tensor dy = MakeHp(x_dtype, YShape(p), p.dy);
  for (size_t i = 0; i < ctx.size(); ++i) {
    Grads g = qkv.layers[i]->Backward(dy, std::move(ctx[i]));
    r.dx.push_back(g.dx);
    r.dw.push_back(g.dw);
  }
  EXPECT_EQ(ReadMemory().held_for_backward.live_bytes, before);
  return r;
}

int64_t XColBytes(const Problem& p) {
  const int64_t scale_rows = p.grouped ? p.groups.ScaleRows() : CeilDiv(p.m, 32);
  return p.m * p.k + scale_rows * p.k;
}

TEST(OpsPolicy, AutoReferencesAnInputSeveralLayersShare) {
  for (bool grouped : {false, true}) {
    const Problem p = MakeProblem(grouped, 41);
    for (DType x_dtype : {DType::kBF16, DType::kF32}) {
      const std::string what = StrCat(grouped ? "grouped " : "dense ", Name(x_dtype));
      const Qkv fixed(p, FixedRecipe(SavePolicy::kQuantized));
      const Qkv deferred(p, FixedRecipe(SavePolicy::kDeferred));
      const Qkv autos(p, AutoRecipe());
      const QkvRun want = RunQkv(p, fixed, x_dtype);
      const QkvRun want_deferred = RunQkv(p, deferred, x_dtype);
      const int64_t x_bytes = p.m * p.k * static_cast<int64_t>(DTypeSize(x_dtype));
      EXPECT_EQ(want.held, 3 * XColBytes(p)) << what;
      EXPECT_EQ(want_deferred.held, x_bytes) << what << ": one buffer, counted once";
      // One reference shared by n consumers beats n columnwise copies (1 + 1/32 bytes per
      // element each) when the input's element is smaller: bf16 from 2 consumers, f32
      // from 4. In the first micro-batch consumer i knows of i; Q, the first, of itself.
      const auto defer = [&](int n) {
        return DTypeSize(x_dtype) * 32 < static_cast<size_t>(n) * 33 ? SavePolicy::kDeferred
                                                                     : SavePolicy::kQuantized;
      };
      const QkvRun first = RunQkv(p, autos, x_dtype);
      int64_t first_held = 0;
      for (int i = 0; i < 3; ++i) {
        EXPECT_EQ(first.input_policy[i], defer(i + 1)) << what << " layer " << i;
        if (defer(i + 1) == SavePolicy::kQuantized) first_held += XColBytes(p);
      }
      if (defer(2) == SavePolicy::kDeferred) first_held += x_bytes;
      EXPECT_EQ(first.held, first_held) << what;
      // From then on every layer knows of three: bf16 is referenced once (the deferred
      // figure, below the quantized one), f32 quantized (the quantized figure, below the
      // deferred one).
      for (int mb = 0; mb < 2; ++mb) {
        const QkvRun got = RunQkv(p, autos, x_dtype);
        for (int i = 0; i < 3; ++i) {
          EXPECT_EQ(got.input_policy[i], defer(3)) << what << " layer " << i;
        }
        EXPECT_EQ(got.held, std::min(want.held, want_deferred.held)) << what;
      }
      const QkvRun again = RunQkv(p, autos, x_dtype);
      for (int i = 0; i < 3; ++i) {
        for (const QkvRun* r : {&first, &again}) {
          EXPECT_TRUE(BytesEqual(r->y[i], want.y[i])) << what << " y" << i;
          EXPECT_TRUE(BytesEqual(r->dx[i], want.dx[i])) << what << " dx" << i;
          EXPECT_TRUE(BytesEqual(r->dw[i], want.dw[i])) << what << " dw" << i;
        }
      }
    }
  }
}

TEST(OpsPolicy, AutoQuantizesASingleConsumerInputAndLearnsWhatTheCallerKeeps) {
  for (bool grouped : {false, true}) {
    const Problem p = MakeProblem(grouped, 43);
    const Layer layer(p, AutoRecipe(), {});
    const Tensor dy = MakeF32(YShape(p), p.dy);
    // The caller drops its input after the forward: auto keeps the quantized copy, and
    // goes on doing so.
    for (int mb = 0; mb < 3; ++mb) {
      OpContext ctx;
      {
        Forwarded f = layer.Forward(MakeBf16(p.x_shape, p.x));
        ctx = std::move(f.ctx);
      }
      EXPECT_EQ(ctx.input_policy(), SavePolicy::kQuantized) << mb;
      EXPECT_EQ(ctx.weight_policy(), SavePolicy::kDeferred) << mb;
      EXPECT_EQ(ctx.saved_memory().allocated_bytes, XColBytes(p)) << mb;
      EXPECT_EQ(ctx.saved_memory().referenced_bytes, 0) << mb;
      layer.Backward(MakeBf16(YShape(p), p.dy), std::move(ctx));
    }
    // A caller that keeps its input until the backward: the first call cannot know, the
    // next ones reference it.
    const Layer kept_layer(p, AutoRecipe(), {});
    const Tensor x = MakeBf16(p.x_shape, p.x);
    for (int mb = 0; mb < 3; ++mb) {
      Forwarded f = kept_layer.Forward(x);
      EXPECT_EQ(f.ctx.input_policy(), mb == 0 ? SavePolicy::kQuantized : SavePolicy::kDeferred)
          << mb;
      kept_layer.Backward(MakeBf16(YShape(p), p.dy), std::move(f.ctx));
    }
    // An input that a pending backward holds already (another layer deferred it).
    const Layer holder(p, FixedRecipe(SavePolicy::kDeferred), {});
    const Layer fresh(p, AutoRecipe(), {});
    Forwarded hf = holder.Forward(x);
    Forwarded ff = fresh.Forward(x);
    EXPECT_EQ(ff.ctx.input_policy(), SavePolicy::kDeferred);
    fresh.Backward(MakeBf16(YShape(p), p.dy), std::move(ff.ctx));
    holder.Backward(MakeBf16(YShape(p), p.dy), std::move(hf.ctx));
  }
}

TEST(OpsPolicy, AutoWeightWithTheCacheReferencesTheParameter) {
  const Problem p = MakeProblem(false, 47);
  const Layer layer(p, AutoRecipe(/*cache=*/true), {});
  const Layer fixed(p, PolicyRecipe(SavePolicy::kQuantized, SavePolicy::kQuantized, true), {});
  const Tensor x = MakeBf16(p.x_shape, p.x), dy = MakeBf16(YShape(p), p.dy);
  Forwarded f = layer.Forward(x);
  EXPECT_EQ(f.ctx.weight_policy(), SavePolicy::kDeferred);
  EXPECT_EQ(f.ctx.saved_memory().persistent_bytes, p.n * p.k * 4);
  Forwarded w = fixed.Forward(x);
  EXPECT_TRUE(BytesEqual(f.y, w.y));
  const Grads g = layer.Backward(dy, std::move(f.ctx)), gw = fixed.Backward(dy, std::move(w.ctx));
  EXPECT_TRUE(BytesEqual(g.dx, gw.dx));
  EXPECT_TRUE(BytesEqual(g.dw, gw.dw));
}

// ---- high-precision GEMMs ------------------------------------------------------------------

struct Outputs {
  Tensor y, dx, dw, db;
  SavedMemory saved;
  std::optional<SavePolicy> input_policy, weight_policy;
};

Outputs RunLayer(const Problem& p, const Recipe& r, DType x_dtype, bool input_grad) {
  const Layer layer(p, r, {});
  const Tensor x = MakeHp(x_dtype, p.x_shape, p.x);
  Forwarded f = layer.Forward(x, input_grad);
  Outputs o;
  o.y = f.y;
  o.saved = f.ctx.saved_memory();
  o.input_policy = f.ctx.input_policy();
  o.weight_policy = f.ctx.weight_policy();
  const Grads g = layer.Backward(MakeHp(x_dtype, YShape(p), p.dy), std::move(f.ctx));
  o.dx = g.dx;
  o.dw = g.dw;
  o.db = g.db;
  return o;
}

TEST(OpsPolicy, HighPrecisionGemmsMatchTheLayerOfTheirPrecision) {
  constexpr TrainingGemm kF = TrainingGemm::kFprop, kD = TrainingGemm::kDgrad,
                         kW = TrainingGemm::kWgrad;
  const std::vector<GemmSet> sets = {{kF}, {kD}, {kW}, {kF, kD}, {kF, kW}, {kD, kW}};
  int runs = 0;
  for (bool grouped : {false, true}) {
    const Problem p = MakeProblem(grouped, 53);
    for (Precision hp : {Precision::kBf16, Precision::kFp32}) {
      for (DType x_dtype : {DType::kBF16, DType::kF32}) {
        for (bool input_grad : {true, false}) {
          const Outputs mx = RunLayer(p, Recipe(), x_dtype, input_grad);
          RecipeOptions plain;
          plain.precision = hp;
          const Outputs hpo = RunLayer(p, Recipe::Make(plain), x_dtype, input_grad);
          for (const GemmSet& set : sets) {
            // The policies a set leaves open: each of them (and unset) gives the same bytes.
            std::vector<std::optional<SavePolicy>> input_policies{std::nullopt};
            std::vector<std::optional<SavePolicy>> weight_policies{std::nullopt};
            if (!set.contains(kW))
              input_policies.insert(input_policies.end(), std::begin(kPolicies),
                                    std::end(kPolicies));
            if (!set.contains(kD))
              weight_policies.insert(weight_policies.end(), std::begin(kPolicies),
                                     std::end(kPolicies));
            for (const auto& ip : input_policies) {
              for (const auto& wp : weight_policies) {
                RecipeOptions o;
                o.hp_gemms = set;
                o.hp_precision = hp;
                o.input_policy = ip;
                o.weight_policy = wp;
                const Recipe r = Recipe::Make(o);
                const std::string what =
                    StrCat(grouped ? "grouped " : "dense ", r.ToString(), " x=", Name(x_dtype),
                           input_grad ? " dx" : " no-dx");
                const Outputs got = RunLayer(p, r, x_dtype, input_grad);
                ++runs;
                const Outputs& fwant = set.contains(kF) ? hpo : mx;
                const Outputs& dwant = set.contains(kD) ? hpo : mx;
                const Outputs& wwant = set.contains(kW) ? hpo : mx;
                EXPECT_TRUE(BytesEqual(got.y, fwant.y)) << what << " y";
                ASSERT_EQ(got.dx.defined(), input_grad) << what;
                if (input_grad) {
                  EXPECT_TRUE(BytesEqual(got.dx, dwant.dx)) << what << " dx";
                }
                EXPECT_TRUE(BytesEqual(got.dw, wwant.dw)) << what << " dw";
                EXPECT_TRUE(BytesEqual(got.db, mx.db)) << what << " db";
                // What is saved: an HP wgrad keeps the input rounded to the compute type (a
                // reference when it is that type already), an HP dgrad the parameter.
                const int64_t cbytes = hp == Precision::kBf16 ? 2 : 4;
                if (set.contains(kW)) {
                  EXPECT_EQ(got.input_policy, std::nullopt) << what;
                  const int64_t x_c = p.m * p.k * cbytes;
                  const bool same = DTypeSize(x_dtype) == static_cast<size_t>(cbytes);
                  EXPECT_EQ(got.saved.referenced_bytes, same ? x_c : 0) << what;
                  EXPECT_EQ(got.saved.allocated_bytes -
                                (got.weight_policy == SavePolicy::kQuantized
                                     ? p.experts * (p.n * p.k + CeilDiv(p.n, 32) * p.k)
                                     : 0),
                            same ? 0 : x_c)
                      << what;
                } else {
                  EXPECT_EQ(got.input_policy,
                            ip.value_or(SavePolicy::kQuantized) == SavePolicy::kAuto
                                ? SavePolicy::kQuantized
                                : ip.value_or(SavePolicy::kQuantized))
                      << what;
                }
                if (set.contains(kD) && input_grad) {
                  EXPECT_EQ(got.weight_policy, std::nullopt) << what;
                  EXPECT_EQ(got.saved.persistent_bytes, p.experts * p.n * p.k * 4) << what;
                }
              }
            }
          }
        }
      }
    }
  }
  // Per set, the open policy choices (unset + 3 each): 16 + 4 + 4 + 4 + 4 + 1.
  EXPECT_EQ(runs, 2 * 2 * 2 * 2 * 33);
}

TEST(OpsPolicy, RecipeContradictionsAreErrors) {
  const auto expect_error = [](const RecipeOptions& o, const char* needle) {
    try {
      Recipe::Make(o);
      ADD_FAILURE() << "no error for " << needle;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  RecipeOptions all;
  all.hp_gemms = GemmSet{TrainingGemm::kFprop, TrainingGemm::kDgrad, TrainingGemm::kWgrad};
  expect_error(all, "use precision bf16 or fp32");
  RecipeOptions wgrad_policy;
  wgrad_policy.hp_gemms = GemmSet{TrainingGemm::kWgrad};
  wgrad_policy.input_policy = SavePolicy::kDeferred;
  expect_error(wgrad_policy, "contradicts a high-precision wgrad");
  RecipeOptions dgrad_policy;
  dgrad_policy.hp_gemms = GemmSet{TrainingGemm::kDgrad};
  dgrad_policy.weight_policy = SavePolicy::kAuto;
  expect_error(dgrad_policy, "contradicts a high-precision dgrad");
  RecipeOptions reuse;
  reuse.hp_gemms = GemmSet{TrainingGemm::kFprop, TrainingGemm::kDgrad};
  reuse.reuse_quantized_weights = true;
  expect_error(reuse, "never quantized");
  RecipeOptions lone_precision;
  lone_precision.hp_precision = Precision::kFp32;
  expect_error(lone_precision, "needs hp_gemms");
  RecipeOptions mx_precision;
  mx_precision.hp_gemms = GemmSet{TrainingGemm::kWgrad};
  mx_precision.hp_precision = Precision::kMxfp8;
  expect_error(mx_precision, "must be bf16 or fp32");
  RecipeOptions off;
  off.precision = Precision::kBf16;
  off.hp_gemms = GemmSet{TrainingGemm::kWgrad};
  expect_error(off, "only valid when MXFP8 is enabled");

  EXPECT_EQ(ParseGemmSet("wgrad,fprop"), (GemmSet{TrainingGemm::kFprop, TrainingGemm::kWgrad}));
  EXPECT_EQ(Name(ParseGemmSet("dgrad,wgrad")), "dgrad,wgrad");
  EXPECT_TRUE(ParseGemmSet("none").empty());
  EXPECT_THROW(ParseGemmSet("wgrad,wgrad"), Error);
  EXPECT_THROW(ParseGemmSet("bgrad"), Error);
  // Every list option splits the same way (SplitList): spaces around entries go, an empty
  // entry is an error naming the list.
  EXPECT_EQ(ParseGemmSet(" wgrad , dgrad"), (GemmSet{TrainingGemm::kDgrad, TrainingGemm::kWgrad}));
  for (const char* bad : {"wgrad,,dgrad", "wgrad,", ",wgrad", " "}) {
    try {
      ParseGemmSet(bad);
      ADD_FAILURE() << "'" << bad << "' parsed";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("has an empty entry"), std::string::npos) << e.what();
    }
  }
  const std::vector<std::string_view> entries = SplitList("a, b ,c", "list");
  EXPECT_EQ(entries, (std::vector<std::string_view>{"a", "b", "c"}));
  EXPECT_EQ(ParseSavePolicy("auto"), SavePolicy::kAuto);
  RecipeOptions ok;
  ok.hp_gemms = GemmSet{TrainingGemm::kWgrad};
  ok.weight_policy = SavePolicy::kAuto;
  const Recipe r = Recipe::Make(ok);
  EXPECT_EQ(r.compute_dtype(), DType::kBF16);
  EXPECT_TRUE(r.mx(TrainingGemm::kFprop));
  EXPECT_FALSE(r.mx(TrainingGemm::kWgrad));
  EXPECT_EQ(r.ToString(), "mxfp8 e4m3 rceil input=quantized weight=auto hp=wgrad:bf16");
}

}  // namespace
}  // namespace mxtrain
