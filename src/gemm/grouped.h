// Internal: the per-group drivers that MxGroupedGemm / MxGroupedWgrad (grouped_gemm.cc)
// and their high-precision twins (hp_gemm.cc) share: outputs, per-group views, bias rows,
// and what an empty group gets. Each group's result comes from one dense GEMM call, so it
// is bit-identical to that call on the group alone.
#pragma once

#include <cstring>

#include "mxtrain/error.h"
#include "mxtrain/gemm.h"
#include "mxtrain/group_list.h"

namespace mxtrain::internal {

// fprop / dgrad of x_rows tokens against `experts` weight matrices: y [x_rows, out_cols]
// of options.out_dtype; for each group e with rows, gemm(e, o) with o = options writing
// rows of e in place (o.out) and o.bias row e of an [E, out_cols] bias. `op` prefixes the
// messages.
template <typename Gemm>
Tensor GroupedRowsGemm(const GroupList& groups, int64_t experts, int64_t x_rows,
                       int64_t out_cols, const GemmOptions& options, const char* op, Gemm&& gemm) {
  MXTRAIN_CHECK(groups.num_groups() == experts, op, ": ", groups.num_groups(), " groups for ",
                experts, " experts");
  MXTRAIN_CHECK(groups.total_rows() == x_rows, op, ": group list covers ", groups.total_rows(),
                " rows but x has M = ", x_rows);
  MXTRAIN_CHECK(options.accumulate == nullptr && options.out == nullptr, op,
                ": no accumulator or output tensor (accumulation is for wgrad)");
  if (options.bias != nullptr) {
    MXTRAIN_CHECK(options.bias->dtype() == DType::kF32 &&
                      options.bias->shape() == (Shape{experts, out_cols}),
                  op, ": bias must be f32 [", experts, ", ", out_cols, "]");
  }
  Tensor y = Tensor::Empty(options.out_dtype, {groups.total_rows(), out_cols}, options.category);
  for (int e = 0; e < groups.num_groups(); ++e) {
    if (groups.size(e) == 0) continue;
    GemmOptions o = options;
    Tensor bias_e;
    if (options.bias != nullptr) {
      bias_e = options.bias->Slice(e, e + 1).Reshape({out_cols});
      o.bias = &bias_e;
    }
    Tensor y_e = y.Slice(groups.begin(e), groups.end(e));  // written in place
    o.out = &y_e;
    gemm(e, o);
  }
  return y;
}

// K-grouped wgrad: dW [E, shape[1], shape[2]] f32, new or options.accumulate; for each
// group e with rows, gemm(e, o) with o writing (or accumulating into) dW[e]. An empty
// group gets dW[e] = 0, or leaves the accumulator untouched.
template <typename Gemm>
Tensor GroupedWgradGemm(const GroupList& groups, const Shape& shape, const GemmOptions& options,
                        const char* op, Gemm&& gemm) {
  MXTRAIN_CHECK(
      options.out_dtype == DType::kF32 && options.bias == nullptr && options.out == nullptr, op,
      ": the output is a new f32 tensor (or the accumulator), no bias");
  Tensor out;
  if (options.accumulate != nullptr) {
    MXTRAIN_CHECK(options.accumulate->dtype() == DType::kF32 && options.accumulate->shape() == shape,
                  op, ": accumulator must be f32 ", shape.ToString());
    out = *options.accumulate;
  } else {
    out = Tensor::Empty(DType::kF32, shape, options.category);
  }
  for (int e = 0; e < groups.num_groups(); ++e) {
    Tensor dw_e = out.Slice(e, e + 1).Reshape({shape[1], shape[2]});
    if (groups.size(e) == 0) {
      if (options.accumulate == nullptr) std::memset(dw_e.raw(), 0, dw_e.NumBytes());
      continue;
    }
    GemmOptions o = options;
    if (options.accumulate != nullptr) {
      o.accumulate = &dw_e;
    } else {
      o.out = &dw_e;  // written in place
    }
    gemm(e, o);
  }
  return out;
}

}  // namespace mxtrain::internal
