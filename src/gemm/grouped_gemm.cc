// Grouped (mixture-of-experts) GEMMs as one dense MxGemm per group on views of the
// operands, so every group's result is bit-identical to the dense kernel on that group.
#include <cstring>

#include "mxtrain/error.h"
#include "mxtrain/gemm.h"

namespace mxtrain {

Tensor MxGroupedGemm(const MxTensor& x, const MxTensor& w, const GroupList& groups,
                     const GemmOptions& options) {
  MXTRAIN_CHECK(x.defined() && x.shape().rank() == 2 && x.axis() == BlockAxis::kRowwise &&
                    !x.groups().has_value(),
                "grouped gemm: x must be a 2-D rowwise MX tensor, got ", Name(x.axis()), " ",
                x.shape().ToString());
  MXTRAIN_CHECK(w.defined() && w.shape().rank() == 3, "grouped gemm: w must be 3-D [E, R, C], got ",
                w.shape().ToString());
  const int64_t experts = w.shape()[0];
  MXTRAIN_CHECK(groups.num_groups() == experts, "grouped gemm: ", groups.num_groups(),
                " groups for ", experts, " experts");
  MXTRAIN_CHECK(groups.total_rows() == x.rows(), "grouped gemm: group list covers ",
                groups.total_rows(), " rows but x has M = ", x.rows());
  MXTRAIN_CHECK(options.accumulate == nullptr && options.out == nullptr,
                "grouped gemm: no accumulator or output tensor (accumulation is for wgrad)");
  const int64_t out_cols = w.axis() == BlockAxis::kRowwise ? w.shape()[1] : w.shape()[2];
  const int64_t contraction = w.axis() == BlockAxis::kRowwise ? w.shape()[2] : w.shape()[1];
  MXTRAIN_CHECK(contraction == x.cols(), "grouped gemm: x contracts ", x.cols(),
                " but each expert's matrix contracts ", contraction);
  if (options.bias != nullptr) {
    MXTRAIN_CHECK(
        options.bias->dtype() == DType::kF32 && options.bias->shape() == (Shape{experts, out_cols}),
        "grouped gemm: bias must be f32 [", experts, ", ", out_cols, "]");
  }
  Tensor y = Tensor::Empty(options.out_dtype, {x.rows(), out_cols}, options.category);
  for (int e = 0; e < experts; ++e) {
    if (groups.size(e) == 0) continue;
    GemmOptions o = options;
    Tensor bias_e;
    if (options.bias != nullptr) {
      bias_e = options.bias->Slice(e, e + 1).Reshape({out_cols});
      o.bias = &bias_e;
    }
    Tensor y_e = y.Slice(groups.begin(e), groups.end(e));  // written in place
    o.out = &y_e;
    MxGemm(x.Rows(groups.begin(e), groups.end(e)), w.Matrix(e), o);
  }
  return y;
}

Tensor MxGroupedWgrad(const MxTensor& dy, const MxTensor& x, const GemmOptions& options) {
  MXTRAIN_CHECK(dy.defined() && x.defined() && dy.groups().has_value() && x.groups().has_value(),
                "grouped wgrad: dy and x must be token-grouped columnwise MX tensors");
  MXTRAIN_CHECK(*dy.groups() == *x.groups(), "grouped wgrad: dy groups (", dy.groups()->ToString(),
                ") differ from x groups (", x.groups()->ToString(), ")");
  const GroupList& groups = *dy.groups();
  const int64_t experts = groups.num_groups();
  const Shape shape{experts, dy.cols(), x.cols()};
  MXTRAIN_CHECK(
      options.out_dtype == DType::kF32 && options.bias == nullptr && options.out == nullptr,
      "grouped wgrad: the output is a new f32 tensor (or the accumulator), no bias");
  Tensor out;
  if (options.accumulate != nullptr) {
    MXTRAIN_CHECK(
        options.accumulate->dtype() == DType::kF32 && options.accumulate->shape() == shape,
        "grouped wgrad: accumulator must be f32 ", shape.ToString());
    out = *options.accumulate;
  } else {
    out = Tensor::Empty(DType::kF32, shape, options.category);
  }
  for (int e = 0; e < experts; ++e) {
    Tensor dw_e = out.Slice(e, e + 1).Reshape({shape[1], shape[2]});
    if (groups.size(e) == 0) {
      // dW[e] = 0, or the accumulator left untouched.
      if (options.accumulate == nullptr) std::memset(dw_e.raw(), 0, dw_e.NumBytes());
      continue;
    }
    GemmOptions o = options;
    if (options.accumulate != nullptr) {
      o.accumulate = &dw_e;
    } else {
      o.out = &dw_e;  // written in place
    }
    MxGemm(dy.Group(e), x.Group(e), o);
  }
  return out;
}

}  // namespace mxtrain
