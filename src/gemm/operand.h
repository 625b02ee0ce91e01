// Internal: a GEMM operand seen as a logical [free, S] matrix whose contraction axis S is
// the MX blocked axis, whichever way it is stored (mxtrain/gemm.h), and the per-row scale
// statistics that decide whether a tile may take a fast path.
#pragma once

#include <cstdint>
#include <vector>

#include "mxtrain/mx_tensor.h"

namespace mxtrain::internal {

struct GemmOperand {
  const uint8_t* data = nullptr;
  const uint8_t* scales = nullptr;
  ElementFormat format = ElementFormat::kE4M3;
  bool contract_rows = false;  // stored [S, free] (columnwise); else [free, S] (rowwise)
  int64_t free = 0;            // rows of the logical matrix
  int64_t s = 0;               // contraction length
  int64_t blocks = 0;          // ceil(S / 32)

  // Views a 2-D MX tensor; throws Error for other ranks or token-grouped layouts.
  static GemmOperand Of(const MxTensor& t, const char* name);

  uint8_t Code(int64_t f, int64_t k) const {
    return contract_rows ? data[k * free + f] : data[f * s + k];
  }
  uint8_t Scale(int64_t f, int64_t kb) const {
    return contract_rows ? scales[kb * free + f] : scales[f * blocks + kb];
  }
};

// Per logical row: the smallest and largest scale byte over blocks holding a non-zero
// element, and whether any block is NaN (scale 0xFF). Rows of zeros have min > max.
struct RowScaleStats {
  std::vector<uint8_t> min_scale;
  std::vector<uint8_t> max_scale;
  std::vector<uint8_t> has_nan;

  static RowScaleStats Of(const GemmOperand& op, int threads);
};

// Whether every product of a row with scale range [a_min, a_max] and a row with range
// [b_min, b_max] (after decoding, scales folded in) is exact in fp32 and every decoded
// value is a normal bf16 / fp32 or zero: then fp32 accumulation of bf16 or fp32 products
// is within NUMERICS.md §7's bound. Empty ranges (min > max: all-zero rows) are safe.
bool ProductsAreExact(ElementFormat fa, uint8_t a_min, uint8_t a_max, ElementFormat fb,
                      uint8_t b_min, uint8_t b_max);

// Whether every tile of A . B^T is exact-safe, decided from the smallest and largest scale
// byte of each whole operand (one pass over the scales, no per-row statistics):
// ProductsAreExact over those two ranges. Without zero or NaN blocks (bytes 0 and 0xFF,
// which fail the range) this is exactly whether every tile is safe by its own ranges (the
// smallest sum over tile pairs is the sum of the smallest); false says nothing, and then
// RowScaleStats and TileSafety decide tile by tile.
bool AllTilesSafe(const GemmOperand& a, const GemmOperand& b);

}  // namespace mxtrain::internal
