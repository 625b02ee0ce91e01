// The mixture-of-experts pieces around GroupedLinear (nn.h): the top-k router with the
// Switch load-balancing loss, and the permutation of tokens into expert order and back.
#include <cmath>
#include <cstring>
#include <numeric>

#include "mxtrain/train/nn.h"
#include "nn/nn_internal.h"

namespace mxtrain::nn {

using internal::CheckF32Matrix;
using internal::Threads;

RouterOut RouterForward(const Tensor& logits, int k) {
  CheckF32Matrix(logits, "router logits");
  const int64_t t = logits.shape()[0], e = logits.shape()[1];
  MXTRAIN_CHECK(k >= 1 && k <= e, "router: top-", k, " of ", e, " experts");
  RouterOut r;
  r.k = k;
  r.experts.resize(static_cast<size_t>(t * k));
  r.weights = Tensor::Empty(DType::kF32, {t, k});
  r.probs = Tensor::Empty(DType::kF32, {t, e});
  r.fraction.assign(static_cast<size_t>(e), 0.0);
  const float* lp = logits.data<float>();
  float* w = r.weights.data<float>();
  float* pr = r.probs.data<float>();
  std::vector<double> mean_p(static_cast<size_t>(e), 0.0);
  for (int64_t i = 0; i < t; ++i) {
    const float* row = lp + i * e;
    float mx = row[0];
    for (int64_t j = 1; j < e; ++j) mx = std::fmax(mx, row[j]);
    float sum = 0;
    for (int64_t j = 0; j < e; ++j) sum += std::exp(row[j] - mx);
    for (int64_t j = 0; j < e; ++j) {
      pr[i * e + j] = std::exp(row[j] - mx) / sum;
      mean_p[j] += pr[i * e + j];
    }
    // Top-k by selection: the largest logit not yet taken, ties to the lower index.
    int32_t* chosen = r.experts.data() + i * k;
    for (int s = 0; s < k; ++s) {
      int32_t best = -1;
      for (int64_t j = 0; j < e; ++j) {
        bool taken = false;
        for (int u = 0; u < s; ++u) taken |= chosen[u] == j;
        if (taken) continue;
        if (best < 0 || row[j] > row[best] || (std::isnan(row[j]) && !std::isnan(row[best]))) {
          best = static_cast<int32_t>(j);
        }
      }
      chosen[s] = best;
    }
    // Softmax over the k chosen logits (= the full softmax renormalized over them).
    float smx = row[chosen[0]];
    for (int s = 1; s < k; ++s) smx = std::fmax(smx, row[chosen[s]]);
    float ssum = 0;
    for (int s = 0; s < k; ++s) ssum += std::exp(row[chosen[s]] - smx);
    for (int s = 0; s < k; ++s) {
      w[i * k + s] = std::exp(row[chosen[s]] - smx) / ssum;
      r.fraction[chosen[s]] += 1.0;
    }
  }
  double aux = 0;
  for (int64_t j = 0; j < e; ++j) {
    r.fraction[j] /= static_cast<double>(t * k > 0 ? t * k : 1);
    mean_p[j] /= static_cast<double>(t > 0 ? t : 1);
    aux += r.fraction[j] * mean_p[j];
  }
  r.aux_loss = static_cast<double>(e) * aux;
  return r;
}

Tensor RouterBackward(const RouterOut& r, const Tensor& dweights, double aux_scale) {
  const int64_t t = r.probs.shape()[0], e = r.probs.shape()[1];
  const int k = r.k;
  MXTRAIN_CHECK(dweights.dtype() == DType::kF32 && dweights.NumElements() == t * k,
                "router backward: weight gradient of ", dweights.NumElements(), " elements for ", t,
                " tokens x top-", k);
  Tensor dl = Tensor::Zeros(DType::kF32, {t, e}, MemoryCategory::kGradient);
  const float* dw = dweights.data<float>();
  const float* w = r.weights.data<float>();
  const float* pr = r.probs.data<float>();
  float* out = dl.data<float>();
  for (int64_t i = 0; i < t; ++i) {
    // Through the top-k softmax: dl_s = w_s (dw_s - sum_u w_u dw_u).
    float dot = 0;
    for (int s = 0; s < k; ++s) dot += w[i * k + s] * dw[i * k + s];
    for (int s = 0; s < k; ++s) {
      out[i * e + r.experts[i * k + s]] += w[i * k + s] * (dw[i * k + s] - dot);
    }
    // The aux loss: d aux / d p_{i,j} = E * f_j / T (f held constant), through the full
    // softmax.
    if (aux_scale != 0) {
      double g_dot = 0;
      std::vector<double> g(static_cast<size_t>(e));
      for (int64_t j = 0; j < e; ++j) {
        g[j] = aux_scale * static_cast<double>(e) * r.fraction[j] / static_cast<double>(t);
        g_dot += pr[i * e + j] * g[j];
      }
      for (int64_t j = 0; j < e; ++j) {
        out[i * e + j] += static_cast<float>(pr[i * e + j] * (g[j] - g_dot));
      }
    }
  }
  return dl;
}

Permutation MakePermutation(std::span<const int32_t> experts, int64_t num_tokens, int k,
                            int num_experts) {
  MXTRAIN_CHECK(static_cast<int64_t>(experts.size()) == num_tokens * k,
                "permutation: ", experts.size(), " assignments for ", num_tokens, " tokens x top-",
                k);
  Permutation p;
  p.num_tokens = num_tokens;
  p.k = k;
  p.counts.assign(static_cast<size_t>(num_experts), 0);
  for (size_t a = 0; a < experts.size(); ++a) {
    MXTRAIN_CHECK(experts[a] >= 0 && experts[a] < num_experts, "permutation: expert ", experts[a],
                  " outside [0, ", num_experts, ")");
    ++p.counts[experts[a]];
  }
  std::vector<int64_t> next(static_cast<size_t>(num_experts), 0);
  std::partial_sum(p.counts.begin(), p.counts.end() - 1, next.begin() + 1);
  p.position.resize(experts.size());
  p.token.resize(experts.size());
  for (size_t a = 0; a < experts.size(); ++a) {  // assignment order = token order
    const int64_t pos = next[experts[a]]++;
    p.position[a] = pos;
    p.token[pos] = static_cast<int64_t>(a) / k;
  }
  p.groups = GroupList::Make(p.counts, GroupListType::kCounts, num_tokens * k);
  return p;
}

Tensor Permute(const Tensor& x, const Permutation& p, int threads) {
  CheckF32Matrix(x, "permute input");
  MXTRAIN_CHECK(x.shape()[0] == p.num_tokens, "permute: ", x.shape()[0], " rows for ", p.num_tokens,
                " tokens");
  const int64_t d = x.shape()[1], rows = static_cast<int64_t>(p.token.size());
  Tensor xs = Tensor::Empty(DType::kF32, {rows, d});
  const float* in = x.data<float>();
  float* out = xs.data<float>();
#pragma omp parallel for num_threads(Threads(threads)) schedule(static)
  for (int64_t i = 0; i < rows; ++i) {
    std::memcpy(out + i * d, in + p.token[i] * d, sizeof(float) * d);
  }
  return xs;
}

namespace {

// out[t] = sum over the token's k slots j of w_j * in[position[t, j]] (w_j = 1 without
// weights): the un-permutation and, without weights, the permutation's gradient.
void CombineSlots(const float* in, const Permutation& p, const float* w, int64_t d, float* out,
                  int threads) {
#pragma omp parallel for num_threads(Threads(threads)) schedule(static)
  for (int64_t t = 0; t < p.num_tokens; ++t) {
    float* row = out + t * d;
    for (int64_t c = 0; c < d; ++c) row[c] = 0;
    for (int j = 0; j < p.k; ++j) {
      const float wj = w != nullptr ? w[t * p.k + j] : 1.0f;
      const float* src = in + p.position[t * p.k + j] * d;
      for (int64_t c = 0; c < d; ++c) row[c] += wj * src[c];
    }
  }
}

}  // namespace

Tensor PermuteBackward(const Tensor& dxs, const Permutation& p, int threads) {
  CheckF32Matrix(dxs, "permute gradient");
  const int64_t d = dxs.shape()[1];
  MXTRAIN_CHECK(dxs.shape()[0] == static_cast<int64_t>(p.token.size()),
                "permute backward: gradient rows do not match the permutation");
  Tensor dx = Tensor::Empty(DType::kF32, {p.num_tokens, d}, MemoryCategory::kGradient);
  CombineSlots(dxs.data<float>(), p, nullptr, d, dx.data<float>(), threads);
  return dx;
}

Tensor Unpermute(const Tensor& ys, const Permutation& p, const Tensor& weights, int threads) {
  CheckF32Matrix(ys, "unpermute input");
  MXTRAIN_CHECK(ys.shape()[0] == static_cast<int64_t>(p.token.size()) &&
                    weights.NumElements() == p.num_tokens * p.k,
                "unpermute: rows or weights do not match the permutation");
  const int64_t d = ys.shape()[1];
  Tensor y = Tensor::Empty(DType::kF32, {p.num_tokens, d});
  CombineSlots(ys.data<float>(), p, weights.data<float>(), d, y.data<float>(), threads);
  return y;
}

UnpermuteGrads UnpermuteBackward(const Tensor& dy, const Tensor& ys, const Permutation& p,
                                 const Tensor& weights, int threads) {
  CheckF32Matrix(dy, "unpermute gradient");
  CheckF32Matrix(ys, "unpermute input");
  MXTRAIN_CHECK(dy.shape()[0] == p.num_tokens && dy.shape()[1] == ys.shape()[1],
                "unpermute backward: gradient ", dy.shape().ToString(), " for ", p.num_tokens,
                " tokens of width ", ys.shape()[1]);
  const int64_t d = dy.shape()[1];
  UnpermuteGrads g{Tensor::Empty(DType::kF32, ys.shape(), MemoryCategory::kGradient),
                   Tensor::Empty(DType::kF32, {p.num_tokens, p.k}, MemoryCategory::kGradient)};
  const float* gp = dy.data<float>();
  const float* in = ys.data<float>();
  const float* w = weights.data<float>();
  float* dys = g.dys.data<float>();
  float* dw = g.dweights.data<float>();
#pragma omp parallel for num_threads(Threads(threads)) schedule(static)
  for (int64_t t = 0; t < p.num_tokens; ++t) {
    const float* grow = gp + t * d;
    for (int j = 0; j < p.k; ++j) {
      const int64_t pos = p.position[t * p.k + j];
      const float wj = w[t * p.k + j];
      const float* src = in + pos * d;
      float* dst = dys + pos * d;
      float s = 0;
      for (int64_t c = 0; c < d; ++c) {
        dst[c] = wj * grow[c];
        s += grow[c] * src[c];
      }
      dw[t * p.k + j] = s;
    }
  }
  return g;
}

}  // namespace mxtrain::nn
