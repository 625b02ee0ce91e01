// Small elementwise and reduction kernels the ops need around their GEMMs: dtype casts
// (the bf16 baseline's operand rounding) and the bias gradient's row sums. Plain loops over
// OpenMP threads; the compiler vectorizes them, and each result is independent of the
// thread count (every output element is reduced in one fixed order).
#pragma once

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

}  // namespace mxtrain
