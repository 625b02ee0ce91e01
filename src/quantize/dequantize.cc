// Dequantization: element value times block scale (NUMERICS.md §5), to fp32 or bf16.
#include <omp.h>

#include <array>

#include "fp_env.h"
#include "mxtrain/error.h"
#include "mxtrain/quantize.h"
#include "omp_threads.h"

namespace mxtrain {
namespace {

std::array<float, 256> DecodeTable(ElementFormat format) {
  std::array<float, 256> table;
  for (int c = 0; c < 256; ++c) table[c] = DecodeElement(format, static_cast<uint8_t>(c));
  return table;
}

// Row r of the flattened [rows, K] data -> its scale row (columnwise layouts).
struct ScaleRowMap {
  const GroupList* groups;  // token groups, or null for [..., M, K] batches
  int64_t m;                // rows per batch entry

  int64_t operator()(int64_t r, int& group_hint) const {
    if (groups == nullptr) return (r / m) * CeilDiv(m, kMxBlock) + (r % m) / kMxBlock;
    while (r >= groups->end(group_hint)) ++group_hint;
    return groups->ScaleRowBegin(group_hint) + (r - groups->begin(group_hint)) / kMxBlock;
  }
};

}  // namespace

Tensor Dequantize(const MxTensor& q, DType out_dtype, int threads) {
  const internal::ScopedFpEnv fp_env;
  MXTRAIN_CHECK(q.defined(), "dequantize: MX tensor is undefined");
  MXTRAIN_CHECK(out_dtype == DType::kF32 || out_dtype == DType::kBF16,
                "dequantize: output dtype must be f32 or bf16, got ", Name(out_dtype));
  static const std::array<float, 256> kE4M3Table = DecodeTable(ElementFormat::kE4M3);
  static const std::array<float, 256> kE5M2Table = DecodeTable(ElementFormat::kE5M2);
  const float* table = q.format() == ElementFormat::kE4M3 ? kE4M3Table.data() : kE5M2Table.data();

  Tensor out = Tensor::Empty(out_dtype, q.shape());
  const int64_t k = q.cols();
  const int64_t rows = k == 0 ? 0 : q.shape().NumElements() / k;
  const uint8_t* data = q.data().const_data<uint8_t>();
  const uint8_t* scales = q.scales().const_data<uint8_t>();
  const int64_t row_blocks = CeilDiv(k, kMxBlock);
  const bool rowwise = q.axis() == BlockAxis::kRowwise;
  const ScaleRowMap map{q.groups() ? &*q.groups() : nullptr, q.rows()};
  const int team = internal::TeamSize(threads, "dequantize");
#pragma omp parallel num_threads(team)
  {
    const internal::ScopedFpEnv fp_env;
    const internal::ThreadShare share(rows);
    int group_hint = 0;
    for (int64_t r = share.begin; r < share.end; ++r) {
      const uint8_t* scale_row =
          rowwise ? scales + r * row_blocks : scales + map(r, group_hint) * k;
      for (int64_t c = 0; c < k; ++c) {
        const float value =
            table[data[r * k + c]] * DecodeE8M0(rowwise ? scale_row[c / kMxBlock] : scale_row[c]);
        if (out_dtype == DType::kF32) {
          out.mutable_data<float>()[r * k + c] = value;
        } else {
          out.mutable_data<uint16_t>()[r * k + c] = F32ToBf16(value);
        }
      }
    }
  }
  return out;
}

}  // namespace mxtrain
