// MxTensor: an MX-quantized tensor. It carries everything a consumer needs to read it
// right (data, scales, element format, scale rule, blocked axis, group layout), so that no
// consumer can take one layout for another.
//
// Layout (NUMERICS.md §6, the canonical exchange layout): data keeps the input's shape
// [..., M, K] in C order, one byte per element. Scales:
//   rowwise    (1x32 blocks along K): [..., M, ceil(K/32)]
//   columnwise (32x1 blocks along M): [..., ceil(M/32), K]
//   columnwise, token-grouped (2-D only): [sum_g ceil(m_g/32), K], groups in order.
#pragma once

#include <cstdint>
#include <optional>

#include "mxtrain/format/element.h"
#include "mxtrain/group_list.h"
#include "mxtrain/tensor.h"

namespace mxtrain {

inline constexpr int64_t kMxBlock = 32;
constexpr int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

enum class BlockAxis : uint8_t {
  kRowwise,     // axis -1: blocks of 32 consecutive elements of a row (along K)
  kColumnwise,  // axis -2: blocks of 32 consecutive rows of a column (along M)
};
std::string_view Name(BlockAxis axis);  // "rowwise" | "columnwise"

class MxTensor {
 public:
  MxTensor() = default;
  // Checks that data is u8 of rank >= 2, scales u8 with the shape the axis and groups imply,
  // and that groups are only given for 2-D columnwise data whose M they cover.
  MxTensor(Tensor data, Tensor scales, ElementFormat format, ScaleRule rule, BlockAxis axis,
           std::optional<GroupList> groups = std::nullopt);

  // The scale shape that data of this shape needs.
  static Shape ScaleShape(const Shape& data_shape, BlockAxis axis,
                          const std::optional<GroupList>& groups);

  const Tensor& data() const { return data_; }
  const Tensor& scales() const { return scales_; }
  const Shape& shape() const { return data_.shape(); }
  ElementFormat format() const { return format_; }
  ScaleRule rule() const { return rule_; }
  BlockAxis axis() const { return axis_; }
  const std::optional<GroupList>& groups() const { return groups_; }
  bool defined() const { return data_.defined(); }
  int64_t rows() const { return shape()[-2]; }  // M
  int64_t cols() const { return shape()[-1]; }  // K
  // Bytes held by data and scales.
  size_t NumBytes() const { return data_.NumBytes() + scales_.NumBytes(); }

  // Views (sharing storage):
  // rows [begin, end) of a 2-D rowwise tensor;
  MxTensor Rows(int64_t begin, int64_t end) const;
  // matrix e of a 3-D [E, R, C] tensor, as 2-D [R, C] with the same blocked axis;
  MxTensor Matrix(int64_t e) const;
  // group g of a token-grouped columnwise tensor, as a plain columnwise [m_g, K].
  MxTensor Group(int g) const;

 private:
  Tensor data_;
  Tensor scales_;
  ElementFormat format_ = ElementFormat::kE4M3;
  ScaleRule rule_ = ScaleRule::kRceil;
  BlockAxis axis_ = BlockAxis::kRowwise;
  std::optional<GroupList> groups_;
};

}  // namespace mxtrain
