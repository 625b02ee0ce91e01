#include "mxtrain/tensor.h"

#include <cstring>
#include <limits>

#include "mxtrain/error.h"

namespace mxtrain {

size_t DTypeSize(DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return 4;
    case DType::kBF16:
      return 2;
    case DType::kU8:
      return 1;
  }
  return 0;
}

std::string_view Name(DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return "f32";
    case DType::kBF16:
      return "bf16";
    case DType::kU8:
      return "u8";
  }
  return "?";
}

int64_t Shape::NumElements() const {
  int64_t n = 1;
  for (int64_t d : dims_) n *= d;
  return n;
}

std::string Shape::ToString() const {
  std::string s = "[";
  for (size_t i = 0; i < dims_.size(); ++i) {
    if (i) s += ", ";
    s += std::to_string(dims_[i]);
  }
  return s + "]";
}

namespace {

void CheckShape(const Shape& shape) {
  int64_t n = 1;
  for (int64_t d : shape.dims()) {
    MXTRAIN_CHECK(d >= 0, "negative dimension in shape ", shape.ToString());
    MXTRAIN_CHECK(d == 0 || n <= std::numeric_limits<int64_t>::max() / 8 / d, "shape ",
                  shape.ToString(), " is too large");
    n *= d;
  }
}

}  // namespace

Tensor Tensor::Empty(DType dtype, Shape shape, MemoryCategory category) {
  CheckShape(shape);
  Tensor t;
  t.dtype_ = dtype;
  t.shape_ = std::move(shape);
  t.storage_ = std::make_shared<Storage>(t.NumBytes(), category);
  return t;
}

Tensor Tensor::Zeros(DType dtype, Shape shape, MemoryCategory category) {
  Tensor t = Empty(dtype, std::move(shape), category);
  std::memset(t.raw(), 0, t.NumBytes());
  return t;
}

Tensor Tensor::Borrow(void* data, DType dtype, Shape shape, std::shared_ptr<void> owner) {
  CheckShape(shape);
  Tensor t;
  t.dtype_ = dtype;
  t.shape_ = std::move(shape);
  MXTRAIN_CHECK(data != nullptr || t.NumBytes() == 0,
                "cannot borrow a null pointer as a tensor of shape ", t.shape_.ToString());
  t.storage_ = std::make_shared<Storage>(data, t.NumBytes(), std::move(owner));
  return t;
}

Tensor Tensor::Reshape(Shape shape) const {
  CheckShape(shape);
  MXTRAIN_CHECK(shape.NumElements() == NumElements(), "cannot reshape ", shape_.ToString(), " to ",
                shape.ToString());
  Tensor t = *this;
  t.shape_ = std::move(shape);
  return t;
}

Tensor Tensor::Slice(int64_t begin, int64_t end) const {
  MXTRAIN_CHECK(rank() >= 1, "cannot slice a rank-0 tensor");
  MXTRAIN_CHECK(0 <= begin && begin <= end && end <= shape_[0], "slice [", begin, ", ", end,
                ") is outside the first dimension of ", shape_.ToString());
  Tensor t = *this;
  t.shape_[0] = end - begin;
  t.offset_ += static_cast<size_t>(begin) * (shape_[0] == 0 ? 0 : NumBytes() / shape_[0]);
  return t;
}

}  // namespace mxtrain
