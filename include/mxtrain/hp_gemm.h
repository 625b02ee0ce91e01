// High-precision GEMM: what the ops run when MXFP8 is off (the bf16 and fp32 baselines of
// a training run), with the same contraction rule as MxGemm (gemm.h), so that fprop,
// dgrad and wgrad need no transposed copies:
//
//   C[i, j] = sum_s A(i, s) * B(j, s)
//   A: [I, S] (Contract::kLast) or [S, I] (Contract::kFirst); B: [J, S] or [S, J]
//
//   fprop  Y  = HpGemm(X, kLast,  W, kLast,  compute)   // [M,K] . [N,K]^T => [M, N]
//   dgrad  dX = HpGemm(dY, kLast, W, kFirst, compute)   // [M,N] . [N,K]   => [M, K]
//   wgrad  dW = HpGemm(dY, kFirst, X, kFirst, compute)  // [M,N]^T . [M,K] => [N, K]
//
// compute kBF16: each operand is rounded to bf16 (nearest even; bf16 tensors as they are),
// products are exact in fp32 and sums accumulate in fp32 (order unspecified), C is
// rounded once to the output type. compute kF32: fp32 operands (bf16 widened exactly),
// fp32 products and sums. Paths, when mxtrain was built with oneDNN: "onednn-bf16" (oneDNN's
// matmul in the compute type: bf16 on AMX or AVX-512 where oneDNN has a bf16 matmul for
// this CPU), "onednn-f32" (oneDNN's f32 matmul for both compute types, which every x86-64
// CPU has: bf16 operands are rounded to bf16 and widened exactly, so the products are the
// same and only the summation order differs); and plain loops ("portable") everywhere.
// The best path is chosen once per process, from what oneDNN can build. The portable loops
// run in the IEEE default floating-point environment whatever the caller's (as MxGemm);
// oneDNN's matmul runs its pool threads in whatever environment they have, where
// flush-to-zero can only move results below fp32's normal range, inside the tolerance.
#pragma once

#include <string>
#include <vector>

#include "mxtrain/gemm.h"
#include "mxtrain/group_list.h"
#include "mxtrain/tensor.h"

namespace mxtrain {

// Which axis of a 2-D operand is the contraction axis.
enum class Contract : uint8_t {
  kLast,   // stored [free, S]
  kFirst,  // stored [S, free]
};

// C = A . B^T along the contraction axes above. Operands are 2-D f32 or bf16; compute is
// kBF16 or kF32. GemmOptions as for MxGemm: out_dtype, bias [J] (f32), accumulate (f32
// [I, J]), out, threads, category. Throws Error on mismatched contraction lengths, bad
// dtypes or ranks, or options of the wrong shape.
Tensor HpGemm(const Tensor& a, Contract a_contract, const Tensor& b, Contract b_contract,
              DType compute, const GemmOptions& options = {});

// Mixture-of-experts forms, as MxGroupedGemm / MxGroupedWgrad (gemm.h) and each group
// bit-identical to HpGemm on that group:
// Y rows of group e = x rows of e [m_e, S] . W[e] with w [E, R, C] contracting along C
// (kLast: W[e] is [J, S]) or R (kFirst: [S, J]); bias, if given, [E, J].
Tensor HpGroupedGemm(const Tensor& x, const Tensor& w, Contract w_contract, const GroupList& groups,
                     DType compute, const GemmOptions& options = {});
// dW[e] = dy_e^T . x_e over each group's rows: [E, N, K] f32 (or into options.accumulate);
// an empty group gives zeros, or leaves the accumulator untouched.
Tensor HpGroupedWgrad(const Tensor& dy, const Tensor& x, const GroupList& groups, DType compute,
                      const GemmOptions& options = {});

// The high-precision GEMM paths this build and machine can run, best first ("onednn-bf16",
// "onednn-f32", "portable"), and the one the next call will use (the first unless tests or
// benchmarks force one: ForceHpGemmPath, testing.h).
std::vector<std::string> AvailableHpGemmPaths();
std::string CurrentHpGemmPath();
// What a GEMM of this compute type runs on the current path: "onednn-bf16" (a bf16 matmul),
// "onednn-f32" (an f32 matmul; for bf16 compute on the bf16-rounded operands) or "portable".
std::string HpGemmRoute(DType compute);

}  // namespace mxtrain
