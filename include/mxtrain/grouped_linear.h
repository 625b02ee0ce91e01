// GroupedLinear: the mixture-of-experts form of Linear (linear.h). Tokens arrive sorted by
// expert, with a group list saying how many rows each expert has (cumulative ends or
// counts, group_list.h); expert e computes Y_e = X_e . W[e]^T + b[e] with weights
// [E, N, K] and an optional bias [E, N].
//
//   GroupedLinear experts(8, 2048, 1408, /*bias=*/false, recipe);
//   auto [y, ctx] = experts.Forward(x, groups);      // x [M, 2048] => y [M, 1408]
//   Grads g = experts.Backward(dy, std::move(ctx));  // dx [M, 2048], dw [8, 1408, 2048]
//
// The backward's wgrad is K-grouped: dW[e] = dY_e^T . X_e with X and dY quantized
// token-grouped columnwise (blocks restart at each expert's first row). An expert with no
// tokens gets a zero dW[e] (or leaves main_grad untouched). Policies, the weight cache and
// the bit-identity across them work as for Linear.
#pragma once

#include <memory>
#include <string>

#include "mxtrain/linear.h"
#include "mxtrain/mx_tensor.h"

namespace mxtrain {

class GroupedLinear : public LinearParams {
 public:
  // New zero-filled weights [num_experts, out_features, in_features] (and bias
  // [num_experts, out_features]) of param_dtype.
  GroupedLinear(int64_t num_experts, int64_t in_features, int64_t out_features, bool bias,
                Recipe recipe = {}, OpOptions options = {}, DType param_dtype = DType::kF32,
                std::string name = "grouped_linear");
  // Over existing parameters: weight [E, N, K], bias [E, N] or nullptr.
  GroupedLinear(std::shared_ptr<Parameter> weight, std::shared_ptr<Parameter> bias,
                Recipe recipe = {}, OpOptions options = {});

  // y [M, N] for x [M, K] (f32 or bf16) whose rows split into E groups by `groups`.
  Forwarded Forward(const Tensor& x, const GroupList& groups, const CallOptions& call) const;
  Forwarded Forward(const Tensor& x, const GroupList& groups,
                    bool input_requires_grad = true) const;
  Grads Backward(const Tensor& dy, OpContext ctx) const;

  // Tokens that arrive already quantized: expert-parallel dispatch sends rowwise MXFP8
  // codes and scales (docs/decisions.md "Expert parallelism"), and the fprop reads them as
  // they are, with no dequantize-requantize. x: 2-D rowwise [M, K] in the recipe's input
  // format and scale rule (an MXFP8 recipe). What the wgrad reads is quantized columnwise
  // from x's dequantization (exact in bf16): now under the quantized input policy (auto
  // resolves to it), in the backward from the kept codes under deferred. dx comes back
  // bf16. Outputs equal Forward(Dequantize(x, kBF16), ...) bit for bit.
  Forwarded Forward(const MxTensor& x, const GroupList& groups, const CallOptions& call = {}) const;
  // The backward for an output gradient that arrives quantized likewise (combine backward
  // in MXFP8): dy rowwise [M, N] in the recipe's gradient format; the dgrad reads it as it
  // is, the wgrad a token-grouped copy of its dequantization. Equal to
  // Backward(Dequantize(dy, kBF16), ...) bit for bit.
  Grads Backward(const MxTensor& dy, OpContext ctx) const;

  int64_t num_experts() const { return weight().shape()[0]; }
  int64_t in_features() const { return weight().shape()[2]; }
  int64_t out_features() const { return weight().shape()[1]; }
};

}  // namespace mxtrain
