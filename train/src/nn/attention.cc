// The causal attention core in fp32 (nn.h): per sequence b and head h, S = Q K^T / sqrt(d)
// masked to j <= i, P = softmax(S) along j, O = P V. The backward uses the saved P:
// dP = dO V^T, dS = P * (dP - rowsum(P * dP)), dQ = dS K / sqrt(d), dK = dS^T Q / sqrt(d),
// dV = P^T dO. Each (b, h) pair owns disjoint rows and columns of every output, so pairs
// run in parallel and each sum runs in one fixed order.
#include <cmath>
#include <span>
#include <vector>

#include "mxtrain/elementwise.h"
#include "mxtrain/train/nn.h"
#include "nn/nn_internal.h"

namespace mxtrain::nn {

using internal::CheckF32Matrix;
using internal::Threads;

namespace {

struct Dims {
  int64_t b, t, h, d, width;
};

Dims CheckAttention(const Tensor& q, const Tensor& k, const Tensor& v, int64_t batch,
                    int64_t heads) {
  CheckF32Matrix(q, "attention q");
  CheckF32Matrix(k, "attention k");
  CheckF32Matrix(v, "attention v");
  MXTRAIN_CHECK(q.shape() == k.shape() && q.shape() == v.shape(), "attention: q ",
                q.shape().ToString(), ", k ", k.shape().ToString(), " and v ", v.shape().ToString(),
                " must have one shape");
  MXTRAIN_CHECK(batch > 0 && heads > 0 && q.shape()[0] % batch == 0 && q.shape()[1] % heads == 0,
                "attention: ", q.shape().ToString(), " does not split into ", batch,
                " sequences and ", heads, " heads");
  return Dims{batch, q.shape()[0] / batch, heads, q.shape()[1] / heads, q.shape()[1]};
}

}  // namespace

AttentionOut CausalAttentionForward(const Tensor& q, const Tensor& k, const Tensor& v,
                                    int64_t batch, int64_t heads, int threads) {
  const Dims n = CheckAttention(q, k, v, batch, heads);
  AttentionOut o{Tensor::Empty(DType::kF32, q.shape()),
                 Tensor::Zeros(DType::kF32, {n.b, n.h, n.t, n.t})};
  const float* qp = q.data<float>();
  const float* kp = k.data<float>();
  const float* vp = v.data<float>();
  float* out = o.out.data<float>();
  float* probs = o.probs.data<float>();
  const float scale = 1.0f / std::sqrt(static_cast<float>(n.d));
#pragma omp parallel num_threads(Threads(threads))
  {
    // K of one (b, h) transposed to [d, T], so that a row of scores is a sum of d scaled
    // rows (vectorizes along j without reassociating any sum).
    std::vector<float> kt(static_cast<size_t>(n.d * n.t));
#pragma omp for schedule(static)
    for (int64_t bh = 0; bh < n.b * n.h; ++bh) {
      const int64_t b = bh / n.h, h = bh % n.h;
      const int64_t row0 = b * n.t, col0 = h * n.d;
      float* p = probs + bh * n.t * n.t;
      for (int64_t j = 0; j < n.t; ++j) {
        const float* kj = kp + (row0 + j) * n.width + col0;
        for (int64_t c = 0; c < n.d; ++c) kt[c * n.t + j] = kj[c];
      }
      for (int64_t i = 0; i < n.t; ++i) {
        const float* qi = qp + (row0 + i) * n.width + col0;
        float* pi = p + i * n.t;
        for (int64_t j = 0; j <= i; ++j) pi[j] = 0;
        for (int64_t c = 0; c < n.d; ++c) {
          const float qc = qi[c];
          const float* ktc = kt.data() + c * n.t;
          for (int64_t j = 0; j <= i; ++j) pi[j] += qc * ktc[j];
        }
        float mx = -INFINITY;
        for (int64_t j = 0; j <= i; ++j) {
          pi[j] *= scale;
          mx = std::fmax(mx, pi[j]);
        }
        for (int64_t j = 0; j <= i; ++j) pi[j] -= mx;
        const std::span<float> row(pi, static_cast<size_t>(i + 1));
        ExpF32(row, row);  // std::exp's bits, by vectors
        float sum = 0;
        for (int64_t j = 0; j <= i; ++j) sum += pi[j];
        const float inv = 1.0f / sum;
        for (int64_t j = 0; j <= i; ++j) pi[j] *= inv;
        float* oi = out + (row0 + i) * n.width + col0;
        for (int64_t c = 0; c < n.d; ++c) oi[c] = 0;
        for (int64_t j = 0; j <= i; ++j) {
          const float* vj = vp + (row0 + j) * n.width + col0;
          const float pij = pi[j];
          for (int64_t c = 0; c < n.d; ++c) oi[c] += pij * vj[c];
        }
      }
    }
  }
  return o;
}

AttentionGrads CausalAttentionBackward(const Tensor& dout, const Tensor& q, const Tensor& k,
                                       const Tensor& v, const Tensor& probs, int64_t batch,
                                       int64_t heads, int threads) {
  const Dims n = CheckAttention(q, k, v, batch, heads);
  CheckF32Matrix(dout, "attention output gradient");
  MXTRAIN_CHECK(dout.shape() == q.shape(), "attention backward: gradient ", dout.shape().ToString(),
                " for q ", q.shape().ToString());
  MXTRAIN_CHECK(probs.NumElements() == n.b * n.h * n.t * n.t,
                "attention backward: probabilities of the wrong size");
  AttentionGrads g{Tensor::Empty(DType::kF32, q.shape(), MemoryCategory::kGradient),
                   Tensor::Empty(DType::kF32, q.shape(), MemoryCategory::kGradient),
                   Tensor::Empty(DType::kF32, q.shape(), MemoryCategory::kGradient)};
  const float* qp = q.data<float>();
  const float* kp = k.data<float>();
  const float* vp = v.data<float>();
  const float* dop = dout.data<float>();
  const float* pp = probs.data<float>();
  float* dq = g.dq.data<float>();
  float* dk = g.dk.data<float>();
  float* dv = g.dv.data<float>();
  const float scale = 1.0f / std::sqrt(static_cast<float>(n.d));
#pragma omp parallel num_threads(Threads(threads))
  {
    std::vector<float> ds(static_cast<size_t>(n.t * n.t));
    std::vector<float> vt(static_cast<size_t>(n.d * n.t));  // V transposed, as K forward
#pragma omp for schedule(static)
    for (int64_t bh = 0; bh < n.b * n.h; ++bh) {
      const int64_t b = bh / n.h, h = bh % n.h;
      const int64_t row0 = b * n.t, col0 = h * n.d;
      const float* p = pp + bh * n.t * n.t;
      auto at = [&](const float* base, int64_t row) {
        return base + (row0 + row) * n.width + col0;
      };
      for (int64_t j = 0; j < n.t; ++j) {
        const float* vj = at(vp, j);
        for (int64_t c = 0; c < n.d; ++c) vt[c * n.t + j] = vj[c];
      }
      for (int64_t i = 0; i < n.t; ++i) {
        const float* doi = at(dop, i);
        const float* pi = p + i * n.t;
        float* dsi = ds.data() + i * n.t;
        for (int64_t j = 0; j <= i; ++j) dsi[j] = 0;  // dP for now
        for (int64_t c = 0; c < n.d; ++c) {
          const float dc = doi[c];
          const float* vtc = vt.data() + c * n.t;
          for (int64_t j = 0; j <= i; ++j) dsi[j] += dc * vtc[j];
        }
        float dot = 0;
        for (int64_t j = 0; j <= i; ++j) dot += pi[j] * dsi[j];
        for (int64_t j = 0; j <= i; ++j) dsi[j] = pi[j] * (dsi[j] - dot) * scale;
        float* dqi = dq + (row0 + i) * n.width + col0;
        for (int64_t c = 0; c < n.d; ++c) dqi[c] = 0;
        for (int64_t j = 0; j <= i; ++j) {
          const float* kj = at(kp, j);
          for (int64_t c = 0; c < n.d; ++c) dqi[c] += dsi[j] * kj[c];
        }
      }
      for (int64_t j = 0; j < n.t; ++j) {
        float* dkj = dk + (row0 + j) * n.width + col0;
        float* dvj = dv + (row0 + j) * n.width + col0;
        for (int64_t c = 0; c < n.d; ++c) dkj[c] = dvj[c] = 0;
        for (int64_t i = j; i < n.t; ++i) {
          const float dsij = ds[i * n.t + j], pij = p[i * n.t + j];
          const float* qi = at(qp, i);
          const float* doi = at(dop, i);
          for (int64_t c = 0; c < n.d; ++c) {
            dkj[c] += dsij * qi[c];
            dvj[c] += pij * doi[c];
          }
        }
      }
    }
  }
  return g;
}

}  // namespace mxtrain::nn
