#include "mxtrain/elementwise.h"

#include <omp.h>

#include <algorithm>

#include "convert.h"
#include "fp_env.h"
#include "mxtrain/error.h"
#include "mxtrain/format/bf16.h"
#include "omp_threads.h"
#include "simd_internal.h"

namespace mxtrain {
namespace {

int Threads(int threads) { return internal::TeamSize(threads, "elementwise"); }

// Element i of an f32 or bf16 buffer as fp32.
inline float Load(const void* p, bool bf16, int64_t i) {
  return bf16 ? Bf16ToF32(static_cast<const uint16_t*>(p)[i]) : static_cast<const float*>(p)[i];
}

void CheckHighPrecision(const Tensor& x, const char* op) {
  MXTRAIN_CHECK(x.defined() && (x.dtype() == DType::kF32 || x.dtype() == DType::kBF16), op,
                ": tensor must be f32 or bf16");
}

// Adds rows [r0, r1) of x [*, n] into out [n] (fp32, rows in order).
void AddRows(const Tensor& x, int64_t r0, int64_t r1, int64_t c0, int64_t c1, float* out) {
  const int64_t n = x.shape()[1];
  const bool bf16 = x.dtype() == DType::kBF16;
  for (int64_t r = r0; r < r1; ++r) {
    for (int64_t c = c0; c < c1; ++c) out[c] += Load(x.raw(), bf16, r * n + c);
  }
}

// Column chunk per thread: 256 columns keep the partial sums in L1.
constexpr int64_t kColumnChunk = 256;

Tensor Accumulator(Tensor* accumulate, const Shape& shape, const char* op,
                   MemoryCategory category) {
  if (accumulate != nullptr) {
    MXTRAIN_CHECK(
        accumulate->defined() && accumulate->dtype() == DType::kF32 && accumulate->shape() == shape,
        op, ": accumulator must be f32 of shape ", shape.ToString());
    return *accumulate;
  }
  return Tensor::Zeros(DType::kF32, shape, category);
}

}  // namespace

Tensor CastTo(const Tensor& x, DType dtype, MemoryCategory category, int threads) {
  const internal::ScopedFpEnv fp_env;
  CheckHighPrecision(x, "cast");
  MXTRAIN_CHECK(dtype == DType::kF32 || dtype == DType::kBF16, "cast: target must be f32 or bf16");
  if (x.dtype() == dtype) return x;
  Tensor out = Tensor::Empty(dtype, x.shape(), category);
  const int64_t n = x.NumElements();
  if (dtype == DType::kBF16) {
    const float* src = x.const_data<float>();
    uint16_t* dst = out.mutable_data<uint16_t>();
    internal::EnsureSimdTargetChosen();
#pragma omp parallel num_threads(Threads(threads)) if (n > (1 << 16))
    {
      const internal::ScopedFpEnv fp_env;
      const internal::ThreadShare share(n);
      internal::NarrowToBf16(src + share.begin, share.end - share.begin, nullptr,
                             dst + share.begin);
    }
  } else {
    const uint16_t* src = x.const_data<uint16_t>();
    float* dst = out.mutable_data<float>();
#pragma omp parallel num_threads(Threads(threads)) if (n > (1 << 16))
    {
      const internal::ScopedFpEnv fp_env;
#pragma omp for schedule(static)
      for (int64_t i = 0; i < n; ++i) dst[i] = Bf16ToF32(src[i]);
    }
  }
  return out;
}

Tensor SumRows(const Tensor& x, Tensor* accumulate, int threads, MemoryCategory category) {
  const internal::ScopedFpEnv fp_env;
  CheckHighPrecision(x, "row sum");
  MXTRAIN_CHECK(x.rank() == 2, "row sum: input must be 2-D, got ", x.shape().ToString());
  const int64_t m = x.shape()[0], n = x.shape()[1];
  Tensor out = Accumulator(accumulate, {n}, "row sum", category);
  float* o = out.mutable_data<float>();
  const int64_t chunks = (n + kColumnChunk - 1) / kColumnChunk;
#pragma omp parallel num_threads(Threads(threads)) if (m * n > (1 << 16))
  {
    const internal::ScopedFpEnv fp_env;
#pragma omp for schedule(static)
    for (int64_t c = 0; c < chunks; ++c) {
      AddRows(x, 0, m, c * kColumnChunk, std::min(n, (c + 1) * kColumnChunk), o);
    }
  }
  return out;
}

Tensor SumRowsGrouped(const Tensor& x, const GroupList& groups, Tensor* accumulate, int threads,
                      MemoryCategory category) {
  const internal::ScopedFpEnv fp_env;
  CheckHighPrecision(x, "grouped row sum");
  MXTRAIN_CHECK(x.rank() == 2 && groups.total_rows() == x.shape()[0], "grouped row sum: input ",
                x.shape().ToString(), " does not match the group list ", groups.ToString());
  const int64_t n = x.shape()[1];
  const int g_count = groups.num_groups();
  Tensor out = Accumulator(accumulate, {g_count, n}, "grouped row sum", category);
  float* o = out.mutable_data<float>();
  const int64_t chunks = (n + kColumnChunk - 1) / kColumnChunk;
#pragma omp parallel num_threads(Threads(threads))
  {
    const internal::ScopedFpEnv fp_env;
#pragma omp for schedule(static) collapse(2)
    for (int g = 0; g < g_count; ++g) {
      for (int64_t c = 0; c < chunks; ++c) {
        AddRows(x, groups.begin(g), groups.end(g), c * kColumnChunk,
                std::min(n, (c + 1) * kColumnChunk), o + g * n);
      }
    }
  }
  return out;
}

}  // namespace mxtrain
