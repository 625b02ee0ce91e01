// Parameter: a trainable tensor as the ops see it: its high-precision value (fp32 master
// weights, or bf16), an identity and a version counter for the weight-quant cache
// (weight_cache.h), whether it needs a gradient, and its fp32 gradient buffer (main_grad).
//
// The version counts in-place updates: whoever changes value()'s bytes in place (an
// optimizer step, a load) calls MarkModified(), so that no quantized copy of the old
// values is ever taken for the new ones. Frameworks with their own counters (PyTorch's
// tensor._version) mirror them with SetVersion.
#pragma once

#include <cstdint>
#include <string>

#include "mxtrain/tensor.h"

namespace mxtrain {

class Parameter {
 public:
  // value: f32 or bf16 of any rank >= 1. The identity is unique for the process.
  explicit Parameter(Tensor value, std::string name = "", bool requires_grad = true);
  Parameter(const Parameter&) = delete;
  Parameter& operator=(const Parameter&) = delete;

  const Tensor& value() const { return value_; }
  const Shape& shape() const { return value_.shape(); }
  const std::string& name() const { return name_; }
  uint64_t id() const { return id_; }
  uint64_t version() const { return version_; }
  bool requires_grad() const { return requires_grad_; }
  void set_requires_grad(bool v) { requires_grad_ = v; }

  // Call after changing value()'s bytes in place.
  void MarkModified() { ++version_; }
  // For frameworks that count versions themselves; a different value counts as modified.
  void SetVersion(uint64_t version) { version_ = version; }

  // The fp32 gradient buffer of value's shape (kGradient), zero-filled when first made.
  Tensor& main_grad();
  bool has_main_grad() const { return main_grad_.defined(); }
  // Sets main_grad to zero (allocating it if needed).
  void ZeroMainGrad();
  // Frees main_grad.
  void ReleaseMainGrad() { main_grad_ = Tensor(); }

 private:
  Tensor value_;
  std::string name_;
  uint64_t id_;
  uint64_t version_ = 0;
  bool requires_grad_;
  Tensor main_grad_;
};

}  // namespace mxtrain
