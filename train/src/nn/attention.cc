// The causal attention core in fp32 (nn.h): per sequence b and head h, S = Q K^T / sqrt(d)
// masked to j <= i, P = softmax(S) along j, O = P V. The backward uses the saved P:
// dP = dO V^T, dS = P * (dP - rowsum(P * dP)), dQ = dS K / sqrt(d), dK = dS^T Q / sqrt(d),
// dV = P^T dO. Each (b, h) pair owns disjoint rows and columns of every output, so pairs
// run in parallel and each sum runs in one fixed order. The six products go through
// OrderedMatMulF32 (elementwise.h): vectors along the columns, each sum in K order, so the
// bits are those of the plain loops on every SIMD target, and the causal triangle is its
// row ranges. The softmax's max and sums stay scalar loops in j order, four rows' chains
// interleaved.
#include <algorithm>
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

// A head's rows [T, d] (row stride width) transposed to [d, T] in `out`, so that a row of
// scores is a sum of d scaled rows (vectors along j without reassociating any sum).
void TransposeHead(const Dims& n, const float* head, float* out) {
  for (int64_t j = 0; j < n.t; ++j) {
    for (int64_t c = 0; c < n.d; ++c) out[c * n.t + j] = head[j * n.width + c];
  }
}

// out [T, T] (on and below the diagonal; above it stays as it is) = a head's rows [T, d]
// times the transpose `transposed` [d, T] of another: S = Q K^T, dP = dO V^T.
void ScoresToDiagonal(const Dims& n, const float* head, const float* transposed, float* out) {
  OrderedMatMulF32({.rows = n.t,
                    .cols = n.t,
                    .depth = n.d,
                    .a = head,
                    .a_row = n.width,
                    .a_depth = 1,
                    .b = transposed,
                    .ldb = n.t,
                    .c = out,
                    .ldc = n.t,
                    .range = OrderedRange::kColsToDiagonal});
}

// A head's rows of `out` = m [T, T] (lower triangular), or its transpose, times a head's
// rows [T, d]: O = P V and dQ = dS K sum over j <= i; dK = dS^T Q and dV = P^T dO over
// i >= j.
void TimesHead(const Dims& n, const float* m, bool transposed, const float* head, float* out) {
  OrderedMatMulF32(
      {.rows = n.t,
       .cols = n.d,
       .depth = n.t,
       .a = m,
       .a_row = transposed ? 1 : n.t,
       .a_depth = transposed ? n.t : 1,
       .b = head,
       .ldb = n.width,
       .c = out,
       .ldc = n.width,
       .range = transposed ? OrderedRange::kDepthFromDiagonal : OrderedRange::kDepthToDiagonal});
}

// Rows of a causal [T, T] row set (row i holds j <= i) taken kGroup at a time, so that the
// softmax's in-order chains (max, sum, the backward's dot) of kGroup rows run interleaved:
// each chain alone waits on its own add or compare (a few cycles a term), and rows are
// independent, so interleaving leaves every row's sequence of operations as it was.
constexpr int kGroup = 4;

// acc[r] = step(i0 + r, j, acc[r]) for j = 0 .. i0 + r in order, for the kG rows from i0:
// the j the rows share side by side, then each row's last r terms.
template <int kG, typename Step>
void TriangleRowChains(int64_t i0, float (&acc)[kG], Step&& step) {
  for (int64_t j = 0; j <= i0; ++j) {
    for (int r = 0; r < kG; ++r) acc[r] = step(i0 + r, j, acc[r]);
  }
  for (int r = 1; r < kG; ++r) {
    for (int64_t j = i0 + 1; j <= i0 + r; ++j) acc[r] = step(i0 + r, j, acc[r]);
  }
}

// Softmax of rows [i0, i0 + kG) of S in place (row i over j <= i, scaled by `scale`), the
// entries above the diagonal set to zero: per row, scale, max, subtract, exp, sum, divide,
// each in j order as one row alone does them.
template <int kG>
void SoftmaxRows(int64_t t, int64_t i0, float scale, float* p) {
  float mx[kG], sum[kG];
  for (int r = 0; r < kG; ++r) {
    const int64_t i = i0 + r;
    float* pi = p + i * t;
    // Above the diagonal P is zero: written here, by the pair's own thread, rather than by a
    // serial memset of the whole tensor (1 MiB a layer in the default model).
    std::fill(pi + i + 1, pi + t, 0.0f);
    for (int64_t j = 0; j <= i; ++j) pi[j] *= scale;
    mx[r] = -INFINITY;
  }
  // std::fmax without the call (NaN never wins).
  TriangleRowChains<kG>(i0, mx, [&](int64_t i, int64_t j, float m) {
    const float x = p[i * t + j];
    return x > m ? x : m;
  });
  for (int r = 0; r < kG; ++r) {
    const int64_t i = i0 + r;
    float* pi = p + i * t;
    for (int64_t j = 0; j <= i; ++j) pi[j] -= mx[r];
    const std::span<float> row(pi, static_cast<size_t>(i + 1));
    ExpF32(row, row);  // std::exp's bits, by vectors
    sum[r] = 0;
  }
  TriangleRowChains<kG>(i0, sum, [&](int64_t i, int64_t j, float s) { return s + p[i * t + j]; });
  for (int r = 0; r < kG; ++r) {
    const int64_t i = i0 + r;
    float* pi = p + i * t;
    const float inv = 1.0f / sum[r];
    for (int64_t j = 0; j <= i; ++j) pi[j] *= inv;
  }
}

// dS = P * (dP - rowsum(P * dP)) * scale for rows [i0, i0 + kG), dP in ds, in place.
template <int kG>
void SoftmaxBackwardRows(int64_t t, int64_t i0, float scale, const float* p, float* ds) {
  float dot[kG];
  for (int r = 0; r < kG; ++r) dot[r] = 0;
  TriangleRowChains<kG>(
      i0, dot, [&](int64_t i, int64_t j, float d) { return d + p[i * t + j] * ds[i * t + j]; });
  for (int r = 0; r < kG; ++r) {
    const int64_t i = i0 + r;
    const float* pi = p + i * t;
    float* dsi = ds + i * t;
    for (int64_t j = 0; j <= i; ++j) dsi[j] = pi[j] * (dsi[j] - dot[r]) * scale;
  }
}

}  // namespace

AttentionOut CausalAttentionForward(const Tensor& q, const Tensor& k, const Tensor& v,
                                    int64_t batch, int64_t heads, int threads) {
  const Dims n = CheckAttention(q, k, v, batch, heads);
  AttentionOut o{Tensor::Empty(DType::kF32, q.shape()),
                 Tensor::Empty(DType::kF32, {n.b, n.h, n.t, n.t})};
  const float* qp = q.data<float>();
  const float* kp = k.data<float>();
  const float* vp = v.data<float>();
  float* out = o.out.data<float>();
  float* probs = o.probs.data<float>();
  const float scale = 1.0f / std::sqrt(static_cast<float>(n.d));
#pragma omp parallel num_threads(Threads(threads))
  {
    std::vector<float> kt(static_cast<size_t>(n.d * n.t));  // K of one (b, h), transposed
#pragma omp for schedule(static)
    for (int64_t bh = 0; bh < n.b * n.h; ++bh) {
      const int64_t b = bh / n.h, h = bh % n.h;
      const int64_t base = (b * n.t) * n.width + h * n.d;  // (row 0, column 0) of this pair
      float* p = probs + bh * n.t * n.t;
      TransposeHead(n, kp + base, kt.data());
      ScoresToDiagonal(n, qp + base, kt.data(), p);  // S, on and below the diagonal
      int64_t i = 0;
      for (; i + kGroup <= n.t; i += kGroup) SoftmaxRows<kGroup>(n.t, i, scale, p);
      for (; i < n.t; ++i) SoftmaxRows<1>(n.t, i, scale, p);
      TimesHead(n, p, /*transposed=*/false, vp + base, out + base);  // O = P V
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
      TransposeHead(n, vp + base, vt.data());
      ScoresToDiagonal(n, dop + base, vt.data(), ds.data());  // dP, into ds
      int64_t i = 0;
      for (; i + kGroup <= n.t; i += kGroup)
        SoftmaxBackwardRows<kGroup>(n.t, i, scale, p, ds.data());
      for (; i < n.t; ++i) SoftmaxBackwardRows<1>(n.t, i, scale, p, ds.data());
      TimesHead(n, ds.data(), /*transposed=*/false, kp + base, dq + base);  // dQ = dS K
      TimesHead(n, ds.data(), /*transposed=*/true, qp + base, dk + base);   // dK = dS^T Q
      TimesHead(n, p, /*transposed=*/true, dop + base, dv + base);          // dV = P^T dO
    }
  }
  return g;
}

}  // namespace mxtrain::nn
