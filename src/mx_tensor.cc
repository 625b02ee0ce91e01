#include "mxtrain/mx_tensor.h"

#include "mxtrain/error.h"

namespace mxtrain {

std::string_view Name(BlockAxis axis) {
  return axis == BlockAxis::kRowwise ? "rowwise" : "columnwise";
}

Shape MxTensor::ScaleShape(const Shape& data_shape, BlockAxis axis,
                           const std::optional<GroupList>& groups) {
  MXTRAIN_CHECK(data_shape.rank() >= 2, "MX data must have rank >= 2, got shape ",
                data_shape.ToString());
  Shape s = data_shape;
  if (axis == BlockAxis::kRowwise) {
    MXTRAIN_CHECK(!groups.has_value(), "token groups apply to columnwise blocks only");
    s[-1] = CeilDiv(data_shape[-1], kMxBlock);
  } else if (groups.has_value()) {
    MXTRAIN_CHECK(data_shape.rank() == 2, "token-grouped data must be 2-D, got shape ",
                  data_shape.ToString());
    MXTRAIN_CHECK(groups->total_rows() == data_shape[0], "group list covers ",
                  groups->total_rows(), " rows but the data has M = ", data_shape[0]);
    s[0] = groups->ScaleRows();
  } else {
    s[-2] = CeilDiv(data_shape[-2], kMxBlock);
  }
  return s;
}

MxTensor::MxTensor(Tensor data, Tensor scales, ElementFormat format, ScaleRule rule,
                   BlockAxis axis, std::optional<GroupList> groups)
    : data_(std::move(data)),
      scales_(std::move(scales)),
      format_(format),
      rule_(rule),
      axis_(axis),
      groups_(std::move(groups)) {
  MXTRAIN_CHECK(data_.dtype() == DType::kU8, "MX data must be u8, got ", Name(data_.dtype()));
  MXTRAIN_CHECK(scales_.dtype() == DType::kU8, "MX scales must be u8, got ",
                Name(scales_.dtype()));
  const Shape expected = ScaleShape(data_.shape(), axis_, groups_);
  MXTRAIN_CHECK(scales_.shape() == expected, Name(axis_), " scales for data ",
                data_.shape().ToString(), " must have shape ", expected.ToString(), ", got ",
                scales_.shape().ToString());
}

}  // namespace mxtrain
