// The fp32 layers of nn.h: every backward against central finite differences of a
// double-accumulated loss L = sum(f(x) * r), the permutation against its definition, and
// results independent of the thread count.
#include "mxtrain/train/nn.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <random>
#include <vector>

#include "mxtrain/elementwise.h"
#include "mxtrain/error.h"

namespace mxtrain {
namespace {

Tensor Random(const Shape& shape, uint64_t seed, float scale = 1.0f) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, scale);
  Tensor t = Tensor::Empty(DType::kF32, shape);
  for (int64_t i = 0; i < t.NumElements(); ++i) t.data<float>()[i] = normal(rng);
  return t;
}

double Dot(const Tensor& a, const Tensor& b) {
  double s = 0;
  for (int64_t i = 0; i < a.NumElements(); ++i) {
    s += static_cast<double>(a.data<float>()[i]) * b.data<float>()[i];
  }
  return s;
}

bool SameBytes(const Tensor& a, const Tensor& b) {
  return a.shape() == b.shape() && std::memcmp(a.raw(), b.raw(), a.NumBytes()) == 0;
}

// Compares analytic[i] with (L(x_i + eps) - L(x_i - eps)) / (2 eps) at every element of x
// (or `samples` of them spread evenly).
void CheckGrad(const char* what, Tensor& x, const Tensor& analytic,
               const std::function<double()>& loss, double eps = 1e-2, double tol = 2e-3,
               int64_t samples = 64) {
  SCOPED_TRACE(what);
  ASSERT_EQ(x.NumElements(), analytic.NumElements());
  const int64_t n = x.NumElements();
  const int64_t stride = std::max<int64_t>(1, n / samples);
  float* v = x.data<float>();
  for (int64_t i = 0; i < n; i += stride) {
    const float saved = v[i];
    v[i] = static_cast<float>(saved + eps);
    const double up = loss();
    v[i] = static_cast<float>(saved - eps);
    const double down = loss();
    v[i] = saved;
    const double numeric = (up - down) / (2 * eps);
    const double a = analytic.data<float>()[i];
    EXPECT_NEAR(a, numeric, tol * std::max(1.0, std::fabs(numeric))) << "element " << i;
  }
}

TEST(NnEmbedding, ForwardGathersAndBackwardScattersInOrder) {
  Tensor table = Random({10, 6}, 1);
  const std::vector<int32_t> ids = {3, 0, 3, 9};
  const Tensor y = nn::EmbeddingForward(table, ids);
  for (size_t i = 0; i < ids.size(); ++i) {
    EXPECT_EQ(0, std::memcmp(y.data<float>() + i * 6, table.data<float>() + ids[i] * 6, 24));
  }
  const Tensor dy = Random({4, 6}, 2);
  Tensor dtable = Tensor::Zeros(DType::kF32, {10, 6});
  nn::EmbeddingBackward(dy, ids, dtable);
  for (int j = 0; j < 6; ++j) {
    EXPECT_EQ(dtable.data<float>()[3 * 6 + j], dy.data<float>()[j] + dy.data<float>()[12 + j]);
    EXPECT_EQ(dtable.data<float>()[0 * 6 + j], dy.data<float>()[6 + j]);
    EXPECT_EQ(dtable.data<float>()[5 * 6 + j], 0.0f);
  }
  const std::vector<int32_t> bad = {10};
  EXPECT_THROW(nn::EmbeddingForward(table, bad), Error);
}

TEST(NnRmsNorm, GradientsMatchFiniteDifferences) {
  Tensor x = Random({5, 12}, 3);
  Tensor gain = Random({12}, 4, 0.5f);
  for (int64_t j = 0; j < 12; ++j) gain.data<float>()[j] += 1.0f;
  const Tensor r = Random({5, 12}, 5);
  auto loss = [&] { return Dot(nn::RmsNormForward(x, gain).y, r); };
  const nn::RmsNormOut o = nn::RmsNormForward(x, gain);
  Tensor dgain = Tensor::Zeros(DType::kF32, {12});
  const Tensor dx = nn::RmsNormBackward(r, x, gain, o.rstd, dgain);
  CheckGrad("dx", x, dx, loss);
  CheckGrad("dgain", gain, dgain, loss);
  // The gain's gradient accumulates into what is there.
  const float once = dgain.data<float>()[0];
  nn::RmsNormBackward(r, x, gain, o.rstd, dgain);
  EXPECT_FLOAT_EQ(dgain.data<float>()[0], 2 * once);
}

// The definition's loops, one row (or one column of the gain's gradient) at a time, each
// sum in order: the layer's results, whatever rows it groups or columns it blocks, are
// these bits (13 rows: groups and a partial one; 150 columns: blocks and a partial one).
TEST(NnRmsNorm, EqualsTheInOrderLoopsBitForBit) {
  const int64_t t = 13, d = 150;
  const Tensor x = Random({t, d}, 30), gain = Random({d}, 31), dy = Random({t, d}, 32);
  const float* xp = x.data<float>();
  const float* g = gain.data<float>();
  const float* gp = dy.data<float>();
  std::vector<float> y(t * d), rstd(t), dx(t * d), dgain(d, 0.25f);
  for (int64_t i = 0; i < t; ++i) {
    double ss = 0;
    for (int64_t j = 0; j < d; ++j) ss += static_cast<double>(xp[i * d + j]) * xp[i * d + j];
    rstd[i] = static_cast<float>(1.0 / std::sqrt(ss / static_cast<double>(d) + 1e-5f));
    for (int64_t j = 0; j < d; ++j) y[i * d + j] = xp[i * d + j] * rstd[i] * g[j];
    double dot = 0;
    for (int64_t j = 0; j < d; ++j) {
      dot += static_cast<double>(xp[i * d + j]) * rstd[i] * g[j] * gp[i * d + j];
    }
    const float m = static_cast<float>(dot / static_cast<double>(d));
    for (int64_t j = 0; j < d; ++j) {
      dx[i * d + j] = rstd[i] * (g[j] * gp[i * d + j] - xp[i * d + j] * rstd[i] * m);
    }
  }
  for (int64_t j = 0; j < d; ++j) {
    float s = 0;
    for (int64_t i = 0; i < t; ++i) s += gp[i * d + j] * xp[i * d + j] * rstd[i];
    dgain[j] += s;
  }
  const nn::RmsNormOut o = nn::RmsNormForward(x, gain);
  Tensor dg = Tensor::Empty(DType::kF32, {d});
  for (int64_t j = 0; j < d; ++j) dg.data<float>()[j] = 0.25f;
  const Tensor dxt = nn::RmsNormBackward(dy, x, gain, o.rstd, dg);
  EXPECT_EQ(0, std::memcmp(o.y.raw(), y.data(), y.size() * sizeof(float)));
  EXPECT_EQ(0, std::memcmp(o.rstd.raw(), rstd.data(), rstd.size() * sizeof(float)));
  EXPECT_EQ(0, std::memcmp(dxt.raw(), dx.data(), dx.size() * sizeof(float)));
  EXPECT_EQ(0, std::memcmp(dg.raw(), dgain.data(), dgain.size() * sizeof(float)));
}

TEST(NnAttention, GradientsMatchFiniteDifferences) {
  const int64_t b = 2, t = 5, h = 2, d = 4;
  Tensor q = Random({b * t, h * d}, 6), k = Random({b * t, h * d}, 7),
         v = Random({b * t, h * d}, 8);
  const Tensor r = Random({b * t, h * d}, 9);
  auto loss = [&] { return Dot(nn::CausalAttentionForward(q, k, v, b, h).out, r); };
  const nn::AttentionOut o = nn::CausalAttentionForward(q, k, v, b, h);
  const nn::AttentionGrads g = nn::CausalAttentionBackward(r, q, k, v, o.probs, b, h);
  CheckGrad("dq", q, g.dq, loss, 1e-2, 2e-3, 1000);
  CheckGrad("dk", k, g.dk, loss, 1e-2, 2e-3, 1000);
  CheckGrad("dv", v, g.dv, loss, 1e-2, 2e-3, 1000);
}

TEST(NnAttention, IsCausalAndMatchesADoubleReference) {
  const int64_t b = 1, t = 7, h = 2, d = 8;
  const Tensor q = Random({t, h * d}, 10), k = Random({t, h * d}, 11), v = Random({t, h * d}, 12);
  const Tensor out = nn::CausalAttentionForward(q, k, v, b, h).out;
  for (int64_t hh = 0; hh < h; ++hh) {
    for (int64_t i = 0; i < t; ++i) {
      std::vector<double> s(i + 1);
      double mx = -1e300, sum = 0;
      for (int64_t j = 0; j <= i; ++j) {
        for (int64_t c = 0; c < d; ++c) {
          s[j] += static_cast<double>(q.data<float>()[i * h * d + hh * d + c]) *
                  k.data<float>()[j * h * d + hh * d + c];
        }
        s[j] /= std::sqrt(static_cast<double>(d));
        mx = std::max(mx, s[j]);
      }
      for (double& x : s) sum += (x = std::exp(x - mx));
      for (int64_t c = 0; c < d; ++c) {
        double o = 0;
        for (int64_t j = 0; j <= i; ++j) o += s[j] / sum * v.data<float>()[j * h * d + hh * d + c];
        EXPECT_NEAR(out.data<float>()[i * h * d + hh * d + c], o, 1e-5) << i << "," << c;
      }
    }
  }
  // Changing the last position's key and value leaves every earlier output as it was.
  Tensor k2 = Random({t, h * d}, 13), v2 = Random({t, h * d}, 14);
  std::memcpy(k2.raw(), k.raw(), (t - 1) * h * d * 4);
  std::memcpy(v2.raw(), v.raw(), (t - 1) * h * d * 4);
  const Tensor out2 = nn::CausalAttentionForward(q, k2, v2, b, h).out;
  EXPECT_EQ(0, std::memcmp(out.raw(), out2.raw(), (t - 1) * h * d * 4));
}

// The attention's every output bit for bit against the plain loops that nn.h and
// attention.cc describe (each sum from 0 in its index order, products rounded before they
// are added, std::exp), forward and backward, with sequence lengths that do and do not
// fill the softmax's groups of interleaved rows, on one and two threads.
TEST(NnAttention, BitsAreThePlainLoops) {
  for (const int64_t t : {13, 64}) {
    const int64_t b = 2, h = 3, d = t == 64 ? 32 : 5, w = h * d;
    const Tensor q = Random({b * t, w}, 40 + t), k = Random({b * t, w}, 41 + t),
                 v = Random({b * t, w}, 42 + t), dout = Random({b * t, w}, 43 + t);
    const Tensor out = Tensor::Zeros(DType::kF32, {b * t, w}),
                 dq = Tensor::Zeros(DType::kF32, {b * t, w}),
                 dk = Tensor::Zeros(DType::kF32, {b * t, w}),
                 dv = Tensor::Zeros(DType::kF32, {b * t, w}),
                 probs = Tensor::Zeros(DType::kF32, {b, h, t, t});
    const float* Q = q.data<float>();
    const float* K = k.data<float>();
    const float* V = v.data<float>();
    const float* dO = dout.data<float>();
    const float scale = 1.0f / std::sqrt(static_cast<float>(d));
    for (int64_t bb = 0; bb < b; ++bb) {
      for (int64_t hh = 0; hh < h; ++hh) {
        const auto at = [&](int64_t row, int64_t c) { return (bb * t + row) * w + hh * d + c; };
        float* P = probs.data<float>() + (bb * h + hh) * t * t;
        std::vector<float> dS(t * t, 0.0f);
        for (int64_t i = 0; i < t; ++i) {
          float mx = -INFINITY;
          for (int64_t j = 0; j <= i; ++j) {
            float s = 0;
            for (int64_t c = 0; c < d; ++c) s += Q[at(i, c)] * K[at(j, c)];
            P[i * t + j] = s * scale;
            mx = P[i * t + j] > mx ? P[i * t + j] : mx;
          }
          float sum = 0;
          for (int64_t j = 0; j <= i; ++j) sum += (P[i * t + j] = std::exp(P[i * t + j] - mx));
          const float inv = 1.0f / sum;
          for (int64_t j = 0; j <= i; ++j) P[i * t + j] *= inv;
          for (int64_t c = 0; c < d; ++c) {
            float o = 0;
            for (int64_t j = 0; j <= i; ++j) o += P[i * t + j] * V[at(j, c)];
            out.data<float>()[at(i, c)] = o;
          }
          float dot = 0;
          for (int64_t j = 0; j <= i; ++j) {
            float dp = 0;
            for (int64_t c = 0; c < d; ++c) dp += dO[at(i, c)] * V[at(j, c)];
            dS[i * t + j] = dp;
            dot += P[i * t + j] * dp;
          }
          for (int64_t j = 0; j <= i; ++j) {
            dS[i * t + j] = P[i * t + j] * (dS[i * t + j] - dot) * scale;
          }
        }
        for (int64_t i = 0; i < t; ++i) {
          for (int64_t c = 0; c < d; ++c) {
            float sq = 0, sk = 0, sv = 0;
            for (int64_t j = 0; j <= i; ++j) sq += dS[i * t + j] * K[at(j, c)];
            for (int64_t r = i; r < t; ++r) sk += dS[r * t + i] * Q[at(r, c)];
            for (int64_t r = i; r < t; ++r) sv += P[r * t + i] * dO[at(r, c)];
            dq.data<float>()[at(i, c)] = sq;
            dk.data<float>()[at(i, c)] = sk;
            dv.data<float>()[at(i, c)] = sv;
          }
        }
      }
    }
    for (const int threads : {1, 2}) {
      const nn::AttentionOut o = nn::CausalAttentionForward(q, k, v, b, h, threads);
      EXPECT_TRUE(SameBytes(o.out, out)) << "out, T " << t << ", threads " << threads;
      EXPECT_TRUE(SameBytes(o.probs, probs)) << "P, T " << t << ", threads " << threads;
      const nn::AttentionGrads g =
          nn::CausalAttentionBackward(dout, q, k, v, o.probs, b, h, threads);
      EXPECT_TRUE(SameBytes(g.dq, dq)) << "dq, T " << t << ", threads " << threads;
      EXPECT_TRUE(SameBytes(g.dk, dk)) << "dk, T " << t << ", threads " << threads;
      EXPECT_TRUE(SameBytes(g.dv, dv)) << "dv, T " << t << ", threads " << threads;
    }
  }
}

TEST(NnSwiGlu, GradientMatchesFiniteDifferences) {
  Tensor gu = Random({6, 10}, 15, 2.0f);
  const Tensor r = Random({6, 5}, 16);
  auto loss = [&] { return Dot(nn::SwiGluForward(gu), r); };
  const Tensor dgu = nn::SwiGluBackward(r, gu);
  CheckGrad("dgu", gu, dgu, loss, 1e-3, 2e-3, 1000);
  const float a = gu.data<float>()[0], u = gu.data<float>()[5];
  EXPECT_FLOAT_EQ(nn::SwiGluForward(gu).data<float>()[0], a / (1 + std::exp(-a)) * u);
}

// A bf16 SwiGLU (what the model runs on its bf16 activations) is the f32 one on the
// widened values, cast to bf16 once, bit for bit, on any thread count; mixed dtypes are
// an error.
TEST(NnSwiGlu, Bf16IsTheF32FormOnTheWidenedValuesRounded) {
  const Tensor gu = CastTo(Random({37, 2 * 70}, 21, 3.0f), DType::kBF16);
  const Tensor dh = CastTo(Random({37, 70}, 22), DType::kBF16);
  const Tensor gu32 = CastTo(gu, DType::kF32), dh32 = CastTo(dh, DType::kF32);
  const Tensor h_want = CastTo(nn::SwiGluForward(gu32, 1), DType::kBF16);
  const Tensor dgu_want = CastTo(nn::SwiGluBackward(dh32, gu32, 1), DType::kBF16);
  for (int threads : {1, 2, 3}) {
    const Tensor h = nn::SwiGluForward(gu, threads);
    const Tensor dgu = nn::SwiGluBackward(dh, gu, threads);
    ASSERT_EQ(h.dtype(), DType::kBF16);
    ASSERT_EQ(dgu.dtype(), DType::kBF16);
    EXPECT_EQ(std::memcmp(h.raw(), h_want.raw(), h.NumBytes()), 0) << threads;
    EXPECT_EQ(std::memcmp(dgu.raw(), dgu_want.raw(), dgu.NumBytes()), 0) << threads;
  }
  EXPECT_THROW(nn::SwiGluBackward(dh32, gu), Error);
  EXPECT_THROW(nn::SwiGluForward(CastTo(gu, DType::kF32).Reshape({37, 2, 70})), Error);
}

TEST(NnRouter, TopKWeightsAndAuxLossGradients) {
  const int64_t t = 6, e = 5;
  const int k = 2;
  // Logits far apart, so that no finite-difference step changes the top-k choice.
  Tensor logits = Tensor::Empty(DType::kF32, {t, e});
  std::mt19937_64 rng(17);
  for (int64_t i = 0; i < t; ++i) {
    std::vector<int> order = {0, 1, 2, 3, 4};
    std::shuffle(order.begin(), order.end(), rng);
    for (int64_t j = 0; j < e; ++j) logits.data<float>()[i * e + j] = 0.5f * order[j];
  }
  const Tensor r = Random({t, k}, 18);
  const double aux_scale = 0.7;
  auto loss = [&] {
    const nn::RouterOut o = nn::RouterForward(logits, k);
    return Dot(o.weights, r) + aux_scale * o.aux_loss;
  };
  const nn::RouterOut o = nn::RouterForward(logits, k);
  for (int64_t i = 0; i < t; ++i) {
    const float* row = logits.data<float>() + i * e;
    EXPECT_GT(row[o.experts[i * k]], row[o.experts[i * k + 1]]);
    EXPECT_NEAR(o.weights.data<float>()[i * k] + o.weights.data<float>()[i * k + 1], 1.0f, 1e-6);
  }
  double f_sum = 0;
  for (double f : o.fraction) f_sum += f;
  EXPECT_NEAR(f_sum, 1.0, 1e-12);
  const Tensor dl = nn::RouterBackward(o, r, aux_scale);
  CheckGrad("dlogits", logits, dl, loss, 1e-3, 2e-3, 1000);
}

TEST(NnRouter, BalancedRoutingHasAuxLossOne) {
  // Uniform probabilities and an even split: E * sum_e (1/E)(1/E) = 1.
  const Tensor logits = Tensor::Zeros(DType::kF32, {4, 4});
  const nn::RouterOut o = nn::RouterForward(logits, 4);
  EXPECT_NEAR(o.aux_loss, 1.0, 1e-6);
}

TEST(NnPermutation, SortsByExpertKeepsTokenOrderAndRoundTrips) {
  const std::vector<int32_t> experts = {2, 0, 0, 1, 2, 1, 2, 0};  // 4 tokens x top-2
  const nn::Permutation p = nn::MakePermutation(experts, 4, 2, 4);
  EXPECT_EQ(p.counts, (std::vector<int64_t>{3, 2, 3, 0}));
  EXPECT_EQ(p.token, (std::vector<int64_t>{0, 1, 3, 1, 2, 0, 2, 3}));
  EXPECT_EQ(p.groups.num_groups(), 4);
  EXPECT_EQ(p.groups.size(3), 0);
  const Tensor x = Random({4, 3}, 19);
  const Tensor xs = nn::Permute(x, p);
  for (int64_t i = 0; i < 8; ++i) {
    EXPECT_EQ(0, std::memcmp(xs.data<float>() + i * 3, x.data<float>() + p.token[i] * 3, 12));
  }
  // Unpermute with weights (0.25, 0.75) of the permuted rows gives x back.
  Tensor w = Tensor::Empty(DType::kF32, {4, 2});
  for (int i = 0; i < 4; ++i) {
    w.data<float>()[2 * i] = 0.25f;
    w.data<float>()[2 * i + 1] = 0.75f;
  }
  const Tensor back = nn::Unpermute(xs, p, w);
  for (int64_t i = 0; i < 12; ++i) EXPECT_FLOAT_EQ(back.data<float>()[i], x.data<float>()[i]);
  // PermuteBackward is the adjoint of Permute: <Permute(x), r> = <x, PermuteBackward(r)>.
  const Tensor r = Random({8, 3}, 20);
  EXPECT_NEAR(Dot(xs, r), Dot(x, nn::PermuteBackward(r, p)), 1e-5);
}

TEST(NnPermutation, UnpermuteGradientsMatchFiniteDifferences) {
  const std::vector<int32_t> experts = {1, 0, 2, 1, 0, 2};
  const nn::Permutation p = nn::MakePermutation(experts, 3, 2, 3);
  Tensor ys = Random({6, 4}, 21);
  Tensor w = Random({3, 2}, 22);
  const Tensor r = Random({3, 4}, 23);
  auto loss = [&] { return Dot(nn::Unpermute(ys, p, w), r); };
  const nn::UnpermuteGrads g = nn::UnpermuteBackward(r, ys, p, w);
  CheckGrad("dys", ys, g.dys, loss);
  CheckGrad("dweights", w, g.dweights, loss);
}

TEST(NnCrossEntropy, LossAndGradientMatchReferences) {
  Tensor logits = Random({4, 7}, 24, 2.0f);
  const std::vector<int32_t> targets = {0, 6, 3, 3};
  double want = 0;
  for (int i = 0; i < 4; ++i) {
    double sum = 0;
    for (int j = 0; j < 7; ++j)
      sum += std::exp(static_cast<double>(logits.data<float>()[i * 7 + j]));
    want += std::log(sum) - logits.data<float>()[i * 7 + targets[i]];
  }
  Tensor dlogits;
  EXPECT_NEAR(nn::CrossEntropy(logits, targets, &dlogits, 0.5f), want / 4, 1e-9);
  auto loss = [&] { return 0.5 * nn::CrossEntropy(logits, targets); };
  CheckGrad("dlogits", logits, dlogits, loss, 1e-3, 2e-3, 1000);
  const std::vector<int32_t> bad = {0, 7, 0, 0};
  EXPECT_THROW(nn::CrossEntropy(logits, bad), Error);
  // A NaN logit, first in its row or not, makes that row's gradient NaN and leaves the
  // other rows' as they were; the loss is NaN.
  for (const int col : {0, 4}) {
    Tensor bad_logits = Tensor::Empty(DType::kF32, {4, 7});
    std::memcpy(bad_logits.raw(), logits.raw(), logits.NumBytes());
    bad_logits.data<float>()[1 * 7 + col] = std::numeric_limits<float>::quiet_NaN();
    Tensor dbad;
    EXPECT_TRUE(std::isnan(nn::CrossEntropy(bad_logits, targets, &dbad, 0.5f))) << col;
    for (int j = 0; j < 7; ++j) EXPECT_TRUE(std::isnan(dbad.data<float>()[7 + j])) << col << j;
    EXPECT_EQ(0, std::memcmp(dbad.raw(), dlogits.raw(), 7 * sizeof(float))) << col;
    EXPECT_EQ(0, std::memcmp(dbad.data<float>() + 14, dlogits.data<float>() + 14, 14 * 4)) << col;
  }
}

TEST(NnThreads, ResultsDoNotDependOnTheThreadCount) {
  const int64_t b = 3, t = 16, h = 2, d = 8;
  const Tensor q = Random({b * t, h * d}, 25), k = Random({b * t, h * d}, 26),
               v = Random({b * t, h * d}, 27), r = Random({b * t, h * d}, 28);
  const nn::AttentionOut o1 = nn::CausalAttentionForward(q, k, v, b, h, 1);
  const nn::AttentionOut o2 = nn::CausalAttentionForward(q, k, v, b, h, 2);
  EXPECT_TRUE(SameBytes(o1.out, o2.out));
  EXPECT_TRUE(SameBytes(o1.probs, o2.probs));
  for (const nn::AttentionOut* o : {&o1, &o2}) {  // P is 0 above the diagonal (nn.h)
    const float* p = o->probs.data<float>();
    for (int64_t m = 0; m < b * h; ++m) {
      for (int64_t i = 0; i < t; ++i) {
        for (int64_t j = i + 1; j < t; ++j) ASSERT_EQ(p[(m * t + i) * t + j], 0.0f) << m << i << j;
      }
    }
  }
  const nn::AttentionGrads g1 = nn::CausalAttentionBackward(r, q, k, v, o1.probs, b, h, 1);
  const nn::AttentionGrads g2 = nn::CausalAttentionBackward(r, q, k, v, o2.probs, b, h, 2);
  EXPECT_TRUE(SameBytes(g1.dq, g2.dq) && SameBytes(g1.dk, g2.dk) && SameBytes(g1.dv, g2.dv));
  const Tensor gain = Random({h * d}, 29);
  Tensor dg1 = Tensor::Zeros(DType::kF32, {h * d}), dg2 = Tensor::Zeros(DType::kF32, {h * d});
  const nn::RmsNormOut n1 = nn::RmsNormForward(q, gain, 1e-5f, 1);
  const nn::RmsNormOut n2 = nn::RmsNormForward(q, gain, 1e-5f, 2);
  EXPECT_TRUE(SameBytes(n1.y, n2.y));
  EXPECT_TRUE(SameBytes(nn::RmsNormBackward(r, q, gain, n1.rstd, dg1, 1),
                        nn::RmsNormBackward(r, q, gain, n2.rstd, dg2, 2)));
  EXPECT_TRUE(SameBytes(dg1, dg2));
}

}  // namespace
}  // namespace mxtrain
