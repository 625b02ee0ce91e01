// What a user of the installed package does first: quantize a tensor, multiply with the
// MX GEMM, run a Linear forward and backward. Each result is checked against an
// independent figure, and the program exits non-zero on any difference.
#include <cmath>
#include <cstdio>

#include "mxtrain/gemm.h"
#include "mxtrain/linear.h"
#include "mxtrain/quantize.h"

int main() {
  using namespace mxtrain;
  constexpr int64_t kM = 64, kK = 96, kN = 48;
  Tensor x = Tensor::Empty(DType::kF32, {kM, kK});
  Tensor w = Tensor::Empty(DType::kF32, {kN, kK});
  // Powers of two times small integers: exact in E4M3 under any scale, so quantizing
  // loses nothing and every product and sum below is exact in fp32.
  for (int64_t i = 0; i < kM * kK; ++i) x.data<float>()[i] = static_cast<float>(i % 7 - 3) * 0.5f;
  for (int64_t i = 0; i < kN * kK; ++i) w.data<float>()[i] = static_cast<float>(i % 5 - 2) * 0.25f;

  const MxTensor xq = QuantizeRowwise(x, {});
  const Tensor back = Dequantize(xq, DType::kF32);
  for (int64_t i = 0; i < kM * kK; ++i) {
    if (back.data<float>()[i] != x.data<float>()[i]) {
      std::fprintf(stderr, "consumer: dequantize(quantize(x)) differs at %lld\n",
                   static_cast<long long>(i));
      return 1;
    }
  }
  const Tensor c = MxGemm(xq, QuantizeRowwise(w, {}));  // [M, K] . [N, K]^T => [M, N]
  for (int64_t i = 0; i < kM; ++i) {
    for (int64_t j = 0; j < kN; ++j) {
      double want = 0;
      for (int64_t k = 0; k < kK; ++k) {
        want += static_cast<double>(x.data<float>()[i * kK + k]) * w.data<float>()[j * kK + k];
      }
      if (c.data<float>()[i * kN + j] != want) {
        std::fprintf(stderr, "consumer: MxGemm differs at %lld,%lld\n", static_cast<long long>(i),
                     static_cast<long long>(j));
        return 1;
      }
    }
  }

  Linear fc(kK, kN, /*bias=*/false, Recipe::Make({}));
  std::copy(w.data<float>(), w.data<float>() + kN * kK, fc.weight().value().data<float>());
  fc.weight().MarkModified();
  Forwarded f = fc.Forward(x);
  const Tensor dy = Tensor::Zeros(DType::kF32, {kM, kN});
  const Grads g = fc.Backward(dy, std::move(f.ctx));
  if (!f.y.defined() || f.y.shape() != Shape{kM, kN} || !g.dx.defined() ||
      g.dx.shape() != Shape{kM, kK} || std::fabs(f.y.data<float>()[0] - c.data<float>()[0]) > 0) {
    std::fprintf(stderr, "consumer: Linear disagrees with MxGemm\n");
    return 1;
  }
  std::printf("consumer: find_package(mxtrain) works: quantize, MX GEMM, Linear ok\n");
  return 0;
}
