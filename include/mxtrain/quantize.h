// MXFP8 quantization and dequantization (NUMERICS.md §3-6).
//
// Inputs are fp32 or bf16 tensors of rank >= 2, viewed as [..., M, K]. Every function here
// runs the fastest SIMD target the machine supports (simd.h), multi-threaded with OpenMP,
// and is bit-identical to the scalar reference in namespace mxtrain::ref, whatever the
// caller's floating-point environment (flush-to-zero, denormals-are-zero and the rounding
// mode are set to the IEEE default inside every call and on every thread it uses, and
// restored).
//
//   MxTensor xr = QuantizeRowwise(x, {});           // blocks of 32 along K
//   MxTensor xc = QuantizeColumnwise(x, {});        // blocks of 32 along M
//   auto [r, c] = QuantizeDual(x, {});              // both, one pass over x
//   MxTensor xg = QuantizeGrouped(x, groups, {});   // columnwise, blocks restart per group
//   auto [r, g] = QuantizeDualGrouped(x, groups, {}); // rowwise + grouped, one pass
//   Tensor y = Dequantize(xr, DType::kF32);
#pragma once

#include <string_view>

#include "mxtrain/group_list.h"
#include "mxtrain/mx_tensor.h"
#include "mxtrain/tensor.h"

namespace mxtrain {

// How the columnwise codes (columnwise, grouped and the columnwise half of dual) are
// written; the bytes are the same either way. Non-temporal stores skip reading every
// output line before writing it and keep the codes out of the caches: right for a tensor
// far larger than the caches whose codes are read much later (a saved activation), wrong
// for one a GEMM reads next from L2. kAuto streams once input and codes together reach
// kStreamCodesMinBytes, on every CPU: streaming lost below ~2 MiB and won from 6 MiB up on
// AMD Zen 4 (bf16 4096 x 4096, 2 threads: 1.50 -> 1.11 ms) and on Sapphire Rapids
// (1.61-1.77 -> 1.31-1.42 ms on three days out of four); the threshold sits above that so
// that codes a consumer could still find in L3 stay cached (docs/decisions.md, "Columnwise
// codes streamed from 8 MiB, on every CPU").
enum class CodeStores { kAuto, kCached, kStreaming };
inline constexpr int64_t kStreamCodesMinBytes = int64_t{8} << 20;
std::string_view Name(CodeStores stores);  // "auto" | "cached" | "streaming"
// Parse a name; throws Error naming the value and the accepted ones.
CodeStores ParseCodeStores(std::string_view name);

struct QuantizeOptions {
  ElementFormat format = ElementFormat::kE4M3;
  ScaleRule rule = ScaleRule::kRceil;
  int threads = 0;  // 0: omp_get_max_threads() (all cores unless OMP_NUM_THREADS says)
  MemoryCategory category = MemoryCategory::kQuantized;  // where the outputs are counted
  CodeStores code_stores = CodeStores::kAuto;
};

struct DualMx {
  MxTensor rowwise;
  MxTensor columnwise;
};

// Whether a columnwise, grouped or dual quantization of x with these options writes its
// columnwise codes with non-temporal stores (CodeStores; kStreaming still falls back to
// ordinary stores for rows that are not 64-byte aligned).
bool StreamsColumnwiseCodes(const Tensor& x, const QuantizeOptions& options);
// Whether a dual quantization of x with these options streams its rowwise codes as well:
// where it streams the columnwise ones, K is whole blocks, and the SIMD target in use has
// AVX-512 (on AVX2 a second stream of non-temporal stores slowed the kernel down;
// docs/decisions.md "Dual's rowwise codes streamed on AVX-512 only").
bool StreamsDualRowwiseCodes(const Tensor& x, const QuantizeOptions& options);

MxTensor QuantizeRowwise(const Tensor& x, const QuantizeOptions& options);
MxTensor QuantizeColumnwise(const Tensor& x, const QuantizeOptions& options);
// Rowwise and columnwise copies from one read of x; each equals the single-axis result.
DualMx QuantizeDual(const Tensor& x, const QuantizeOptions& options);
// Token-grouped columnwise for mixture-of-experts: x is 2-D [M, K], groups cover M; every
// group is blocked from its own first row, empty groups add no scale rows.
MxTensor QuantizeGrouped(const Tensor& x, const GroupList& groups, const QuantizeOptions& options);
// Rowwise and token-grouped columnwise from one read of a 2-D x (mixture-of-experts
// forward and backward); each equals QuantizeRowwise / QuantizeGrouped.
DualMx QuantizeDualGrouped(const Tensor& x, const GroupList& groups,
                           const QuantizeOptions& options);

// Elements times their block scale, as fp32 or bf16 (rounded to nearest even); a block with
// scale 0xFF reads back as NaN. out_dtype must be kF32 or kBF16.
Tensor Dequantize(const MxTensor& q, DType out_dtype = DType::kF32, int threads = 0);

// The scalar reference: plain loops over NUMERICS.md, single-threaded. The oracle for the
// fast paths, kept in the library so that tests, benchmarks and users can call it.
namespace ref {
MxTensor QuantizeRowwise(const Tensor& x, const QuantizeOptions& options);
MxTensor QuantizeColumnwise(const Tensor& x, const QuantizeOptions& options);
MxTensor QuantizeGrouped(const Tensor& x, const GroupList& groups, const QuantizeOptions& options);
}  // namespace ref

}  // namespace mxtrain
