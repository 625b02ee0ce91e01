// Grouped (mixture-of-experts) GEMMs as one dense MxGemm per group on views of the
// operands, so every group's result is bit-identical to the dense kernel on that group.
#include "fp_env.h"
#include "gemm/grouped.h"
#include "mxtrain/error.h"
#include "mxtrain/gemm.h"

namespace mxtrain {

Tensor MxGroupedGemm(const MxTensor& x, const MxTensor& w, const GroupList& groups,
                     const GemmOptions& options) {
  const internal::ScopedFpEnv fp_env;
  MXTRAIN_CHECK(x.defined() && x.shape().rank() == 2 && x.axis() == BlockAxis::kRowwise &&
                    !x.groups().has_value(),
                "grouped gemm: x must be a 2-D rowwise MX tensor, got ", Name(x.axis()), " ",
                x.shape().ToString());
  MXTRAIN_CHECK(w.defined() && w.shape().rank() == 3, "grouped gemm: w must be 3-D [E, R, C], got ",
                w.shape().ToString());
  const int64_t out_cols = w.axis() == BlockAxis::kRowwise ? w.shape()[1] : w.shape()[2];
  const int64_t contraction = w.axis() == BlockAxis::kRowwise ? w.shape()[2] : w.shape()[1];
  MXTRAIN_CHECK(contraction == x.cols(), "grouped gemm: x contracts ", x.cols(),
                " but each expert's matrix contracts ", contraction);
  return internal::GroupedRowsGemm(groups, w.shape()[0], x.rows(), out_cols, options,
                                   "grouped gemm", internal::GroupThreads::kAnyCount,
                                   [&](int e, const GemmOptions& o) {
                                     MxGemm(x.Rows(groups.begin(e), groups.end(e)), w.Matrix(e), o);
                                   });
}

Tensor MxGroupedWgrad(const MxTensor& dy, const MxTensor& x, const GemmOptions& options) {
  const internal::ScopedFpEnv fp_env;
  MXTRAIN_CHECK(dy.defined() && x.defined() && dy.groups().has_value() && x.groups().has_value(),
                "grouped wgrad: dy and x must be token-grouped columnwise MX tensors");
  MXTRAIN_CHECK(*dy.groups() == *x.groups(), "grouped wgrad: dy groups (", dy.groups()->ToString(),
                ") differ from x groups (", x.groups()->ToString(), ")");
  const GroupList& groups = *dy.groups();
  const Shape shape{groups.num_groups(), dy.cols(), x.cols()};
  return internal::GroupedWgradGemm(
      groups, shape, options, "grouped wgrad", internal::GroupThreads::kAnyCount,
      [&](int e, const GemmOptions& o) { MxGemm(dy.Group(e), x.Group(e), o); });
}

}  // namespace mxtrain
