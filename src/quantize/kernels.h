// Internal: the table of quantization kernels for one SIMD target, and the work
// descriptions the drivers (quantize.cc) hand them. Kernels know nothing of tensors'
// ownership, threads or autograd: they fill pre-allocated buffers for a range of work.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "mxtrain/error.h"
#include "mxtrain/format/element.h"
#include "mxtrain/mx_tensor.h"
#include "quantize/scale_table.h"

namespace mxtrain::internal {

// A [rows, cols] input (the [..., M, K] tensor flattened to 2-D), fp32 or bf16 bits.
struct QuantSource {
  const void* x;
  bool bf16;
  int64_t rows;
  int64_t cols;
  ElementFormat format;
  ScaleRule rule;
  const ScaleTable* scale_table;  // ScaleTableFor(rule, format)
};

// Rowwise outputs: data [rows, cols], scales [rows, ceil(cols/32)].
struct RowwiseOut {
  uint8_t* data;
  uint8_t* scales;
};

// One columnwise block-row: rows [row0, row0 + num_rows) (1..32 rows) share one scale per
// column, written to scale row `scale_row` of a [*, cols] scale array; columns [col0, col1).
struct ColStrip {
  int64_t row0;
  int64_t num_rows;
  int64_t scale_row;
  int64_t col0;
  int64_t col1;
};

struct ColwiseOut {
  uint8_t* data;    // [rows, cols]
  uint8_t* scales;  // [scale_rows, cols]
  // Write the codes with non-temporal stores where a strip's rows are 64-byte aligned
  // (StreamsColumnwiseCodes, quantize.h, decides; the bytes are the same either way).
  bool stream = false;
};

// A columnwise or dual kernel's scratch memory for one strip (per-column amax, factors and
// 16-bit encoder offsets; for the dual kernel also each block's encoder offsets, 8 bytes per
// block, and on an fp32 source the strip's elements narrowed to 16 bits, 32 rows of them):
// at least WorkspaceBytesPerColumn bytes per column of the strip (col1 - col0), 4-aligned.
// The drivers give each thread one for all its strips.
struct Workspace {
  void* data;
  int64_t bytes;
};
inline constexpr int64_t WorkspaceBytesPerColumn(bool dual, bool bf16) {
  return !dual ? 16 : bf16 ? 24 : 16 + 2 * kMxBlock + 8;
}

struct QuantKernels {
  const char* target;
  // Rows [row0, row1) of a rowwise quantization.
  void (*rowwise)(const QuantSource& src, int64_t row0, int64_t row1, RowwiseOut out);
  // One columnwise strip.
  void (*colwise)(const QuantSource& src, const ColStrip& strip, ColwiseOut out,
                  Workspace workspace);
  // One strip of both: rowwise for its rows and columns (col0, col1 multiples of 32 unless
  // col1 == cols), columnwise as colwise does.
  void (*dual)(const QuantSource& src, const ColStrip& strip, RowwiseOut row_out,
               ColwiseOut col_out, Workspace workspace);
  // Plain element encode (no scaling) of n values.
  void (*encode)(ElementFormat format, const float* in, uint8_t* out, size_t n);
  // Whether dual, where it streams the columnwise codes (ColwiseOut::stream) of a strip of
  // whole rows of whole blocks, streams that strip's rowwise codes too (colwise-inl.h,
  // kDualStreamsRows).
  bool dual_streams_rows;
};

// The preconditions above, checked at each kernel's entry in debug builds (MXTRAIN_DCHECK:
// the dev preset; nothing in release). The drivers (quantize.cc) establish them; a kernel
// that broke one would read or write outside its buffers.
inline void DCheckSource(const QuantSource& src) {
  MXTRAIN_DCHECK(src.rows >= 0 && src.cols >= 0);
  MXTRAIN_DCHECK(src.x != nullptr || src.rows * src.cols == 0);
  MXTRAIN_DCHECK(src.scale_table == &ScaleTableFor(src.rule, src.format));
}
inline void DCheckRowwise(const QuantSource& src, int64_t row0, int64_t row1,
                          const RowwiseOut& out) {
  DCheckSource(src);
  MXTRAIN_DCHECK(0 <= row0 && row0 <= row1 && row1 <= src.rows);
  MXTRAIN_DCHECK(out.data != nullptr && out.scales != nullptr);
}
inline void DCheckColwise(const QuantSource& src, const ColStrip& strip, const ColwiseOut& out,
                          const Workspace& workspace) {
  DCheckSource(src);
  MXTRAIN_DCHECK(1 <= strip.num_rows && strip.num_rows <= kMxBlock);
  MXTRAIN_DCHECK(0 <= strip.row0 && strip.row0 + strip.num_rows <= src.rows);
  MXTRAIN_DCHECK(strip.scale_row >= 0);
  MXTRAIN_DCHECK(0 <= strip.col0 && strip.col0 <= strip.col1 && strip.col1 <= src.cols);
  MXTRAIN_DCHECK(out.data != nullptr && out.scales != nullptr);
  MXTRAIN_DCHECK(workspace.data != nullptr && reinterpret_cast<uintptr_t>(workspace.data) % 4 == 0);
  MXTRAIN_DCHECK(workspace.bytes >=
                 WorkspaceBytesPerColumn(false, src.bf16) * (strip.col1 - strip.col0));
}
inline void DCheckDual(const QuantSource& src, const ColStrip& strip, const RowwiseOut& row_out,
                       const ColwiseOut& col_out, const Workspace& workspace) {
  DCheckColwise(src, strip, col_out, workspace);
  MXTRAIN_DCHECK(workspace.bytes >=
                 WorkspaceBytesPerColumn(true, src.bf16) * (strip.col1 - strip.col0));
  MXTRAIN_DCHECK(row_out.data != nullptr && row_out.scales != nullptr);
  MXTRAIN_DCHECK(strip.col0 % kMxBlock == 0);
  MXTRAIN_DCHECK(strip.col1 % kMxBlock == 0 || strip.col1 == src.cols);
}

// The kernels of the currently chosen SIMD target (simd.h).
const QuantKernels& CurrentQuantKernels();
// The kernels of one named target from AvailableSimdTargets(), regardless of the current
// choice (for tests that compare targets from several threads). Throws Error if unknown.
const QuantKernels& QuantKernelsForTarget(const std::string& name);

}  // namespace mxtrain::internal
