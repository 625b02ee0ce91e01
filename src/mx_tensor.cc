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
    MXTRAIN_CHECK(groups->total_rows() == data_shape[0], "group list covers ", groups->total_rows(),
                  " rows but the data has M = ", data_shape[0]);
    s[0] = groups->ScaleRows();
  } else {
    s[-2] = CeilDiv(data_shape[-2], kMxBlock);
  }
  return s;
}

MxTensor::MxTensor(Tensor data, Tensor scales, ElementFormat format, ScaleRule rule, BlockAxis axis,
                   std::optional<GroupList> groups)
    : data_(std::move(data)),
      scales_(std::move(scales)),
      format_(format),
      rule_(rule),
      axis_(axis),
      groups_(std::move(groups)) {
  MXTRAIN_CHECK(data_.dtype() == DType::kU8, "MX data must be u8, got ", Name(data_.dtype()));
  MXTRAIN_CHECK(scales_.dtype() == DType::kU8, "MX scales must be u8, got ", Name(scales_.dtype()));
  const Shape expected = ScaleShape(data_.shape(), axis_, groups_);
  MXTRAIN_CHECK(scales_.shape() == expected, Name(axis_), " scales for data ",
                data_.shape().ToString(), " must have shape ", expected.ToString(), ", got ",
                scales_.shape().ToString());
}

MxTensor MxTensor::Rows(int64_t begin, int64_t end) const {
  MXTRAIN_CHECK(shape().rank() == 2 && axis_ == BlockAxis::kRowwise,
                "row slices need a 2-D rowwise MX tensor, got ", Name(axis_), " ",
                shape().ToString());
  return MxTensor(data_.Slice(begin, end), scales_.Slice(begin, end), format_, rule_, axis_);
}

MxTensor MxTensor::Matrix(int64_t e) const {
  MXTRAIN_CHECK(shape().rank() == 3 && !groups_.has_value(),
                "Matrix(e) needs a 3-D MX tensor, got ", shape().ToString());
  const Shape d{shape()[1], shape()[2]};
  const Shape s{scales_.shape()[1], scales_.shape()[2]};
  return MxTensor(data_.Slice(e, e + 1).Reshape(d), scales_.Slice(e, e + 1).Reshape(s), format_,
                  rule_, axis_);
}

MxTensor MxTensor::Group(int g) const {
  MXTRAIN_CHECK(groups_.has_value(), "Group(g) needs a token-grouped MX tensor");
  MXTRAIN_CHECK(g >= 0 && g < groups_->num_groups(), "group ", g, " out of range [0, ",
                groups_->num_groups(), ")");
  return MxTensor(data_.Slice(groups_->begin(g), groups_->end(g)),
                  scales_.Slice(groups_->ScaleRowBegin(g), groups_->ScaleRowBegin(g + 1)), format_,
                  rule_, axis_);
}

}  // namespace mxtrain
