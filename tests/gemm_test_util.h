// Shared by the GEMM and ops tests: seeded values at chosen magnitudes, and NUMERICS.md
// §7's bound checked against a double-precision oracle recomputed from the MX codes.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "mxtrain/format/bf16.h"
#include "mxtrain/mx_tensor.h"
#include "mxtrain/quantize.h"
#include "mxtrain/tensor.h"

namespace mxtrain::testing_util {

inline std::vector<float> RandomValues(int64_t n, uint64_t seed, int exp_lo, int exp_hi) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_int_distribution<int> e(exp_lo, exp_hi);
  std::vector<float> v(static_cast<size_t>(n));
  int region = e(rng);
  for (int64_t i = 0; i < n; ++i) {
    if (i % 64 == 0) region = e(rng);  // magnitudes change block to block
    v[static_cast<size_t>(i)] = std::ldexp(normal(rng), region);
  }
  return v;
}

// The six MX operands of a layer's three training GEMMs (fprop: x_row . w_row, dgrad:
// dy_row . w_col, wgrad: dy_col . x_col), quantized from x [M, K], w [N, K] and dy [M, N]
// (dy in grad_format), each dual-axis from one pass.
struct TrainingOperands {
  MxTensor x_row, w_row, w_col, dy_row, dy_col, x_col;
};

inline TrainingOperands QuantizeTrainingOperands(const Tensor& x, const Tensor& w, const Tensor& dy,
                                                 ElementFormat grad_format = ElementFormat::kE4M3) {
  const QuantizeOptions q{};
  const QuantizeOptions g{grad_format, ScaleRule::kRceil};
  const DualMx xd = QuantizeDual(x, q), wd = QuantizeDual(w, q), dyd = QuantizeDual(dy, g);
  return {xd.rowwise, wd.rowwise, wd.columnwise, dyd.rowwise, dyd.columnwise, xd.columnwise};
}

// Decoded operand row values in double, for the bound.
inline double DecodedAt(const MxTensor& t, int64_t f, int64_t k) {
  const bool rows = t.axis() == BlockAxis::kColumnwise;
  const int64_t free = rows ? t.shape()[1] : t.shape()[0];
  const int64_t s = rows ? t.shape()[0] : t.shape()[1];
  const uint8_t code =
      rows ? t.data().data<uint8_t>()[k * free + f] : t.data().data<uint8_t>()[f * s + k];
  const uint8_t b = rows ? t.scales().data<uint8_t>()[(k / 32) * free + f]
                         : t.scales().data<uint8_t>()[f * CeilDiv(s, 32) + k / 32];
  if (b == 0xFF) return NAN;
  return std::ldexp(static_cast<double>(DecodeElement(t.format(), code)), b - 127);
}

// |C - C_exact| <= S * 2^-24 * sum |a b| + half an ulp of the output (NUMERICS.md §7),
// with C_exact the oracle in double (recomputed here from the codes, unrounded). Computed
// once, so that several results of the same product (one per SIMD target) can be checked
// against it.
class BoundOracle {
 public:
  BoundOracle(const MxTensor& a, const MxTensor& b, const Tensor* bias = nullptr,
              const Tensor* before = nullptr) {
    const bool a_rows = a.axis() == BlockAxis::kColumnwise;
    const bool b_rows = b.axis() == BlockAxis::kColumnwise;
    m_ = a_rows ? a.shape()[1] : a.shape()[0];
    n_ = b_rows ? b.shape()[1] : b.shape()[0];
    s_ = a_rows ? a.shape()[0] : a.shape()[1];
    exact_.resize(static_cast<size_t>(m_ * n_));
    abs_sum_.resize(static_cast<size_t>(m_ * n_));
    for (int64_t i = 0; i < m_; ++i) {
      for (int64_t j = 0; j < n_; ++j) {
        double exact = 0, abs_sum = 0;
        for (int64_t k = 0; k < s_; ++k) {
          const double p = DecodedAt(a, i, k) * DecodedAt(b, j, k);
          exact += p;
          abs_sum += std::fabs(p);
        }
        if (before != nullptr) {
          exact += before->data<float>()[i * n_ + j];
          abs_sum += std::fabs(before->data<float>()[i * n_ + j]);
        }
        if (bias != nullptr) {
          exact += bias->data<float>()[j];
          abs_sum += std::fabs(bias->data<float>()[j]);
        }
        exact_[i * n_ + j] = exact;
        abs_sum_[i * n_ + j] = abs_sum;
      }
    }
  }

  void Check(const Tensor& c, const std::string& what) const {
    ASSERT_EQ(c.shape(), (Shape{m_, n_})) << what;
    for (int64_t i = 0; i < m_; ++i) {
      for (int64_t j = 0; j < n_; ++j) {
        const double exact = exact_[i * n_ + j], abs_sum = abs_sum_[i * n_ + j];
        const double got = c.dtype() == DType::kF32 ? c.data<float>()[i * n_ + j]
                                                    : Bf16ToF32(c.data<uint16_t>()[i * n_ + j]);
        if (std::isnan(exact)) {
          ASSERT_TRUE(std::isnan(got)) << what << " at " << i << "," << j;
          continue;
        }
        if (std::isinf(static_cast<float>(exact))) {  // beyond fp32: rounds to +-Inf
          ASSERT_EQ(got, static_cast<double>(static_cast<float>(exact)))
              << what << " at " << i << "," << j;
          continue;
        }
        const double rounded = c.dtype() == DType::kF32
                                   ? static_cast<double>(static_cast<float>(exact))
                                   : Bf16ToF32(F32ToBf16(static_cast<float>(exact)));
        // Half an ulp of the output type: fp32 ulp / 2, or bf16's (2^16 fp32 ulps) / 2.
        const float mag =
            std::max(std::fabs(static_cast<float>(exact)), static_cast<float>(std::fabs(rounded)));
        const double ulp_half =
            (std::nextafter(mag, INFINITY) - mag) * (c.dtype() == DType::kF32 ? 0.5 : 32768.0);
        const double bound = (s_ + 2) * std::ldexp(1.0, -24) * abs_sum + ulp_half + 1e-300;
        ASSERT_LE(std::fabs(got - exact), bound)
            << what << " at " << i << "," << j << ": got " << got << " exact " << exact;
      }
    }
  }

 private:
  int64_t m_ = 0, n_ = 0, s_ = 0;
  std::vector<double> exact_, abs_sum_;
};

inline void ExpectWithinBound(const Tensor& c, const MxTensor& a, const MxTensor& b,
                              const std::string& what, const Tensor* bias = nullptr,
                              const Tensor* before = nullptr) {
  BoundOracle(a, b, bias, before).Check(c, what);
}

}  // namespace mxtrain::testing_util
