// The contracts of Linear / GroupedLinear calls (linear.h, "rules of a context"), and the
// weight cache's bounds (weight_cache.h):
//  - a Backward with another layer's context, or a second Backward on one context, is an
//    Error naming the layer;
//  - a deferred input or weight written in place between Forward and Backward is an Error
//    in debug builds (the checksum pass; release builds skip it);
//  - what a call needs (gradients, cache use, threads) travels with the call: threads
//    sharing one layer, one training and one evaluating, get the gradients they asked for;
//  - the cache drops the entries of destroyed parameters and Forget()s on request, and a
//    call that does not use it leaves it as it was.
// Every result is compared with an independent run of the same layer on seeded data.
#include <gtest/gtest.h>

#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "gemm_test_util.h"
#include "mxtrain/error.h"
#include "mxtrain/grouped_linear.h"
#include "mxtrain/linear.h"
#include "test_util.h"

namespace mxtrain {
namespace {

using testing_util::BytesEqual;
using testing_util::MakeF32;
using testing_util::RandomValues;

constexpr int64_t kM = 40, kK = 64, kN = 48;

// A layer named `name` (its weight is `name`.weight) over seeded weights and bias.
std::unique_ptr<Linear> MakeLayer(const std::string& name, uint64_t seed, const Recipe& r,
                                  OpOptions o = {}) {
  auto layer = std::make_unique<Linear>(kK, kN, /*bias=*/true, r, o, DType::kF32, name);
  const std::vector<float> w = RandomValues(kN * kK, seed, -3, 0);
  const std::vector<float> b = RandomValues(kN, seed + 1, -3, 0);
  std::copy(w.begin(), w.end(), layer->weight().value().data<float>());
  std::copy(b.begin(), b.end(), layer->bias()->value().data<float>());
  layer->weight().MarkModified();
  layer->bias()->MarkModified();
  return layer;
}

Recipe Deferred() {
  RecipeOptions ro;
  ro.input_policy = SavePolicy::kDeferred;
  ro.weight_policy = SavePolicy::kDeferred;
  return Recipe::Make(ro);
}

Recipe Reusing() {
  RecipeOptions ro;
  ro.reuse_quantized_weights = true;
  return Recipe::Make(ro);
}

OpOptions Using(WeightQuantCache& cache) {
  OpOptions o;
  o.cache = &cache;
  return o;
}

// The message of the Error fn throws ("" when it throws none).
template <typename Fn>
std::string ErrorOf(Fn&& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(OpContract, BackwardWithAnotherLayersContextRaisesNamingTheLayer) {
  const auto fc1 = MakeLayer("fc1", 1, Recipe());
  const auto fc2 = MakeLayer("fc2", 3, Recipe());  // same shapes: only identity differs
  const Tensor x = MakeF32({kM, kK}, RandomValues(kM * kK, 5, -1, 1));
  const Tensor dy = MakeF32({kM, kN}, RandomValues(kM * kN, 6, -1, 1));
  Forwarded f = fc1->Forward(x);
  const std::string msg = ErrorOf([&] { fc2->Backward(dy, std::move(f.ctx)); });
  EXPECT_NE(msg.find("fc2.weight"), std::string::npos) << msg;
  EXPECT_NE(msg.find("another layer"), std::string::npos) << msg;
}

TEST(OpContract, SecondBackwardOnOneContextRaisesNamingTheLayer) {
  const auto fc = MakeLayer("fc1", 7, Deferred());
  const Tensor x = MakeF32({kM, kK}, RandomValues(kM * kK, 8, -1, 1));
  const Tensor dy = MakeF32({kM, kN}, RandomValues(kM * kN, 9, -1, 1));
  Forwarded f = fc->Forward(x);
  fc->Backward(dy, std::move(f.ctx));
  EXPECT_TRUE(f.ctx.spent());
  const std::string msg = ErrorOf([&] { fc->Backward(dy, std::move(f.ctx)); });
  EXPECT_NE(msg.find("fc1.weight"), std::string::npos) << msg;
  EXPECT_NE(msg.find("already used by a backward"), std::string::npos) << msg;
  // A context that never held anything says that instead.
  const std::string none = ErrorOf([&] { fc->Backward(dy, OpContext()); });
  EXPECT_NE(none.find("no gradient was wanted"), std::string::npos) << none;
}

// Debug builds (the dev preset) compare a checksum of the deferred tensors in Backward; a
// release build skips that pass by design (linear.h), so there the same misuse must go
// through without an error (and without a crash).
TEST(OpContract, DeferredTensorWrittenInPlaceBeforeBackwardRaisesInDebugBuilds) {
#ifdef NDEBUG
  constexpr bool kChecked = false;
#else
  constexpr bool kChecked = true;
#endif
  for (const bool write_input : {true, false}) {
    for (const Precision precision : {Precision::kMxfp8, Precision::kFp32}) {
      RecipeOptions ro;
      ro.precision = precision;
      if (precision == Precision::kMxfp8) {
        ro.input_policy = SavePolicy::kDeferred;
        ro.weight_policy = SavePolicy::kDeferred;
      }
      const auto fc = MakeLayer("fc1", 10, Recipe::Make(ro));
      Tensor x = MakeF32({kM, kK}, RandomValues(kM * kK, 11, -1, 1));
      const Tensor dy = MakeF32({kM, kN}, RandomValues(kM * kN, 12, -1, 1));
      Forwarded f = fc->Forward(x);
      // The write the version counter does not see: no MarkModified.
      float* p = write_input ? x.data<float>() : fc->weight().value().data<float>();
      p[3] += 1.0f;
      const std::string msg = ErrorOf([&] { fc->Backward(dy, std::move(f.ctx)); });
      const std::string what = StrCat(write_input ? "input " : "weight ", Name(precision));
      if (!kChecked) {
        EXPECT_EQ(msg, "") << what;
        continue;
      }
      EXPECT_NE(msg.find("modified in place"), std::string::npos) << what << ": " << msg;
      EXPECT_NE(msg.find("fc1.weight"), std::string::npos) << what << ": " << msg;
    }
  }
}

// Reference gradients of `layer` for (x, dy) asking for every gradient, on this thread.
Grads Reference(const Linear& layer, const Tensor& x, const Tensor& dy) {
  Forwarded f = layer.Forward(x);
  return layer.Backward(dy, std::move(f.ctx));
}

TEST(OpContract, ThreadsSharingOneLayerGetTheGradientsTheyAskedFor) {
  WeightQuantCache cache;
  const OpOptions o = Using(cache);
  const auto fc = MakeLayer("shared", 13, Reusing(), o);
  const Tensor x = MakeF32({kM, kK}, RandomValues(kM * kK, 14, -1, 1));
  const Tensor dy = MakeF32({kM, kN}, RandomValues(kM * kN, 15, -1, 1));
  const Grads want = Reference(*fc, x, dy);
  const Tensor want_y = fc->Forward(x, false).y;

  std::atomic<bool> stop{false};
  std::atomic<int> eval_errors{0};
  std::thread eval([&] {  // evaluation: no gradient, no cache, one thread
    CallOptions c;
    c.input_requires_grad = false;
    c.weight_requires_grad = false;
    c.bias_requires_grad = false;
    c.use_weight_cache = false;
    c.threads = 1;
    while (!stop.load()) {
      Forwarded f = fc->Forward(x, c);
      if (f.ctx.defined() || !BytesEqual(f.y, want_y)) ++eval_errors;
    }
  });
  for (int i = 0; i < 200; ++i) {
    Forwarded f = fc->Forward(x);
    const Grads g = fc->Backward(dy, std::move(f.ctx));
    ASSERT_TRUE(g.dw.defined() && g.db.defined() && g.dx.defined()) << "step " << i;
    ASSERT_TRUE(BytesEqual(g.dw, want.dw) && BytesEqual(g.db, want.db) && BytesEqual(g.dx, want.dx))
        << "step " << i;
  }
  stop = true;
  eval.join();
  EXPECT_EQ(eval_errors.load(), 0);
  EXPECT_TRUE(fc->weight().requires_grad() && fc->bias()->requires_grad());  // never written
}

TEST(OpContract, CallWithoutTheCacheLeavesItAsItWasAndMatches) {
  WeightQuantCache cache;
  const OpOptions o = Using(cache);
  const auto fc = MakeLayer("fc", 16, Reusing(), o);
  const auto plain = MakeLayer("plain", 16, Recipe());  // the same values, no cache
  const Tensor x = MakeF32({kM, kK}, RandomValues(kM * kK, 17, -1, 1));
  const Tensor dy = MakeF32({kM, kN}, RandomValues(kM * kN, 18, -1, 1));
  CallOptions c;
  c.use_weight_cache = false;
  Forwarded f = fc->Forward(x, c);
  const Grads g = fc->Backward(dy, std::move(f.ctx));  // the backward follows the call
  const WeightCacheStats s = cache.stats();
  EXPECT_EQ(s.hits + s.misses + s.entries, 0);
  const Grads want = Reference(*plain, x, dy);
  EXPECT_TRUE(BytesEqual(g.dx, want.dx) && BytesEqual(g.dw, want.dw));
}

TEST(OpContract, CacheHoldsOnlyLiveParametersAndForgets) {
  WeightQuantCache cache;
  const OpOptions o = Using(cache);
  const Tensor x = MakeF32({kM, kK}, RandomValues(kM * kK, 19, -1, 1));
  const Tensor dy = MakeF32({kM, kN}, RandomValues(kM * kN, 20, -1, 1));
  // A parameter made anew every step (a parametrized weight), never Clear()ed: at most
  // the two layouts of the live one stay.
  for (int step = 0; step < 20; ++step) {
    const auto fc = MakeLayer("step", 21 + step, Reusing(), o);
    Forwarded f = fc->Forward(x);
    fc->Backward(dy, std::move(f.ctx));
    EXPECT_EQ(cache.stats().entries, 2) << "step " << step;
  }
  EXPECT_EQ(cache.stats().entries, 0);  // the last layer is gone too
  EXPECT_EQ(cache.stats().bytes_held, 0);
  const auto fc = MakeLayer("kept", 50, Reusing(), o);
  fc->Forward(x);
  EXPECT_EQ(cache.stats().entries, 2);
  cache.Forget(fc->weight());
  EXPECT_EQ(cache.stats().entries, 0);
}

}  // namespace
}  // namespace mxtrain
