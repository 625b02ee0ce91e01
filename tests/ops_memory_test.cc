// What Linear and GroupedLinear keep and share: a deferred input held elsewhere costs
// nothing, a borrowed input is referenced and not counted, a frozen weight keeps no input
// copy, the weight cache across micro-batches, a deferred weight changed before the
// backward, and gradient accumulation into main_grad.
#include <gtest/gtest.h>

#include "ops_test_util.h"

namespace mxtrain {
namespace {

using namespace ops_testing;  // NOLINT: the shared problems and oracle of the ops tests

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
    const int64_t extra =
        ReadMemory().total.live_bytes - before - static_cast<int64_t>(f.y.NumBytes());
    const int64_t x_col = p.m * p.k + CeilDiv(p.m, 32) * p.k;
    EXPECT_EQ(extra, ip == SavePolicy::kQuantized ? x_col : 0) << Name(ip);
    // Two layers reading the same x (Q, K and V projections): held once under deferred.
    Forwarded f2 = layer.Forward(x);
    const int64_t held = ReadMemory().held_for_backward.live_bytes;
    // The deferred weight is the parameter itself: alive anyway, not counted as held.
    EXPECT_EQ(held, ip == SavePolicy::kQuantized ? 2 * x_col : static_cast<int64_t>(x.NumBytes()))
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
  EXPECT_EQ(saved.referenced_bytes, static_cast<int64_t>(x.NumBytes()));
  EXPECT_EQ(saved.persistent_bytes, static_cast<int64_t>(w->value().NumBytes()))
      << "a parameter's value, borrowed or not";
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

}  // namespace
}  // namespace mxtrain
