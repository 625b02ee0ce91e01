// GroupedLinear over operands that arrive quantized (expert-parallel dispatch, grouped_linear.h):
// Forward(MxTensor x) and Backward(MxTensor dy) against the same layer fed the operands'
// dequantization, bit for bit, for every save policy (auto included), both recipes, with
// and without dx, an empty expert and group sizes off the block; the quantized and deferred
// policies hold the same bytes; and the misuses are errors naming the layer.
#include <gtest/gtest.h>

#include "ops_test_util.h"

namespace mxtrain {
namespace {

using namespace ops_testing;  // NOLINT: the shared problems of the ops tests

struct Arriving {
  Tensor y, dx, dw, db;
  int64_t held = 0;
};

Arriving RunLayer(const Problem& p, const Recipe& r, bool quantized_operands, bool need_dx) {
  Layer layer(p, r, OpOptions{});
  const QuantizeOptions qx{.format = r.input_format(), .rule = r.scale()};
  const QuantizeOptions qg{.format = r.grad_format(), .rule = r.scale()};
  const MxTensor xq = QuantizeRowwise(MakeBf16(p.x_shape, p.x), qx);
  const MxTensor dyq = QuantizeRowwise(MakeBf16(YShape(p), p.dy), qg);
  const int64_t before = ReadMemory().held_for_backward.live_bytes;
  Arriving a;
  CallOptions call;
  call.input_requires_grad = need_dx;
  Forwarded f = quantized_operands
                    ? layer.grouped->Forward(xq, p.groups, call)
                    : layer.grouped->Forward(Dequantize(xq, DType::kBF16), p.groups, call);
  a.held = ReadMemory().held_for_backward.live_bytes - before;
  a.y = f.y;
  Grads g = quantized_operands
                ? layer.grouped->Backward(dyq, std::move(f.ctx))
                : layer.grouped->Backward(Dequantize(dyq, DType::kBF16), std::move(f.ctx));
  a.dx = g.dx;
  a.dw = g.dw;
  a.db = g.db;
  return a;
}

Recipe MakeRecipe(SavePolicy input, RecipeFormats formats) {
  RecipeOptions o;
  o.input_policy = input;
  o.formats = formats;
  return Recipe::Make(o);
}

TEST(OpsArriving, QuantizedOperandsEqualTheirDequantizationBitForBit) {
  int runs = 0;
  for (uint64_t seed : {11u, 12u}) {
    const Problem p = MakeProblem(/*grouped=*/true, seed);
    for (RecipeFormats f : {RecipeFormats::kE4M3, RecipeFormats::kHybrid}) {
      for (bool need_dx : {true, false}) {
        std::optional<Arriving> first;
        for (SavePolicy policy : kPolicies) {
          SCOPED_TRACE(testing::Message() << "seed " << seed << " " << Name(f) << " "
                                          << Name(policy) << " dx " << need_dx);
          const Recipe r = MakeRecipe(policy, f);
          const Arriving mx = RunLayer(p, r, true, need_dx);
          const Arriving hp = RunLayer(p, r, false, need_dx);
          EXPECT_TRUE(BytesEqual(mx.y, hp.y));
          EXPECT_TRUE(BytesEqual(mx.dw, hp.dw));
          EXPECT_TRUE(BytesEqual(mx.db, hp.db));
          EXPECT_EQ(mx.dx.defined(), need_dx);
          if (need_dx) {
            EXPECT_EQ(mx.dx.dtype(), DType::kBF16);
            EXPECT_TRUE(BytesEqual(mx.dx, hp.dx));
          }
          // Every policy gives the same bits, and a columnwise copy or the kept codes hold
          // the same bytes: (1 + 1/32 per 32-row block) x K, and the weight's share.
          if (!first) {
            first = mx;
          } else {
            EXPECT_TRUE(BytesEqual(mx.y, first->y));
            EXPECT_TRUE(BytesEqual(mx.dw, first->dw));
            if (need_dx) {
              EXPECT_TRUE(BytesEqual(mx.dx, first->dx));
            }
          }
          ++runs;
        }
      }
    }
  }
  EXPECT_EQ(runs, 2 * 2 * 2 * 3);
}

// The input role alone (the weight needs no dx partner when dx is off): the kept codes
// (deferred) and the columnwise copy (quantized) cost 1 + 1/32 bytes per element.
TEST(OpsArriving, BothInputPoliciesHoldTheCodesBytes) {
  const Problem p = MakeProblem(true, 21);
  const Arriving q = RunLayer(p, MakeRecipe(SavePolicy::kQuantized, RecipeFormats::kE4M3), true,
                              /*need_dx=*/false);
  const Arriving d = RunLayer(p, MakeRecipe(SavePolicy::kDeferred, RecipeFormats::kE4M3), true,
                              /*need_dx=*/false);
  const int64_t codes = p.m * p.k + p.m * CeilDiv(p.k, kMxBlock);  // rowwise codes + scales
  int64_t col = p.m * p.k;                                         // grouped columnwise
  for (int g = 0; g < p.groups.num_groups(); ++g) col += CeilDiv(p.groups.size(g), kMxBlock) * p.k;
  EXPECT_EQ(d.held, codes);
  EXPECT_EQ(q.held, col);
}

TEST(OpsArriving, MisusesAreErrorsNamingTheLayer) {
  const Problem p = MakeProblem(true, 31);
  const Tensor x = MakeBf16(p.x_shape, p.x);
  {
    Layer layer(p, MakeRecipe(SavePolicy::kQuantized, RecipeFormats::kE4M3), OpOptions{});
    const MxTensor e5 = QuantizeRowwise(x, {.format = ElementFormat::kE5M2});
    EXPECT_THROW(
        {
          try {
            layer.grouped->Forward(e5, p.groups);
          } catch (const Error& e) {
            EXPECT_NE(std::string(e.what()).find("'w'"), std::string::npos) << e.what();
            EXPECT_NE(std::string(e.what()).find("e5m2"), std::string::npos) << e.what();
            throw;
          }
        },
        Error);
    EXPECT_THROW(layer.grouped->Forward(QuantizeColumnwise(x, {}), p.groups), Error);
    EXPECT_THROW(layer.grouped->Forward(QuantizeRowwise(x, {.rule = ScaleRule::kFloor}), p.groups),
                 Error);
    // E4M3 output gradient under the E4M3 recipe is right; E5M2 is not.
    Forwarded f = layer.grouped->Forward(QuantizeRowwise(x, {}), p.groups);
    const Tensor dy = MakeBf16(YShape(p), p.dy);
    EXPECT_THROW(layer.grouped->Backward(QuantizeRowwise(dy, {.format = ElementFormat::kE5M2}),
                                         std::move(f.ctx)),
                 Error);
  }
  {
    RecipeOptions o;
    o.precision = Precision::kBf16;
    Layer layer(p, Recipe::Make(o), OpOptions{});
    EXPECT_THROW(layer.grouped->Forward(QuantizeRowwise(x, {}), p.groups), Error);
  }
}

}  // namespace
}  // namespace mxtrain
