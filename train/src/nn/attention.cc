// The causal attention core in fp32 (nn.h): per sequence b and head h, S = Q K^T / sqrt(d)
// masked to j <= i, P = softmax(S) along j, O = P V. The backward uses the saved P:
// dP = dO V^T, dS = P * (dP - rowsum(P * dP)), dQ = dS K / sqrt(d), dK = dS^T Q / sqrt(d),
// dV = P^T dO. Each (b, h) pair owns disjoint rows and columns of every output, so pairs
// run in parallel and each sum runs in one fixed order. The six products go through
// OrderedMatMulF32 (elementwise.h): vectors along the columns, each sum in K order, so the
// bits are those of the plain loops on every SIMD target, and the causal triangle is its
// row ranges. The softmax's max and sums stay scalar loops in j order.
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
      // S = Q K^T on and below the diagonal (above it P stays zero).
      OrderedMatMulF32({.rows = n.t,
                        .cols = n.t,
                        .depth = n.d,
                        .a = qp + row0 * n.width + col0,
                        .a_row = n.width,
                        .a_depth = 1,
                        .b = kt.data(),
                        .ldb = n.t,
                        .c = p,
                        .ldc = n.t,
                        .range = OrderedRange::kColsToDiagonal});
      for (int64_t i = 0; i < n.t; ++i) {
        float* pi = p + i * n.t;
        float mx = -INFINITY;
        for (int64_t j = 0; j <= i; ++j) {
          pi[j] *= scale;
          mx = pi[j] > mx ? pi[j] : mx;  // std::fmax without the call (NaN never wins)
        }
        for (int64_t j = 0; j <= i; ++j) pi[j] -= mx;
        const std::span<float> row(pi, static_cast<size_t>(i + 1));
        ExpF32(row, row);  // std::exp's bits, by vectors
        float sum = 0;
        for (int64_t j = 0; j <= i; ++j) sum += pi[j];
        const float inv = 1.0f / sum;
        for (int64_t j = 0; j <= i; ++j) pi[j] *= inv;
      }
      // O = P V, row i over j <= i.
      OrderedMatMulF32({.rows = n.t,
                        .cols = n.d,
                        .depth = n.t,
                        .a = p,
                        .a_row = n.t,
                        .a_depth = 1,
                        .b = vp + row0 * n.width + col0,
                        .ldb = n.width,
                        .c = out + row0 * n.width + col0,
                        .ldc = n.width,
                        .range = OrderedRange::kDepthToDiagonal});
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
      const int64_t base = (b * n.t) * n.width + h * n.d;  // (row 0, column 0) of this pair
      const float* p = pp + bh * n.t * n.t;
      for (int64_t j = 0; j < n.t; ++j) {
        const float* vj = vp + base + j * n.width;
        for (int64_t c = 0; c < n.d; ++c) vt[c * n.t + j] = vj[c];
      }
      // dP = dO V^T on and below the diagonal, into ds.
      OrderedMatMulF32({.rows = n.t,
                        .cols = n.t,
                        .depth = n.d,
                        .a = dop + base,
                        .a_row = n.width,
                        .a_depth = 1,
                        .b = vt.data(),
                        .ldb = n.t,
                        .c = ds.data(),
                        .ldc = n.t,
                        .range = OrderedRange::kColsToDiagonal});
      for (int64_t i = 0; i < n.t; ++i) {
        const float* pi = p + i * n.t;
        float* dsi = ds.data() + i * n.t;
        float dot = 0;
        for (int64_t j = 0; j <= i; ++j) dot += pi[j] * dsi[j];
        for (int64_t j = 0; j <= i; ++j) dsi[j] = pi[j] * (dsi[j] - dot) * scale;
      }
      // dQ = dS K (row i over j <= i); dK = dS^T Q and dV = P^T dO (row j over i >= j).
      OrderedMatMulF32({.rows = n.t,
                        .cols = n.d,
                        .depth = n.t,
                        .a = ds.data(),
                        .a_row = n.t,
                        .a_depth = 1,
                        .b = kp + base,
                        .ldb = n.width,
                        .c = dq + base,
                        .ldc = n.width,
                        .range = OrderedRange::kDepthToDiagonal});
      OrderedMatMulF32({.rows = n.t,
                        .cols = n.d,
                        .depth = n.t,
                        .a = ds.data(),
                        .a_row = 1,
                        .a_depth = n.t,
                        .b = qp + base,
                        .ldb = n.width,
                        .c = dk + base,
                        .ldc = n.width,
                        .range = OrderedRange::kDepthFromDiagonal});
      OrderedMatMulF32({.rows = n.t,
                        .cols = n.d,
                        .depth = n.t,
                        .a = p,
                        .a_row = 1,
                        .a_depth = n.t,
                        .b = dop + base,
                        .ldb = n.width,
                        .c = dv + base,
                        .ldc = n.width,
                        .range = OrderedRange::kDepthFromDiagonal});
    }
  }
  return g;
}

}  // namespace mxtrain::nn
