// Parameter: a trainable tensor as the ops see it: its high-precision value (fp32 master
// weights, or bf16), an identity and a version counter for the weight-quant cache
// (weight_cache.h), whether it needs a gradient, and its fp32 gradient buffer (main_grad).
//
// The version counts in-place updates: whoever changes value()'s bytes in place (an
// optimizer step, a load, an EMA swap) calls MarkModified(), so that no quantized copy of
// the old values is ever taken for the new ones. This is a contract, not a check: the
// library cannot see a write that bypasses it, and a weight cache would then serve the
// old quantization (a deferred backward's in-place check, linear.h, is the one debug-build
// exception). Frameworks with their own counters (PyTorch's tensor._version) mirror them
// with SetVersion; mxtrain.torch documents the writes torch's counter misses.
//
// A Parameter's identity is never reused, and caches hold only a weak reference to it
// (liveness()): entries of a parameter that is gone can never hit and are dropped.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
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
  uint64_t version() const { return version_.load(std::memory_order_relaxed); }
  bool requires_grad() const { return requires_grad_; }
  void set_requires_grad(bool v) { requires_grad_ = v; }

  // Call after changing value()'s bytes in place.
  void MarkModified() { version_.fetch_add(1, std::memory_order_relaxed); }
  // For frameworks that count versions themselves; a different value counts as modified.
  // Atomic: threads sharing a layer mirror the same counter before their calls.
  void SetVersion(uint64_t version) { version_.store(version, std::memory_order_relaxed); }
  // Expires when this parameter is destroyed (what caches watch).
  std::weak_ptr<const void> liveness() const { return alive_; }

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
  std::atomic<uint64_t> version_{0};
  bool requires_grad_;
  Tensor main_grad_;
  std::shared_ptr<const char> alive_ = std::make_shared<const char>(0);
};

}  // namespace mxtrain
