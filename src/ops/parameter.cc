#include "mxtrain/parameter.h"

#include <atomic>
#include <cstring>

#include "mxtrain/error.h"

namespace mxtrain {
namespace {
std::atomic<uint64_t> g_next_parameter_id{1};
}  // namespace

Parameter::Parameter(Tensor value, std::string name, bool requires_grad)
    : value_(std::move(value)),
      name_(std::move(name)),
      id_(g_next_parameter_id.fetch_add(1)),
      requires_grad_(requires_grad) {
  MXTRAIN_CHECK(value_.defined() && value_.rank() >= 1 &&
                    (value_.dtype() == DType::kF32 || value_.dtype() == DType::kBF16),
                "parameter '", name_, "' must be an f32 or bf16 tensor of rank >= 1");
  // A backward's reference to the value costs nothing: it lives for the whole training.
  if (value_.storage()->backward_holds() == 0) value_.storage()->MarkPersistent();
}

Tensor& Parameter::main_grad() {
  if (!main_grad_.defined()) {
    main_grad_ = Tensor::Zeros(DType::kF32, value_.shape(), MemoryCategory::kGradient);
  }
  return main_grad_;
}

void Parameter::ZeroMainGrad() {
  Tensor& g = main_grad();
  std::memset(g.raw(), 0, g.NumBytes());
}

}  // namespace mxtrain
