// Internal: the oneDNN baseline of the GEMM benchmark. oneDNN is an optional, private
// dependency: without it (MXTRAIN_HAVE_DNNL undefined) Create returns nullptr and the
// benchmark reports the baseline as null.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace mxtrain::internal {

// C = A . B with A [m, k] and B [k, n] both bf16 or both f32, and fp32 C [m, n], each
// given as a pointer and element strides, so that the transposed and sub-matrix views the MX
// operands imply (W [N, K] as B = W^T, dY^T, the rows of one expert) need no copies. C is row-major
// with leading dimension c_stride_m.
struct MatmulView {
  int64_t m, n, k;
  const void* a;
  int64_t a_stride_m, a_stride_k;
  const void* b;
  int64_t b_stride_k, b_stride_n;
  float* c;
  int64_t c_stride_m;
};

// A list of matmuls whose primitives are created once, up front, so that Run times only
// their execution.
class OneDnnMatmuls {
 public:
  // The primitives for `views` (bf16 inputs, or f32 when !bf16), run with `threads` OpenMP
  // threads; nullptr when mxtrain was built without oneDNN.
  static std::unique_ptr<OneDnnMatmuls> Create(const std::vector<MatmulView>& views, int threads,
                                               bool bf16);
  virtual ~OneDnnMatmuls() = default;
  // Executes every matmul once, in order, and waits for them.
  virtual void Run() = 0;
  // The implementations oneDNN chose, e.g. "brg:avx512_core_amx_bf16" (distinct names
  // joined by "+" when the matmuls differ).
  virtual std::string impl() const = 0;
};

bool HaveOneDnn();

}  // namespace mxtrain::internal
