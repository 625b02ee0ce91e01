// Embedding, RMSNorm, SwiGLU, cross-entropy and the residual adds (nn.h).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <span>
#include <vector>

#include "mxtrain/elementwise.h"
#include "mxtrain/train/nn.h"
#include "nn/nn_internal.h"
#include "omp_threads.h"

namespace mxtrain::nn {

using internal::CheckF32Matrix;
using internal::CheckHighPrecisionMatrix;
using internal::Threads;

Tensor EmbeddingForward(const Tensor& table, std::span<const int32_t> ids, int threads) {
  CheckF32Matrix(table, "embedding table");
  const int64_t v = table.shape()[0], d = table.shape()[1];
  const int64_t t = static_cast<int64_t>(ids.size());
  for (int64_t i = 0; i < t; ++i) {
    MXTRAIN_CHECK(ids[i] >= 0 && ids[i] < v, "embedding: id ", ids[i], " at position ", i,
                  " is outside the vocabulary [0, ", v, ")");
  }
  Tensor y = Tensor::Empty(DType::kF32, {t, d});
  const float* w = table.data<float>();
  float* out = y.data<float>();
#pragma omp parallel for num_threads(Threads(threads)) schedule(static)
  for (int64_t i = 0; i < t; ++i) {
    std::memcpy(out + i * d, w + static_cast<int64_t>(ids[i]) * d, sizeof(float) * d);
  }
  return y;
}

void EmbeddingBackward(const Tensor& dy, std::span<const int32_t> ids, Tensor& dtable) {
  CheckF32Matrix(dy, "embedding output gradient");
  CheckF32Matrix(dtable, "embedding gradient");
  const int64_t d = dtable.shape()[1], v = dtable.shape()[0];
  MXTRAIN_CHECK(dy.shape()[0] == static_cast<int64_t>(ids.size()) && dy.shape()[1] == d,
                "embedding backward: gradient ", dy.shape().ToString(), " for ", ids.size(),
                " ids of width ", d);
  const float* g = dy.data<float>();
  float* out = dtable.data<float>();
  for (size_t i = 0; i < ids.size(); ++i) {  // serial: rows of one id sum in token order
    MXTRAIN_CHECK(ids[i] >= 0 && ids[i] < v, "embedding: id ", ids[i], " out of range");
    float* row = out + static_cast<int64_t>(ids[i]) * d;
    const float* src = g + static_cast<int64_t>(i) * d;
    for (int64_t j = 0; j < d; ++j) row[j] += src[j];
  }
}

namespace {
// RMSNorm's reductions: rows a group (independent chains per row), columns a block (the
// gain gradient's per-column sums, vectorized along the block).
constexpr int64_t kRowGroup = 4;
constexpr int64_t kColumnBlock = 64;
}  // namespace

RmsNormOut RmsNormForward(const Tensor& x, const Tensor& gain, float eps, int threads) {
  CheckF32Matrix(x, "rmsnorm input");
  const int64_t t = x.shape()[0], d = x.shape()[1];
  MXTRAIN_CHECK(gain.dtype() == DType::kF32 && gain.NumElements() == d, "rmsnorm: gain of ",
                gain.NumElements(), " elements for width ", d);
  RmsNormOut o{Tensor::Empty(DType::kF32, {t, d}), Tensor::Empty(DType::kF32, {t})};
  const float* xp = x.data<float>();
  const float* g = gain.data<float>();
  float* y = o.y.data<float>();
  float* r = o.rstd.data<float>();
  // kRowGroup rows at a time: each row's sum of squares stays one chain in j order, and
  // the group's chains run side by side instead of one add's latency after another.
#pragma omp parallel for num_threads(Threads(threads)) schedule(static)
  for (int64_t i0 = 0; i0 < t; i0 += kRowGroup) {
    const int64_t rows = std::min(kRowGroup, t - i0);
    double ss[kRowGroup] = {};
    const auto square = [&](int64_t i, int64_t j) {
      return static_cast<double>(xp[i * d + j]) * xp[i * d + j];
    };
    if (rows == kRowGroup) {
      for (int64_t j = 0; j < d; ++j) {
        for (int64_t q = 0; q < kRowGroup; ++q) ss[q] += square(i0 + q, j);
      }
    } else {
      for (int64_t q = 0; q < rows; ++q) {
        for (int64_t j = 0; j < d; ++j) ss[q] += square(i0 + q, j);
      }
    }
    for (int64_t q = 0; q < rows; ++q) {
      const int64_t i = i0 + q;
      const float* row = xp + i * d;
      const float rs = static_cast<float>(1.0 / std::sqrt(ss[q] / static_cast<double>(d) + eps));
      r[i] = rs;
      for (int64_t j = 0; j < d; ++j) y[i * d + j] = row[j] * rs * g[j];
    }
  }
  return o;
}

Tensor RmsNormBackward(const Tensor& dy, const Tensor& x, const Tensor& gain, const Tensor& rstd,
                       Tensor& dgain, int threads) {
  CheckF32Matrix(dy, "rmsnorm output gradient");
  CheckF32Matrix(x, "rmsnorm input");
  const int64_t t = x.shape()[0], d = x.shape()[1];
  MXTRAIN_CHECK(dy.shape() == x.shape() && rstd.NumElements() == t && dgain.NumElements() == d &&
                    gain.NumElements() == d,
                "rmsnorm backward: mismatched shapes");
  Tensor dx = Tensor::Empty(DType::kF32, {t, d}, MemoryCategory::kGradient);
  const float* xp = x.data<float>();
  const float* gp = dy.data<float>();
  const float* g = gain.data<float>();
  const float* r = rstd.data<float>();
  float* out = dx.data<float>();
  // dx = rstd * (g * dy - xhat * mean(xhat * g * dy)), xhat = x * rstd.
  // Rows in groups, each row's dot one chain in j order (as the forward's sums).
#pragma omp parallel for num_threads(Threads(threads)) schedule(static)
  for (int64_t i0 = 0; i0 < t; i0 += kRowGroup) {
    const int64_t rows = std::min(kRowGroup, t - i0);
    double dot[kRowGroup] = {};
    const auto term = [&](int64_t i, int64_t j) {
      return static_cast<double>(xp[i * d + j]) * r[i] * g[j] * gp[i * d + j];
    };
    if (rows == kRowGroup) {
      for (int64_t j = 0; j < d; ++j) {
        for (int64_t q = 0; q < kRowGroup; ++q) dot[q] += term(i0 + q, j);
      }
    } else {
      for (int64_t q = 0; q < rows; ++q) {
        for (int64_t j = 0; j < d; ++j) dot[q] += term(i0 + q, j);
      }
    }
    for (int64_t q = 0; q < rows; ++q) {
      const int64_t i = i0 + q;
      const float* xr = xp + i * d;
      const float* dr = gp + i * d;
      const float m = static_cast<float>(dot[q] / static_cast<double>(d));
      for (int64_t j = 0; j < d; ++j) {
        const float xhat = xr[j] * r[i];
        out[i * d + j] = r[i] * (g[j] * dr[j] - xhat * m);
      }
    }
  }
  // The gain's gradient: per column, summed over rows in order; a thread takes a block of
  // columns and walks the rows, its columns' sums side by side (vectors along j).
  float* dg = dgain.data<float>();
#pragma omp parallel for num_threads(Threads(threads)) schedule(static)
  for (int64_t j0 = 0; j0 < d; j0 += kColumnBlock) {
    const int64_t cols = std::min(kColumnBlock, d - j0);
    float s[kColumnBlock] = {};
    for (int64_t i = 0; i < t; ++i) {
      const float* gr = gp + i * d + j0;
      const float* xr = xp + i * d + j0;
      const float ri = r[i];
      for (int64_t c = 0; c < cols; ++c) s[c] += gr[c] * xr[c] * ri;
    }
    for (int64_t c = 0; c < cols; ++c) dg[j0 + c] += s[c];
  }
  return dx;
}

namespace {

// A thread's share of the rows of a row-major array of `width` values a row.
template <typename T>
std::span<T> ShareRows(T* p, const mxtrain::internal::ThreadShare& rows, int64_t width) {
  return {p + rows.begin * width, static_cast<size_t>((rows.end - rows.begin) * width)};
}

}  // namespace

// SwiGLU and its gradient: each thread its share of the rows through the library's kernels
// (elementwise.h), which give the bits of the scalar formulas there.
Tensor SwiGluForward(const Tensor& gu, int threads) {
  CheckHighPrecisionMatrix(gu, "swiglu input");
  const int64_t m = gu.shape()[0], f2 = gu.shape()[1];
  MXTRAIN_CHECK(f2 % 2 == 0, "swiglu: input width ", f2, " is not even (gate and up halves)");
  const int64_t f = f2 / 2;
  Tensor h = Tensor::Empty(gu.dtype(), {m, f});
  if (f == 0) return h;
  const bool bf16 = gu.dtype() == DType::kBF16;
#pragma omp parallel num_threads(Threads(threads))
  {
    const mxtrain::internal::ThreadShare rows(m);
    if (bf16) {
      SwiGluBf16(ShareRows(gu.data<uint16_t>(), rows, f2), f,
                 ShareRows(h.data<uint16_t>(), rows, f));
    } else {
      SwiGluF32(ShareRows(gu.data<float>(), rows, f2), f, ShareRows(h.data<float>(), rows, f));
    }
  }
  return h;
}

Tensor SwiGluBackward(const Tensor& dh, const Tensor& gu, int threads) {
  CheckHighPrecisionMatrix(dh, "swiglu output gradient");
  CheckHighPrecisionMatrix(gu, "swiglu input");
  const int64_t m = gu.shape()[0], f2 = gu.shape()[1], f = f2 / 2;
  MXTRAIN_CHECK(f2 % 2 == 0, "swiglu backward: input width ", f2,
                " is not even (gate and up halves)");
  MXTRAIN_CHECK(dh.dtype() == gu.dtype(), "swiglu backward: gradient of ", Name(dh.dtype()),
                " for an input of ", Name(gu.dtype()));
  MXTRAIN_CHECK(dh.shape()[0] == m && dh.shape()[1] == f, "swiglu backward: gradient ",
                dh.shape().ToString(), " for input ", gu.shape().ToString());
  Tensor dgu = Tensor::Empty(gu.dtype(), {m, f2}, MemoryCategory::kGradient);
  if (f == 0) return dgu;
  const bool bf16 = gu.dtype() == DType::kBF16;
#pragma omp parallel num_threads(Threads(threads))
  {
    const mxtrain::internal::ThreadShare rows(m);
    if (bf16) {
      SwiGluBackwardBf16(ShareRows(dh.data<uint16_t>(), rows, f),
                         ShareRows(gu.data<uint16_t>(), rows, f2), f,
                         ShareRows(dgu.data<uint16_t>(), rows, f2));
    } else {
      SwiGluBackwardF32(ShareRows(dh.data<float>(), rows, f), ShareRows(gu.data<float>(), rows, f2),
                        f, ShareRows(dgu.data<float>(), rows, f2));
    }
  }
  return dgu;
}

double CrossEntropy(const Tensor& logits, std::span<const int32_t> targets, Tensor* dlogits,
                    float grad_scale, int threads) {
  CheckF32Matrix(logits, "cross-entropy logits");
  const int64_t n = logits.shape()[0], v = logits.shape()[1];
  MXTRAIN_CHECK(static_cast<int64_t>(targets.size()) == n, "cross-entropy: ", targets.size(),
                " targets for ", n, " rows");
  for (int64_t i = 0; i < n; ++i) {
    MXTRAIN_CHECK(targets[i] >= 0 && targets[i] < v, "cross-entropy: target ", targets[i],
                  " at row ", i, " is outside [0, ", v, ")");
  }
  if (dlogits != nullptr) *dlogits = Tensor::Empty(DType::kF32, {n, v}, MemoryCategory::kGradient);
  std::vector<double> row_loss(static_cast<size_t>(n));
  const float* lp = logits.data<float>();
  float* dp = dlogits != nullptr ? dlogits->data<float>() : nullptr;
  const float scale = grad_scale / static_cast<float>(n > 0 ? n : 1);
#pragma omp parallel num_threads(Threads(threads))
  {
    std::vector<double> e(static_cast<size_t>(v));  // a row's exponentials, for both passes
#pragma omp for schedule(static)
    for (int64_t i = 0; i < n; ++i) {
      const float* row = lp + i * v;
      // The max as std::fmax would take it, without a call an element: a NaN never wins
      // (a NaN first element is taken below), and equal zeros of opposite sign, the one
      // case where the two may differ, give the same differences and exponentials.
      float mx = row[0];
      for (int64_t j = 1; j < v; ++j) mx = row[j] > mx ? row[j] : mx;
      if (std::isnan(row[0])) mx = row[0];
      for (int64_t j = 0; j < v; ++j) e[j] = static_cast<double>(row[j]) - mx;
      ExpF64(e, e);  // std::exp's bits, by vectors
      double sum = 0;
      for (int64_t j = 0; j < v; ++j) sum += e[j];
      row_loss[i] = std::log(sum) + mx - row[targets[i]];
      if (dp != nullptr) {
        for (int64_t j = 0; j < v; ++j) {
          const double p = e[j] / sum;
          dp[i * v + j] = static_cast<float>(p - (j == targets[i] ? 1.0 : 0.0)) * scale;
        }
      }
    }
  }
  double total = 0;
  for (double l : row_loss) total += l;
  return n > 0 ? total / static_cast<double>(n) : 0.0;
}

Tensor Add(const Tensor& a, const Tensor& b, int threads) {
  MXTRAIN_CHECK(a.dtype() == DType::kF32 && b.dtype() == DType::kF32 && a.shape() == b.shape(),
                "add: operands ", a.shape().ToString(), " and ", b.shape().ToString(),
                " must be f32 of one shape");
  Tensor y = Tensor::Empty(DType::kF32, a.shape());
  const float* pa = a.data<float>();
  const float* pb = b.data<float>();
  float* out = y.data<float>();
  const int64_t n = a.NumElements();
#pragma omp parallel for num_threads(Threads(threads)) schedule(static)
  for (int64_t i = 0; i < n; ++i) out[i] = pa[i] + pb[i];
  return y;
}

void AddInPlace(Tensor& a, const Tensor& b, int threads) {
  MXTRAIN_CHECK(a.dtype() == DType::kF32 && b.dtype() == DType::kF32 && a.shape() == b.shape(),
                "add: operands ", a.shape().ToString(), " and ", b.shape().ToString(),
                " must be f32 of one shape");
  float* pa = a.data<float>();
  const float* pb = b.data<float>();
  const int64_t n = a.NumElements();
#pragma omp parallel for num_threads(Threads(threads)) schedule(static)
  for (int64_t i = 0; i < n; ++i) pa[i] += pb[i];
}

}  // namespace mxtrain::nn
