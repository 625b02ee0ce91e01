// Internal: the forward and backward that Linear and GroupedLinear share. The two differ
// only in which quantizer and GEMM they call (dense, or per token group), so one body
// serves both, with `groups` null for the dense op.
#pragma once

#include <memory>
#include <optional>

#include "mxtrain/group_list.h"
#include "mxtrain/linear.h"
#include "ops/auto_policy.h"

namespace mxtrain::internal {

struct OpState {
  // The layer and call that made it: Backward refuses another layer's context and runs
  // with the forward call's threads and cache choice.
  uint64_t weight_id = 0;
  int threads = 0;
  bool use_weight_cache = true;
  bool need_dx = false;
  bool need_dw = false;
  bool need_db = false;
  Shape x_shape;
  DType x_dtype = DType::kF32;
  std::optional<GroupList> groups;
  // MXFP8, "quantized" policies: the columnwise copies (or cached weight) for the backward.
  MxTensor x_col;
  MxTensor w_col;
  // An input that arrived rowwise-quantized (GroupedLinear's MxTensor forward) under the
  // deferred policy: the codes themselves, dequantized for the wgrad in the backward.
  MxTensor x_row;
  // MXFP8 "deferred" policies: the high-precision tensors, quantized in the backward.
  // MXFP8 off: the operands as rounded for the forward's GEMM.
  Tensor x_hp;
  Tensor w_hp;
  // The weight's version at the forward, when w_hp is the parameter's own buffer.
  std::optional<uint64_t> w_version;
  // The policies the forward applied (OpContext::input_policy / weight_policy).
  std::optional<SavePolicy> input_policy;
  std::optional<SavePolicy> weight_policy;
  // An auto input policy: the input's buffer, watched without keeping it, so that the
  // backward can see whether something else kept it alive (auto_policy.h).
  std::weak_ptr<Storage> x_watch;
#ifndef NDEBUG
  // Debug builds: checksums of x_hp and w_hp at the forward (linear.h, "rules of a
  // context"), compared before the backward reads them.
  uint64_t x_checksum = 0;
  uint64_t w_checksum = 0;
#endif
  SavedTensors saved;
};

struct OpAccess {
  static OpState* State(OpContext& c) { return c.state_.get(); }
  static const OpState* State(const OpContext& c) { return c.state_.get(); }
  static void Set(OpContext& c, std::unique_ptr<OpState> s) { c.state_ = std::move(s); }
  static std::unique_ptr<OpState> Take(OpContext& c) {
    if (c.state_ != nullptr) c.spent_ = true;
    return std::move(c.state_);
  }
};

// The layer a call runs: its parameters and configuration, with the call's own threads
// and cache choice already applied to `options` (a copy: the layer is never written).
struct LayerView {
  Parameter* weight;  // [N, K], or [E, N, K] when grouped
  Parameter* bias;    // [N] or [E, N]; may be null
  const Recipe* recipe;
  OpOptions options;
  bool use_weight_cache;
  const char* op;  // "linear" | "grouped linear", for messages
  const std::shared_ptr<AutoRecord>* auto_record;
};

// x_mx / dy_mx: an input or output gradient that arrived rowwise-quantized (expert-parallel
// dispatch); then x / dy are their dequantization (exact in bf16), and the MX GEMMs read
// the codes as given instead of quantizing x / dy rowwise.
Forwarded LinearForward(const LayerView& layer, const Tensor& x, const GroupList* groups,
                        const CallOptions& call, const MxTensor* x_mx = nullptr);
Grads LinearBackward(const LayerView& layer, const Tensor& dy, OpContext ctx,
                     const MxTensor* dy_mx = nullptr);
// The checks of an arriving rowwise operand: MXFP8 recipe, 2-D rowwise, the format and
// scale rule the recipe gives its role. Throws Error naming the layer.
void CheckArrivingMx(const LayerView& layer, const MxTensor& t, ElementFormat want,
                     const char* what);

}  // namespace mxtrain::internal
