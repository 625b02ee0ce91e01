// MX GEMM and grouped GEMM (NUMERICS.md §7) for the three training GEMMs.
//
// An operand's blocked axis is its contraction axis, so one function serves fprop, dgrad
// and wgrad without transposing any high-precision tensor:
//
//   C[i, j] = sum_s A(i, s) * B(j, s)
//   A: rowwise MX [I, S] (blocks along S), or columnwise MX [S, I] (blocks along S = rows)
//   B: rowwise MX [J, S],                  or columnwise MX [S, J]
//
//   fprop  Y  = MxGemm(X rowwise,  W rowwise)    // [M,K] . [N,K]^T  => [M, N]
//   dgrad  dX = MxGemm(dY rowwise, W columnwise) // [M,N] . [N,K]    => [M, K]
//   wgrad  dW = MxGemm(dY columnwise, X columnwise) // [M,N]^T . [M,K] => [N, K]
//
// Elements times their power-of-two scales are exact in bf16 over its normal range, so the
// fast paths decode each operand panel once to bf16 (AMX, AVX512-BF16) or fp32 and
// accumulate in fp32; tiles whose scales could make a decoded value or a product leave the
// normal range (or are NaN) take an exact path. Results agree with the double-precision
// reference ref::MxGemm within |C - C_exact| <= S * 2^-24 * sum_s |a_s b_s| plus half an
// ulp of the output type. E4M3 and E5M2 operands mix freely. The caller's floating-point
// environment changes nothing: flush-to-zero, denormals-are-zero and the rounding mode are
// set to the IEEE default inside every call, on every thread it uses, and restored.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "mxtrain/group_list.h"
#include "mxtrain/mx_tensor.h"
#include "mxtrain/tensor.h"

namespace mxtrain {

struct GemmOptions {
  DType out_dtype = DType::kF32;  // kF32, or kBF16 (round to nearest even, once)
  // Optional bias [J] (f32), added to every row of C.
  const Tensor* bias = nullptr;
  // Optional existing fp32 C [I, J] to accumulate into (C += A.B^T, e.g. a main_grad
  // buffer); the result is then that tensor, and out_dtype must be kF32.
  Tensor* accumulate = nullptr;
  // Optional tensor [I, J] of out_dtype to write C into (e.g. a row range of a larger
  // output) instead of allocating one; the result is then that tensor. Not with
  // `accumulate`.
  Tensor* out = nullptr;
  int threads = 0;  // 0: omp_get_max_threads() (all cores unless OMP_NUM_THREADS says)
  MemoryCategory category = MemoryCategory::kActivation;  // where a new C is counted
};

// C = A . B^T with the contraction along each operand's blocked axis (see above).
// Throws Error on mismatched contraction lengths, non-2-D operands, token-grouped operands,
// or a bias / accumulator of the wrong shape or dtype.
Tensor MxGemm(const MxTensor& a, const MxTensor& b, const GemmOptions& options = {});

// Mixture-of-experts fprop / dgrad: tokens sorted by expert; x rowwise [M, S] split into
// E groups by `groups`; w an MX tensor [E, R, C] holding one matrix per expert, blocked
// along its contraction axis, so both weight layouts work:
//   fprop, W [E, N, K]: x = X rowwise, w = W rowwise           => Y  [M, N]
//   fprop, W [E, K, N] (MindSpeed's layout): w = W columnwise    => Y  [M, N]
//   dgrad, W [E, N, K]: x = dY rowwise, w = W columnwise        => dX [M, K]
//   dgrad, W [E, K, N]: w = W rowwise                           => dX [M, K]
// Rows of group e equal MxGemm(x rows of e, w[e]) bit for bit; empty groups give no rows.
// A bias, if given, is [E, J].
Tensor MxGroupedGemm(const MxTensor& x, const MxTensor& w, const GroupList& groups,
                     const GemmOptions& options = {});

// Mixture-of-experts wgrad, K-grouped: dW[e] = dY_e^T . X_e for each group e, with dy
// [M, N] and x [M, K] token-grouped columnwise (blocks restart at each group). Returns
// [E, N, K] fp32 (or accumulates into options.accumulate of that shape). An empty group
// gives dW[e] = 0, or leaves the accumulator untouched.
Tensor MxGroupedWgrad(const MxTensor& dy, const MxTensor& x, const GemmOptions& options = {});

namespace ref {
// The oracle: double-precision dot products of the dequantized operands, rounded once to
// the output type. Same contract as mxtrain::MxGemm.
Tensor MxGemm(const MxTensor& a, const MxTensor& b, const GemmOptions& options = {});
}  // namespace ref

// Names of the GEMM paths this machine can run, best first: "amx-bf16" (AMX tiles),
// "avx512-bf16" (VDPBF16PS on the same bf16 packing), "simd-f32" (fp32 FMA on the best
// Highway target, simd.h), "portable" (plain loops). The environment variable
// MXTRAIN_MAX_GEMM_PATH=NAME, read once per process, leaves only NAME and the paths after
// it (simd-f32: a CPU without bf16 dot products); a SIMD cap below AVX-512 (simd.h) also
// drops amx-bf16 and avx512-bf16. Tests and benchmarks can force one (ForceGemmPath,
// testing.h).
std::vector<std::string> AvailableGemmPaths();
// The path the next MxGemm call will use: the first available one unless one is forced.
std::string CurrentGemmPath();

}  // namespace mxtrain
