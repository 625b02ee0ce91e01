// The scalar reference quantizers: plain loops over NUMERICS.md, one block at a time,
// single-threaded. Every fast path is tested against these, byte for byte.
#include <algorithm>
#include <vector>

#include "fp_env.h"
#include "mxtrain/error.h"
#include "mxtrain/quantize.h"

namespace mxtrain::ref {
namespace {

// Element i of an fp32 or bf16 tensor, widened to fp32 (exact).
float Element(const Tensor& x, int64_t i) {
  return x.dtype() == DType::kBF16 ? Bf16ToF32(x.const_data<uint16_t>()[i])
                                   : x.const_data<float>()[i];
}

void CheckInput(const Tensor& x) {
  MXTRAIN_CHECK(x.defined() && (x.dtype() == DType::kF32 || x.dtype() == DType::kBF16),
                "reference quantize: input must be a defined f32 or bf16 tensor");
  MXTRAIN_CHECK(x.rank() >= 2, "reference quantize: input must have rank >= 2, got shape ",
                x.shape().ToString());
}

// Quantizes the elements at `indices` (one block) of x into data, returning the scale.
uint8_t QuantizeBlock(const Tensor& x, const std::vector<int64_t>& indices,
                      const QuantizeOptions& o, uint8_t* data) {
  uint32_t amax = 0;
  for (int64_t i : indices) amax = std::max(amax, F32Bits(Element(x, i)) & kF32AbsMask);
  const uint8_t scale = BlockScale(o.rule, o.format, amax);
  for (int64_t i : indices) {
    data[i] = scale == kE8M0NaN ? uint8_t{0x7F}
                                : EncodeElement(o.format, Element(x, i) * E8M0InverseScale(scale));
  }
  return scale;
}

// Columnwise over consecutive row segments of the flattened [rows, K] input, each blocked
// from its own first row; scale rows appended in order.
MxTensor Columnwise(const Tensor& x, const QuantizeOptions& o, const GroupList& segments,
                    std::optional<GroupList> groups) {
  CheckInput(x);
  const int64_t k = x.shape()[-1];
  Tensor data = Tensor::Empty(DType::kU8, x.shape(), o.category);
  Tensor scales = Tensor::Empty(
      DType::kU8, MxTensor::ScaleShape(x.shape(), BlockAxis::kColumnwise, groups), o.category);
  int64_t scale_row = 0;
  std::vector<int64_t> indices;
  for (int g = 0; g < segments.num_groups(); ++g) {
    for (int64_t r0 = segments.begin(g); r0 < segments.end(g); r0 += kMxBlock, ++scale_row) {
      const int64_t r1 = std::min(r0 + kMxBlock, segments.end(g));
      for (int64_t c = 0; c < k; ++c) {
        indices.clear();
        for (int64_t r = r0; r < r1; ++r) indices.push_back(r * k + c);
        scales.mutable_data<uint8_t>()[scale_row * k + c] =
            QuantizeBlock(x, indices, o, data.mutable_data<uint8_t>());
      }
    }
  }
  return MxTensor(std::move(data), std::move(scales), o.format, o.rule, BlockAxis::kColumnwise,
                  std::move(groups));
}

}  // namespace

MxTensor QuantizeRowwise(const Tensor& x, const QuantizeOptions& o) {
  const internal::ScopedFpEnv fp_env;
  CheckInput(x);
  const int64_t k = x.shape()[-1];
  const int64_t rows = k == 0 ? 0 : x.NumElements() / k;
  const int64_t blocks = CeilDiv(k, kMxBlock);
  Tensor data = Tensor::Empty(DType::kU8, x.shape(), o.category);
  Tensor scales = Tensor::Empty(
      DType::kU8, MxTensor::ScaleShape(x.shape(), BlockAxis::kRowwise, std::nullopt), o.category);
  std::vector<int64_t> indices;
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t b = 0; b < blocks; ++b) {
      indices.clear();
      for (int64_t c = b * kMxBlock; c < std::min(k, (b + 1) * kMxBlock); ++c) {
        indices.push_back(r * k + c);
      }
      scales.mutable_data<uint8_t>()[r * blocks + b] =
          QuantizeBlock(x, indices, o, data.mutable_data<uint8_t>());
    }
  }
  return MxTensor(std::move(data), std::move(scales), o.format, o.rule, BlockAxis::kRowwise);
}

MxTensor QuantizeColumnwise(const Tensor& x, const QuantizeOptions& o) {
  const internal::ScopedFpEnv fp_env;
  CheckInput(x);
  int64_t batch = 1;
  for (int i = 0; i + 2 < x.rank(); ++i) batch *= x.shape()[i];
  std::vector<int64_t> counts(static_cast<size_t>(std::max<int64_t>(batch, 1)),
                              batch == 0 ? 0 : x.shape()[-2]);
  const GroupList segments =
      GroupList::Make(counts, GroupListType::kCounts, batch == 0 ? 0 : batch * x.shape()[-2]);
  return Columnwise(x, o, segments, std::nullopt);
}

MxTensor QuantizeGrouped(const Tensor& x, const GroupList& groups, const QuantizeOptions& o) {
  const internal::ScopedFpEnv fp_env;
  CheckInput(x);
  MXTRAIN_CHECK(x.rank() == 2, "reference grouped quantize: input must be 2-D");
  return Columnwise(x, o, groups, groups);
}

}  // namespace mxtrain::ref
