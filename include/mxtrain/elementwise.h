// Small elementwise and reduction kernels the ops and the model need around their GEMMs:
// dtype casts (the bf16 baseline's operand rounding), the bias gradient's row sums, expf
// and exp by vectors (softmax, cross-entropy), SwiGLU and its gradient, and small fp32 matrix
// products summed in a fixed order (attention). The casts and sums are plain loops over OpenMP
// threads that the compiler vectorizes, each result independent of the thread count (every output
// element is reduced in one fixed order); ExpF32, ExpF64, the SwiGLU kernels and
// OrderedMatMulF32 run on the calling thread (callers split the work).
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

// y[i] = std::exp(x[i]) in double for every i, bit for bit as Debian's C library (glibc
// 2.28 and later on a CPU with FMA) gives it, a vector at a time on the SIMD targets with
// FMA as ExpF32; |x| >= 512, infinities and NaN call std::exp. One thread; y may be x
// itself, and must not otherwise overlap it. Throws Error on sizes that differ.
void ExpF64(std::span<const double> x, std::span<double> y);

// SwiGLU by rows: gu holds rows of 2f values, the gate values a in a row's first f and the
// up values b in its last f; h gets rows of f:
//   s = 1 / (1 + exp(-a)),  h = (a * s) * b
// each operation rounded to fp32 in turn, never fused, and exp(-a) with ExpF32's bits:
// the bits of that scalar loop (a NaN result is a NaN, its payload unspecified), computed
// a vector at a time on every SIMD target. One thread. Throws Error on f < 1, sizes that
// are not whole rows, or overlapping arrays.
void SwiGluF32(std::span<const float> gu, int64_t f, std::span<float> h);

// SwiGluF32 on bf16 values (uint16_t bit patterns): each widened to fp32 (exactly), the
// formula in fp32 as above, the result rounded to bf16 once (to nearest even, as CastTo):
// the bits of SwiGluF32 on the widened input, rounded. A bf16 model's activations stay
// bf16 through it: half the bytes read and written, no casts around it.
void SwiGluBf16(std::span<const uint16_t> gu, int64_t f, std::span<uint16_t> h);

// The gradient of SwiGluF32: from dh (rows of f) and gu, dgu (rows of 2f, da then db):
//   silu = a * s,  da = (dh * b) * (s + silu * (1 - s)),  db = dh * silu
// with s as above, bit for bit as that scalar loop. One thread; throws as SwiGluF32.
void SwiGluBackwardF32(std::span<const float> dh, std::span<const float> gu, int64_t f,
                       std::span<float> dgu);
// The same on bf16 values, rounded once at the end as SwiGluBf16.
void SwiGluBackwardBf16(std::span<const uint16_t> dh, std::span<const uint16_t> gu, int64_t f,
                        std::span<uint16_t> dgu);

// Which part of row r of an OrderedMatMul it computes (the causal mask of attention).
enum class OrderedRange : uint8_t {
  kAll,                // columns [0, cols), K [0, depth)
  kColsToDiagonal,     // columns [0, min(cols, r + 1)): the rest of the row is left as it is
  kDepthToDiagonal,    // K [0, min(depth, r + 1))
  kDepthFromDiagonal,  // K [r, depth) (none when r >= depth: the row is zeros)
};

// C = A . B over strided fp32 views, row by row: for each row r < rows and each column n
// of its range,
//   C(r, n) = (((0 + A(r, k0) * B(k0, n)) + A(r, k0 + 1) * B(k0 + 1, n)) + ...)
// over its K range in increasing order, each product rounded to fp32 before it is added
// (never fused), in the IEEE default environment: the bits of that plain loop (a NaN
// result is a NaN, its payload unspecified), computed many columns at a time.
//   A(r, k) = a[r * a_row + k * a_depth]   (any strides: a transposed view too)
//   B(k, n) = b[k * ldb + n],  C(r, n) = c[r * ldc + n]
// C must not overlap A or B. Reads of B and writes of C stay inside each row's columns.
// One thread (callers split the work). Throws Error on negative sizes, ldb or ldc below
// cols, or null pointers where elements are read or written.
struct OrderedMatMul {
  int64_t rows = 0, cols = 0, depth = 0;
  const float* a = nullptr;
  int64_t a_row = 0, a_depth = 0;
  const float* b = nullptr;
  int64_t ldb = 0;
  float* c = nullptr;
  int64_t ldc = 0;
  OrderedRange range = OrderedRange::kAll;
};
void OrderedMatMulF32(const OrderedMatMul& p);

}  // namespace mxtrain
