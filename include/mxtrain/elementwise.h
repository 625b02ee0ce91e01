// Small elementwise and reduction kernels the ops and the model need around their GEMMs:
// dtype casts (the bf16 baseline's operand rounding), the bias gradient's row sums, and
// expf by vectors (softmax, SwiGLU). The casts and sums are plain loops over OpenMP
// threads that the compiler vectorizes, each result independent of the thread count (every
// output element is reduced in one fixed order); ExpF32 runs on the calling thread.
#pragma once

#include <span>

#include "mxtrain/group_list.h"
#include "mxtrain/tensor.h"

namespace mxtrain {

// x converted to `dtype` (f32 or bf16; bf16 rounds to nearest even, f32 widens exactly),
// counted under `category`. Returns x itself (shared storage) when it already has `dtype`.
Tensor CastTo(const Tensor& x, DType dtype, MemoryCategory category = MemoryCategory::kWorkspace,
              int threads = 0);

// Column sums of a [M, N] f32 or bf16 tensor as f32 [N], each summed over rows in order in
// fp32; added into `accumulate` (f32 [N]) instead when given, which is then the result.
Tensor SumRows(const Tensor& x, Tensor* accumulate = nullptr, int threads = 0,
               MemoryCategory category = MemoryCategory::kGradient);

// Per-group column sums: out[g, n] = sum of rows of group g of x [M, N], as f32 [G, N] (0 for
// an empty group), or added into `accumulate` (f32 [G, N]).
Tensor SumRowsGrouped(const Tensor& x, const GroupList& groups, Tensor* accumulate = nullptr,
                      int threads = 0, MemoryCategory category = MemoryCategory::kGradient);

// y[i] = std::exp(x[i]) for every i, bit for bit as Debian's C library (glibc 2.28 and
// later on a CPU with FMA) gives it, but a vector at a time on the SIMD targets with FMA:
// glibc's own algorithm, fused where its FMA build fuses; its other targets, and |x| >= 88,
// infinities and NaN, call std::exp. One thread (callers split the work); y may be x
// itself, and must not otherwise overlap it. Throws Error on sizes that differ.
void ExpF32(std::span<const float> x, std::span<float> y);

}  // namespace mxtrain
