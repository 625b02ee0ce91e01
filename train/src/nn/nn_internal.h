// Internal to src/nn: argument checks and the OpenMP thread count shared by the layers.
#pragma once

#include <omp.h>

#include "mxtrain/error.h"
#include "mxtrain/tensor.h"

namespace mxtrain::nn::internal {

inline int Threads(int threads) { return threads > 0 ? threads : omp_get_max_threads(); }

inline void CheckF32Matrix(const Tensor& t, const char* what) {
  MXTRAIN_CHECK(t.defined() && t.dtype() == DType::kF32 && t.rank() == 2, what,
                " must be a 2-D f32 tensor",
                t.defined() ? StrCat(", got ", Name(t.dtype()), " ", t.shape().ToString())
                            : std::string(", got none"));
}

inline void CheckHighPrecisionMatrix(const Tensor& t, const char* what) {
  MXTRAIN_CHECK(
      t.defined() && (t.dtype() == DType::kF32 || t.dtype() == DType::kBF16) && t.rank() == 2, what,
      " must be a 2-D f32 or bf16 tensor",
      t.defined() ? StrCat(", got ", Name(t.dtype()), " ", t.shape().ToString())
                  : std::string(", got none"));
}

}  // namespace mxtrain::nn::internal
