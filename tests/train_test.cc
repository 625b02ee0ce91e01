// The training model and loop (model.h, train.h) on tiny configurations: the model's
// gradients against finite differences, the loss falls, MXFP8 tracks bf16, the save
// policies and the weight cache change nothing bit for bit, runs are deterministic, a
// resumed run repeats the uninterrupted one, a diverging run stops naming its step, and the
// step benchmark's interleaved runs make the training loop's own steps.
#include "mxtrain/train/train.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <limits>
#include <random>
#include <vector>

#include "mxtrain/train/data.h"
#include "mxtrain/train/model.h"
#include "mxtrain/train/nn.h"
#include "mxtrain/train/optim.h"
#include "mxtrain/train/step_bench.h"

namespace mxtrain {
namespace {

ModelConfig TinyModel() {
  ModelConfig m;
  m.d_model = 32;
  m.n_layers = 1;
  m.n_heads = 2;
  m.n_experts = 4;
  m.top_k = 2;
  m.d_ff = 32;
  m.context = 16;
  return m;
}

TrainConfig TinyRun(const Recipe& recipe, int64_t steps) {
  TrainConfig c;
  c.model = TinyModel();
  c.recipe = recipe;
  c.steps = steps;
  c.batch_size = 4;
  c.micro_batches = 2;
  c.eval_every = 10;
  c.eval_batches = 2;
  c.lr.peak_lr = 1e-2;
  c.lr.min_lr = 1e-3;
  c.lr.warmup_steps = 5;
  c.threads = 2;
  return c;
}

const Corpus& TinyCorpus() {
  static const Corpus c = SplitCorpus(BuiltinCorpus(40000), 16, "built-in");
  return c;
}

Recipe Mx(SavePolicy input, SavePolicy weight, bool reuse) {
  RecipeOptions o;
  o.input_policy = input;
  o.weight_policy = weight;
  o.reuse_quantized_weights = reuse;
  return Recipe::Make(o);
}

Recipe Hp(Precision p) {
  RecipeOptions o;
  o.precision = p;
  return Recipe::Make(o);
}

std::vector<double> Losses(const TrainResult& r) {
  std::vector<double> v;
  for (const StepMetrics& m : r.steps) v.push_back(m.train_loss);
  return v;
}

// Bit equality of two loss curves (as doubles).
void ExpectSameCurve(const TrainResult& a, const TrainResult& b) {
  ASSERT_EQ(a.steps.size(), b.steps.size());
  for (size_t i = 0; i < a.steps.size(); ++i) {
    EXPECT_EQ(std::memcmp(&a.steps[i].train_loss, &b.steps[i].train_loss, sizeof(double)), 0)
        << "step " << a.steps[i].step << ": " << a.steps[i].train_loss << " vs "
        << b.steps[i].train_loss;
  }
  EXPECT_EQ(std::memcmp(&a.final_val_loss, &b.final_val_loss, sizeof(double)), 0);
}

// AdamW's update written out one element at a time, as the optimizer documents it (fp32
// moments and weights; bias corrections, step size and decay in double, then fp32).
struct ScalarAdamW {
  std::vector<std::vector<float>> m, v;
  void Step(int64_t step, double lr, const AdamWOptions& o, std::vector<std::vector<float>>& w,
            const std::vector<std::vector<float>>& g, const std::vector<int>& rank) {
    const double c1 = 1.0 - std::pow(o.beta1, static_cast<double>(step));
    const double c2 = 1.0 - std::pow(o.beta2, static_cast<double>(step));
    const float step_size = static_cast<float>(lr / c1);
    const float inv_sqrt_c2 = static_cast<float>(1.0 / std::sqrt(c2));
    const float eps = static_cast<float>(o.eps);
    const float b1 = static_cast<float>(o.beta1), b2 = static_cast<float>(o.beta2);
    for (size_t i = 0; i < w.size(); ++i) {
      const float decay = rank[i] >= 2 ? static_cast<float>(1.0 - lr * o.weight_decay) : 1.0f;
      for (size_t j = 0; j < w[i].size(); ++j) {
        m[i][j] = b1 * m[i][j] + (1.0f - b1) * g[i][j];
        v[i][j] = b2 * v[i][j] + (1.0f - b2) * g[i][j] * g[i][j];
        const float denom = std::sqrt(v[i][j]) * inv_sqrt_c2 + eps;
        w[i][j] = w[i][j] * decay - step_size * m[i][j] / denom;
      }
    }
  }
};

// Parameters of every size a split can cut unevenly (1 element, fewer than a vector,
// odd, a matrix), three steps of seeded gradients with zeros, subnormals and a large
// value among them: on 1, 2 and 3 threads, every weight and moment equals the scalar
// update bit for bit, the gradients are zeroed, and rank-1 parameters take no decay.
TEST(TrainOptim, AdamWOnAnyThreadCountEqualsTheScalarUpdate) {
  const std::vector<Shape> shapes{{1}, {7}, {33, 65}, {4099}, {64, 128}};
  std::vector<int> rank;
  for (const Shape& s : shapes) rank.push_back(static_cast<int>(s.rank()));
  const auto values = [&](uint64_t seed) {
    std::mt19937_64 gen(seed);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::vector<std::vector<float>> out;
    for (const Shape& s : shapes) {
      std::vector<float> x(static_cast<size_t>(s.NumElements()));
      for (size_t j = 0; j < x.size(); ++j) {
        x[j] = normal(gen);
        if (j % 97 == 5) x[j] = 0.0f;
        if (j % 89 == 3) x[j] = 1e-40f;  // subnormal: no flush to zero anywhere
        if (j % 83 == 7) x[j] = 3e4f;
      }
      out.push_back(std::move(x));
    }
    return out;
  };
  AdamWOptions o;
  const std::vector<double> lrs{1e-3, 3e-3, 2e-3};
  for (int threads : {1, 2, 3}) {
    SCOPED_TRACE(threads);
    std::vector<std::vector<float>> w = values(1);
    std::vector<std::shared_ptr<Parameter>> params;
    for (size_t i = 0; i < shapes.size(); ++i) {
      Tensor t = Tensor::Empty(DType::kF32, shapes[i]);
      std::memcpy(t.raw(), w[i].data(), t.NumBytes());
      params.push_back(std::make_shared<Parameter>(std::move(t)));
    }
    AdamWOptions ot = o;
    ot.threads = threads;
    AdamW opt(params, ot);
    ScalarAdamW ref;
    for (const auto& x : w) {
      ref.m.emplace_back(x.size(), 0.0f);
      ref.v.emplace_back(x.size(), 0.0f);
    }
    for (int step = 1; step <= 3; ++step) {
      const std::vector<std::vector<float>> g = values(100 + step);
      for (size_t i = 0; i < params.size(); ++i) {
        params[i]->ZeroMainGrad();
        std::memcpy(params[i]->main_grad().raw(), g[i].data(), g[i].size() * sizeof(float));
      }
      opt.Step(lrs[step - 1], nullptr);
      ref.Step(step, lrs[step - 1], o, w, g, rank);
      for (size_t i = 0; i < params.size(); ++i) {
        const size_t bytes = w[i].size() * sizeof(float);
        EXPECT_EQ(std::memcmp(params[i]->value().raw(), w[i].data(), bytes), 0)
            << "weights of parameter " << i << " after step " << step;
        EXPECT_EQ(std::memcmp(opt.exp_avg()[i].raw(), ref.m[i].data(), bytes), 0)
            << "first moment of parameter " << i << " after step " << step;
        EXPECT_EQ(std::memcmp(opt.exp_avg_sq()[i].raw(), ref.v[i].data(), bytes), 0)
            << "second moment of parameter " << i << " after step " << step;
        const float* grad = params[i]->main_grad().data<float>();
        for (size_t j = 0; j < w[i].size(); ++j) ASSERT_EQ(grad[j], 0.0f) << i << " " << j;
      }
    }
  }
  // A negative thread count is an error, not "all cores".
  std::vector<std::shared_ptr<Parameter>> bad{
      std::make_shared<Parameter>(Tensor::Zeros(DType::kF32, {4}))};
  AdamWOptions negative;
  negative.threads = -1;
  AdamW opt(bad, negative);
  bad[0]->ZeroMainGrad();
  try {
    opt.Step(1e-3, nullptr);
    ADD_FAILURE() << "threads = -1 accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("threads must be >= 0"), std::string::npos) << e.what();
  }
}

TEST(TrainModel, Fp32GradientsMatchFiniteDifferences) {
  ModelConfig m = TinyModel();
  m.aux_loss_coef = 0;  // Evaluate returns the cross-entropy alone
  m.context = 8;
  Model model(m, Hp(Precision::kFp32), 3, 1);
  const Batch b = SampleBatch(TinyCorpus().train, m.context, 2, 5, 1, 0);
  for (const auto& p : model.parameters()) p->ZeroMainGrad();
  model.ForwardBackward(b.ids, b.targets, b.batch, 1.0f);
  int checked = 0;
  for (const auto& p : model.parameters()) {
    SCOPED_TRACE(p->name());
    float* v = p->value().data<float>();
    const int64_t n = p->value().NumElements();
    // A few elements of each parameter (for the embedding: rows of bytes in the batch).
    std::vector<int64_t> at;
    if (p->name() == "embed.weight") {
      at = {b.ids[0] * m.d_model, b.ids[3] * m.d_model + 5};
    } else {
      at = {0, n / 3, n - 1};
    }
    for (int64_t i : at) {
      const double eps = 1e-2;
      const float saved = v[i];
      v[i] = static_cast<float>(saved + eps);
      p->MarkModified();
      const double up = model.Evaluate(b.ids, b.targets, b.batch);
      v[i] = static_cast<float>(saved - eps);
      p->MarkModified();
      const double down = model.Evaluate(b.ids, b.targets, b.batch);
      v[i] = saved;
      p->MarkModified();
      const double numeric = (up - down) / (2 * eps);
      const double analytic = p->main_grad().data<float>()[i];
      // Measured agreement: within 3e-6 for gradients of 5e-4 to 5e-2.
      EXPECT_NEAR(analytic, numeric, 1e-5 + 0.02 * std::fabs(numeric)) << "element " << i;
      ++checked;
    }
  }
  EXPECT_GT(checked, 20);
}

// The bf16 and MXFP8 models differ from the fp32 one only by the rounding of the matmuls'
// operands: their gradients must track fp32's (a dtype or cast slip would not).
TEST(TrainModel, LowPrecisionGradientsTrackFp32) {
  const ModelConfig m = TinyModel();
  const Batch b = SampleBatch(TinyCorpus().train, m.context, 4, 5, 1, 0);
  auto grads = [&](const Recipe& r) {
    Model model(m, r, 3, 2);
    for (const auto& p : model.parameters()) p->ZeroMainGrad();
    model.ForwardBackward(b.ids, b.targets, b.batch, 1.0f);
    std::vector<std::vector<float>> g;
    for (const auto& p : model.parameters()) {
      const float* v = p->main_grad().data<float>();
      g.emplace_back(v, v + p->main_grad().NumElements());
    }
    return g;
  };
  const auto ref = grads(Hp(Precision::kFp32));
  const std::vector<std::pair<Recipe, double>> cases = {
      // Measured: 0.0038 and 0.076 (E4M3's 3 mantissa bits on every operand).
      {Hp(Precision::kBf16), 0.02},
      {Mx(SavePolicy::kQuantized, SavePolicy::kQuantized, false), 0.15}};
  for (const auto& [recipe, bound] : cases) {
    SCOPED_TRACE(recipe.ToString());
    const auto g = grads(recipe);
    double err = 0, norm = 0;
    for (size_t i = 0; i < ref.size(); ++i) {
      for (size_t j = 0; j < ref[i].size(); ++j) {
        err +=
            (static_cast<double>(g[i][j]) - ref[i][j]) * (static_cast<double>(g[i][j]) - ref[i][j]);
        norm += static_cast<double>(ref[i][j]) * ref[i][j];
      }
    }
    EXPECT_LT(std::sqrt(err / norm), bound);
  }
}

TEST(TrainLoop, ShortRunLossFalls) {
  const TrainResult r = Train(TinyRun(Hp(Precision::kBf16), 40), TinyCorpus());
  ASSERT_EQ(r.steps.size(), 40u);
  double first = r.steps[0].train_loss, last = 0;
  for (size_t i = 35; i < 40; ++i) last += r.steps[i].train_loss / 5;
  EXPECT_GT(first, 5.0);  // about ln 256 at the start
  EXPECT_LT(last, first - 2.0);
  EXPECT_LT(r.final_val_loss, UnigramEntropy(TinyCorpus().val));
  for (const StepMetrics& m : r.steps) {
    EXPECT_GT(m.peak_bytes, 0);
    EXPECT_GT(m.saved_bytes, 0);
    EXPECT_GT(m.step_ms, 0);
    EXPECT_TRUE(std::isfinite(m.grad_norm));
  }
  EXPECT_FALSE(std::isnan(r.steps[9].val_loss));
  EXPECT_TRUE(std::isnan(r.steps[8].val_loss));
}

TEST(TrainLoop, Mxfp8StaysWithinTwoPercentOfBf16) {
  const TrainResult bf16 = Train(TinyRun(Hp(Precision::kBf16), 40), TinyCorpus());
  const TrainResult mx =
      Train(TinyRun(Mx(SavePolicy::kQuantized, SavePolicy::kQuantized, true), 40), TinyCorpus());
  EXPECT_LT(std::fabs(mx.final_val_loss - bf16.final_val_loss) / bf16.final_val_loss, 0.02)
      << "bf16 " << bf16.final_val_loss << ", mxfp8 " << mx.final_val_loss;
  EXPECT_LT(std::fabs(mx.final_train_loss - bf16.final_train_loss) / bf16.final_train_loss, 0.02);
}

TEST(TrainLoop, SavePoliciesAndWeightReuseGiveIdenticalLossCurves) {
  const TrainResult base =
      Train(TinyRun(Mx(SavePolicy::kQuantized, SavePolicy::kQuantized, false), 12), TinyCorpus());
  for (auto [in, w, reuse] : {std::tuple{SavePolicy::kDeferred, SavePolicy::kDeferred, true},
                              std::tuple{SavePolicy::kQuantized, SavePolicy::kDeferred, false},
                              std::tuple{SavePolicy::kDeferred, SavePolicy::kQuantized, true},
                              std::tuple{SavePolicy::kQuantized, SavePolicy::kQuantized, true}}) {
    const Recipe r = Mx(in, w, reuse);
    SCOPED_TRACE(r.ToString());
    ExpectSameCurve(base, Train(TinyRun(r, 12), TinyCorpus()));
  }
}

TEST(TrainLoop, WeightCacheHitsAcrossMicroBatches) {
  TrainConfig c = TinyRun(Mx(SavePolicy::kQuantized, SavePolicy::kQuantized, true), 3);
  const TrainResult r = Train(c, TinyCorpus());
  // 5 MXFP8 weights (q, k, v, o, the head; the experts' two) = 7, each quantized once per
  // step (one dual-axis miss) and served from the cache for the second micro-batch.
  for (const StepMetrics& m : r.steps) {
    EXPECT_EQ(m.cache_misses, 2 * 7) << "step " << m.step;  // rowwise + columnwise layouts
    EXPECT_EQ(m.cache_hits, 2 * 7) << "step " << m.step;
  }
  c.recipe = Mx(SavePolicy::kQuantized, SavePolicy::kQuantized, false);
  for (const StepMetrics& m : Train(c, TinyCorpus()).steps) {
    EXPECT_EQ(m.cache_hits + m.cache_misses, 0);
  }
}

TEST(TrainLoop, DeterministicForASeed) {
  const TrainConfig c = TinyRun(Mx(SavePolicy::kDeferred, SavePolicy::kDeferred, true), 8);
  const TrainResult a = Train(c, TinyCorpus());
  ExpectSameCurve(a, Train(c, TinyCorpus()));
  TrainConfig other = c;
  other.seed = 2;
  EXPECT_NE(Losses(a), Losses(Train(other, TinyCorpus())));
}

TEST(TrainLoop, NonFiniteLossStopsNamingTheStep) {
  TrainConfig c = TinyRun(Hp(Precision::kFp32), 10);
  c.lr.peak_lr = 1e30;
  c.lr.warmup_steps = 0;
  try {
    Train(c, TinyCorpus());
    FAIL() << "expected NonFiniteLossError";
  } catch (const NonFiniteLossError& e) {
    EXPECT_GE(e.step(), 2);
    EXPECT_NE(std::string(e.what()).find(StrCat("at step ", e.step())), std::string::npos);
  }
}

TEST(TrainLoop, BadConfigurationsAreErrors) {
  TrainConfig c = TinyRun(Hp(Precision::kBf16), 0);
  EXPECT_THROW(Train(c, TinyCorpus()), Error);
  c.steps = 1;
  c.model.n_heads = 3;  // 32 is not a multiple of 3
  EXPECT_THROW(Train(c, TinyCorpus()), Error);
  EXPECT_THROW(SplitCorpus(std::string(20, 'a'), 16, "tiny"), Error);
}

// The step benchmark (step_bench.h) steps its runs in turn, each with its own model: every
// run's steps are those Train makes of it alone (losses, gradient norms, learning rates
// bit for bit), the times and ratios are positive, the first run's ratio is 1, and bad
// counts and runs are errors.
TEST(TrainStepBench, InterleavedRunsRepeatTheirOwnTraining) {
  std::vector<TrainConfig> runs = {
      TinyRun(Hp(Precision::kBf16), 0),
      TinyRun(Mx(SavePolicy::kQuantized, SavePolicy::kQuantized, true), 0),
      TinyRun(Mx(SavePolicy::kAuto, SavePolicy::kAuto, true), 0)};
  runs[0].name = "bf16";
  runs[1].name = "mxfp8-quantized";
  runs[2].name = "mxfp8-auto";
  const int64_t warmup = 2, rounds = 3;
  const std::vector<StepBenchResult> results = RunStepBench(runs, TinyCorpus(), warmup, rounds);
  ASSERT_EQ(results.size(), runs.size());
  for (size_t i = 0; i < runs.size(); ++i) {
    SCOPED_TRACE(runs[i].name);
    const StepBenchResult& b = results[i];
    EXPECT_EQ(b.name, runs[i].name);
    TrainConfig alone = runs[i];
    alone.steps = warmup + rounds;
    const TrainResult t = Train(alone, TinyCorpus());
    ASSERT_EQ(b.steps.size(), t.steps.size());
    for (size_t k = 0; k < t.steps.size(); ++k) {
      EXPECT_EQ(b.steps[k].step, t.steps[k].step);
      for (auto field : {&StepMetrics::train_loss, &StepMetrics::aux_loss, &StepMetrics::grad_norm,
                         &StepMetrics::lr}) {
        EXPECT_EQ(std::memcmp(&(b.steps[k].*field), &(t.steps[k].*field), sizeof(double)), 0)
            << "step " << t.steps[k].step << ": " << b.steps[k].*field << " vs "
            << t.steps[k].*field;
      }
      EXPECT_GT(b.steps[k].step_ms, 0);
    }
    EXPECT_GT(b.step_ms, 0);
    EXPECT_LE(b.min_step_ms, b.step_ms);
    EXPECT_GT(b.ratio, 0);
  }
  EXPECT_EQ(results[0].ratio, 1.0);
  EXPECT_THROW(RunStepBench(runs, TinyCorpus(), 0, 0), Error);
  EXPECT_THROW(RunStepBench({}, TinyCorpus(), 0, 1), Error);
  runs[1].checkpoint_path = "unused";
  EXPECT_THROW(RunStepBench(runs, TinyCorpus(), 0, 1), Error);
}

class TrainCheckpoint : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() / StrCat("mxtrain_train_test_", getpid());
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string Path(const std::string& name) const { return (dir_ / name).string(); }
  std::filesystem::path dir_;
};

TEST_F(TrainCheckpoint, ResumeRepeatsTheUninterruptedRunBitForBit) {
  for (const Recipe& recipe :
       {Hp(Precision::kBf16), Mx(SavePolicy::kDeferred, SavePolicy::kDeferred, true)}) {
    SCOPED_TRACE(recipe.ToString());
    TrainConfig full = TinyRun(recipe, 12);
    full.eval_every = 4;
    const TrainResult whole = Train(full, TinyCorpus());

    TrainConfig first = full;
    first.checkpoint_path = Path("ckpt.safetensors");
    first.checkpoint_every = 5;  // the checkpoint left after the step-7 stop is step 5's
    first.on_step = [](const StepMetrics& m) {
      if (m.step == 7) throw Error("interrupted");
    };
    EXPECT_THROW(Train(first, TinyCorpus()), Error);

    TrainConfig rest = full;
    rest.resume_path = first.checkpoint_path;
    const TrainResult resumed = Train(rest, TinyCorpus());
    EXPECT_EQ(resumed.resumed_from, 5);
    ExpectSameCurve(whole, resumed);
  }
}

TEST_F(TrainCheckpoint, MismatchedModelIsAnError) {
  TrainConfig c = TinyRun(Hp(Precision::kBf16), 2);
  c.checkpoint_path = Path("ckpt.safetensors");
  Train(c, TinyCorpus());
  TrainConfig other = c;
  other.checkpoint_path.clear();
  other.resume_path = c.checkpoint_path;
  other.model.d_ff = 64;
  try {
    Train(other, TinyCorpus());
    FAIL() << "expected an Error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("d_ff=32"), std::string::npos) << e.what();
  }
  other.model = c.model;
  other.seed = 2;  // other batches: resuming would not repeat the run
  try {
    Train(other, TinyCorpus());
    FAIL() << "expected an Error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("run.seed 1, this run has 2"), std::string::npos)
        << e.what();
  }
  other.seed = c.seed;
  EXPECT_THROW(Train(other, SplitCorpus(BuiltinCorpus(30000), 16, "other")), Error);
  EXPECT_EQ(CheckCheckpoint(c.checkpoint_path, other, TinyCorpus()), 2);
  other.resume_path = Path("missing.safetensors");
  EXPECT_THROW(Train(other, TinyCorpus()), Error);
}
}  // namespace
}  // namespace mxtrain
