// Linear and GroupedLinear: parameters and configuration around the shared body
// (linear_core.cc); OpContext.
#include "mxtrain/linear.h"

#include "mxtrain/error.h"
#include "mxtrain/grouped_linear.h"
#include "mxtrain/quantize.h"
#include "ops/auto_policy.h"
#include "ops/linear_core.h"

namespace mxtrain {

OpContext::OpContext() = default;
OpContext::~OpContext() = default;
// A context that hands its state on is spent: a second Backward on it says so.
OpContext::OpContext(OpContext&& o) noexcept : state_(std::move(o.state_)), spent_(o.spent_) {
  if (state_ != nullptr) o.spent_ = true;
}
OpContext& OpContext::operator=(OpContext&& o) noexcept {
  if (this != &o) {
    state_ = std::move(o.state_);
    spent_ = o.spent_;
    if (state_ != nullptr) o.spent_ = true;
  }
  return *this;
}

bool OpContext::defined() const { return state_ != nullptr; }

SavedMemory OpContext::saved_memory() const {
  return state_ != nullptr ? state_->saved.memory() : SavedMemory{};
}

std::optional<SavePolicy> OpContext::input_policy() const {
  return state_ != nullptr ? state_->input_policy : std::nullopt;
}

std::optional<SavePolicy> OpContext::weight_policy() const {
  return state_ != nullptr ? state_->weight_policy : std::nullopt;
}

namespace {

std::shared_ptr<Parameter> NewParameter(Shape shape, DType dtype, std::string name) {
  MXTRAIN_CHECK(dtype == DType::kF32 || dtype == DType::kBF16,
                "parameters must be f32 or bf16, got ", Name(dtype));
  return std::make_shared<Parameter>(Tensor::Zeros(dtype, std::move(shape)), std::move(name));
}

// The layer as one call runs it: the call's threads and cache choice over the layer's.
internal::LayerView View(const LinearParams& p, const char* op, const CallOptions& call = {}) {
  OpOptions o = p.options();
  if (call.threads >= 0) o.threads = call.threads;
  return internal::LayerView{&p.weight(),           p.bias(), &p.recipe(),     o,
                             call.use_weight_cache, op,       &p.auto_record()};
}

CallOptions WithInputGrad(bool input_requires_grad) {
  CallOptions c;
  c.input_requires_grad = input_requires_grad;
  return c;
}

}  // namespace

LinearParams::LinearParams(std::shared_ptr<Parameter> weight, std::shared_ptr<Parameter> bias,
                           Recipe recipe, OpOptions options, int weight_rank, const char* op)
    : weight_(std::move(weight)),
      bias_(std::move(bias)),
      recipe_(recipe),
      options_(options),
      auto_record_(std::make_shared<internal::AutoRecord>()) {
  MXTRAIN_CHECK(
      weight_ != nullptr && weight_->shape().rank() == weight_rank, op, ": weight must have rank ",
      weight_rank,
      weight_ ? StrCat(", got ", weight_->shape().ToString()) : std::string(", got none"));
  if (bias_ == nullptr) return;
  const std::vector<int64_t>& dims = weight_->shape().dims();
  const Shape want(std::vector<int64_t>(dims.begin(), dims.end() - 1));
  MXTRAIN_CHECK(bias_->shape() == want, op, ": bias must have shape ", want.ToString(), ", got ",
                bias_->shape().ToString());
}

Linear::Linear(int64_t in_features, int64_t out_features, bool bias, Recipe recipe,
               OpOptions options, DType param_dtype, std::string name)
    : Linear(NewParameter({out_features, in_features}, param_dtype, name + ".weight"),
             bias ? NewParameter({out_features}, param_dtype, name + ".bias") : nullptr, recipe,
             options) {}

Linear::Linear(std::shared_ptr<Parameter> weight, std::shared_ptr<Parameter> bias, Recipe recipe,
               OpOptions options)
    : LinearParams(std::move(weight), std::move(bias), recipe, options, 2, "linear") {}

Forwarded Linear::Forward(const Tensor& x, const CallOptions& call) const {
  return internal::LinearForward(View(*this, "linear", call), x, nullptr, call);
}

Forwarded Linear::Forward(const Tensor& x, bool input_requires_grad) const {
  return Forward(x, WithInputGrad(input_requires_grad));
}

Grads Linear::Backward(const Tensor& dy, OpContext ctx) const {
  return internal::LinearBackward(View(*this, "linear"), dy, std::move(ctx));
}

GroupedLinear::GroupedLinear(int64_t num_experts, int64_t in_features, int64_t out_features,
                             bool bias, Recipe recipe, OpOptions options, DType param_dtype,
                             std::string name)
    : GroupedLinear(
          NewParameter({num_experts, out_features, in_features}, param_dtype, name + ".weight"),
          bias ? NewParameter({num_experts, out_features}, param_dtype, name + ".bias") : nullptr,
          recipe, options) {}

GroupedLinear::GroupedLinear(std::shared_ptr<Parameter> weight, std::shared_ptr<Parameter> bias,
                             Recipe recipe, OpOptions options)
    : LinearParams(std::move(weight), std::move(bias), recipe, options, 3, "grouped linear") {}

Forwarded GroupedLinear::Forward(const Tensor& x, const GroupList& groups,
                                 const CallOptions& call) const {
  return internal::LinearForward(View(*this, "grouped linear", call), x, &groups, call);
}

Forwarded GroupedLinear::Forward(const Tensor& x, const GroupList& groups,
                                 bool input_requires_grad) const {
  return Forward(x, groups, WithInputGrad(input_requires_grad));
}

Grads GroupedLinear::Backward(const Tensor& dy, OpContext ctx) const {
  return internal::LinearBackward(View(*this, "grouped linear"), dy, std::move(ctx));
}

Forwarded GroupedLinear::Forward(const MxTensor& x, const GroupList& groups,
                                 const CallOptions& call) const {
  const internal::LayerView view = View(*this, "grouped linear", call);
  internal::CheckArrivingMx(view, x, recipe().input_format(), "input");
  const Tensor x_hp = Dequantize(x, DType::kBF16, view.options.threads);
  return internal::LinearForward(view, x_hp, &groups, call, &x);
}

Grads GroupedLinear::Backward(const MxTensor& dy, OpContext ctx) const {
  const internal::LayerView view = View(*this, "grouped linear");
  internal::CheckArrivingMx(view, dy, recipe().grad_format(), "output gradient");
  const Tensor dy_hp = Dequantize(dy, DType::kBF16, view.options.threads);
  return internal::LinearBackward(view, dy_hp, std::move(ctx), &dy);
}

}  // namespace mxtrain
