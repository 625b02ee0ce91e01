// Linear and GroupedLinear: every combination of op x input policy x weight policy x
// weight cache x input-needs-grad x recipe x input and parameter dtype runs forward and
// backward, and
//  - its outputs and gradients are bit-identical to the (quantized, quantized, no cache)
//    run of the same op, recipe and flags;
//  - that run is within NUMERICS.md §7's bound of a double-precision chain rule on the
//    operands quantized by the scalar reference (ref::), and within 25 dB SQNR of the
//    unquantized fp32 layer;
//  - the bytes it keeps for the backward equal the closed-form figures, and the auto
//    policy resolves as linear.h says for a fresh layer (weight: deferred, the parameter
//    is alive anyway; input: quantized, nothing is known yet). What auto learns:
//    ops_policy_test.cc.
// Then: the MXFP8-off baselines, odd shapes, recipe validation and the errors. What the
// ops keep and share (memory, the weight cache, main_grad): ops_memory_test.cc.
#include <gtest/gtest.h>

#include "ops_test_util.h"

namespace mxtrain {
namespace {

using namespace ops_testing;  // NOLINT: the shared problems and oracle of the ops tests

TEST(Ops, EveryCombinationMatchesTheReferenceRunAndTheOracle) {
  int runs = 0;
  for (bool grouped : {false, true}) {
    const Problem f32_params = MakeProblem(grouped, grouped ? 700 : 500);
    const Problem bf16_params = WithBf16Params(f32_params);
    for (RecipeFormats formats : {RecipeFormats::kE4M3, RecipeFormats::kHybrid}) {
      // bf16 parameters with bf16 inputs only: the parameter dtype is independent of the
      // input's, and the combinations stay affordable under sanitizers.
      for (const auto& [x_dtype, param_dtype] :
           std::vector<std::pair<DType, DType>>{{DType::kF32, DType::kF32},
                                                {DType::kBF16, DType::kF32},
                                                {DType::kBF16, DType::kBF16}}) {
        const Problem& p = param_dtype == DType::kF32 ? f32_params : bf16_params;
        for (bool input_grad : {true, false}) {
          const Combo base{grouped,
                           SavePolicy::kQuantized,
                           SavePolicy::kQuantized,
                           false,
                           input_grad,
                           formats,
                           x_dtype,
                           param_dtype};
          const RunResult want = RunCombo(p, base);
          CheckAgainstOracle(p, base, want);
          CheckSqnrAndBias(p, base, want);
          EXPECT_EQ(want.dx.defined(), input_grad) << base.Name();
          EXPECT_EQ(want.dw.dtype(), param_dtype) << base.Name();
          EXPECT_EQ(want.db.dtype(), param_dtype) << base.Name();
          for (SavePolicy ip : kPolicies) {
            for (SavePolicy wp : kPolicies) {
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
                EXPECT_EQ(got.saved.persistent_bytes, expected.persistent_bytes) << c.Name();
                EXPECT_EQ(got.input_policy, ResolvedInput(c)) << c.Name();
                EXPECT_EQ(got.weight_policy, ResolvedWeight(c)) << c.Name();
                EXPECT_EQ(got.held_delta, expected.allocated_bytes + expected.referenced_bytes)
                    << c.Name();
              }
            }
          }
        }
      }
    }
  }
  EXPECT_EQ(runs, 2 * 2 * 3 * 2 * 18);
}

// ---- memory: what a policy costs on top of the tensors a model holds anyway -------------

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
        EXPECT_EQ(sm.referenced_bytes, p.m * p.k * 4);
        EXPECT_EQ(sm.persistent_bytes, p.experts * p.n * p.k * 4);  // the fp32 weight itself
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
  const GroupList three =
      GroupList::Make(std::vector<int64_t>{50, 25, 25}, GroupListType::kCounts, g.m);
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
