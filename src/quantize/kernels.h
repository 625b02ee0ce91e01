// Internal: the table of quantization kernels for one SIMD target, and the work
// descriptions the drivers (quantize.cc) hand them. Kernels know nothing of tensors'
// ownership, threads or autograd: they fill pre-allocated buffers for a range of work.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "mxtrain/format/element.h"
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

struct QuantKernels {
  const char* target;
  // Rows [row0, row1) of a rowwise quantization.
  void (*rowwise)(const QuantSource& src, int64_t row0, int64_t row1, RowwiseOut out);
  // One columnwise strip. workspace: at least 16 bytes per column (col1 - col0), 4-aligned.
  void (*colwise)(const QuantSource& src, const ColStrip& strip, ColwiseOut out, void* workspace);
  // One strip of both: rowwise for its rows and columns (col0, col1 multiples of 32 unless
  // col1 == cols), columnwise as colwise does.
  void (*dual)(const QuantSource& src, const ColStrip& strip, RowwiseOut row_out,
               ColwiseOut col_out, void* workspace);
  // Plain element encode (no scaling) of n values.
  void (*encode)(ElementFormat format, const float* in, uint8_t* out, size_t n);
};

// The kernels of the currently chosen SIMD target (simd.h).
const QuantKernels& CurrentQuantKernels();
// The kernels of one named target from AvailableSimdTargets(), regardless of the current
// choice (for tests that compare targets from several threads). Throws Error if unknown.
const QuantKernels& QuantKernelsForTarget(const std::string& name);

}  // namespace mxtrain::internal
