// Tensor: a dense, C-contiguous array of fp32, bf16 (as uint16 bits) or bytes, with shared
// storage from the tracking allocator (memory.h). Copying a Tensor shares its storage.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "mxtrain/memory.h"

namespace mxtrain {

enum class DType : uint8_t { kF32, kBF16, kU8 };
size_t DTypeSize(DType dtype);
std::string_view Name(DType dtype);

// A tensor shape: sizes of each dimension, outermost first.
class Shape {
 public:
  Shape() = default;
  Shape(std::initializer_list<int64_t> dims) : dims_(dims) {}
  explicit Shape(std::vector<int64_t> dims) : dims_(std::move(dims)) {}

  int rank() const { return static_cast<int>(dims_.size()); }
  int64_t operator[](int i) const { return dims_[i < 0 ? i + rank() : i]; }
  int64_t& operator[](int i) { return dims_[i < 0 ? i + rank() : i]; }
  int64_t NumElements() const;
  const std::vector<int64_t>& dims() const { return dims_; }
  bool operator==(const Shape& other) const = default;
  // "[4, 32, 64]"
  std::string ToString() const;

 private:
  std::vector<int64_t> dims_;
};

class Tensor {
 public:
  Tensor() = default;
  // A new tensor of the given shape; contents uninitialized.
  static Tensor Empty(DType dtype, Shape shape,
                      MemoryCategory category = MemoryCategory::kActivation);
  // A new tensor filled with zero bytes.
  static Tensor Zeros(DType dtype, Shape shape,
                      MemoryCategory category = MemoryCategory::kActivation);
  // A tensor over memory mxtrain does not own (a numpy array, a torch tensor): C-contiguous
  // elements of dtype at data, kept alive by `owner` while any tensor shares the storage.
  // Not copied and not counted by the tracking allocator (memory.h, borrowed buffers).
  // data may be null only for an empty shape.
  static Tensor Borrow(void* data, DType dtype, Shape shape, std::shared_ptr<void> owner);

  DType dtype() const { return dtype_; }
  const Shape& shape() const { return shape_; }
  int rank() const { return shape_.rank(); }
  int64_t NumElements() const { return shape_.NumElements(); }
  size_t NumBytes() const { return static_cast<size_t>(NumElements()) * DTypeSize(dtype_); }
  bool defined() const { return storage_ != nullptr; }

  template <typename T>
  T* data() const {
    return reinterpret_cast<T*>(static_cast<char*>(storage_->data()) + offset_);
  }
  void* raw() const { return storage_ ? static_cast<char*>(storage_->data()) + offset_ : nullptr; }
  const std::shared_ptr<Storage>& storage() const { return storage_; }

  // The same storage viewed with another shape of the same element count.
  Tensor Reshape(Shape shape) const;
  // A view of entries [begin, end) of the outermost dimension (shares storage).
  Tensor Slice(int64_t begin, int64_t end) const;

 private:
  DType dtype_ = DType::kF32;
  Shape shape_;
  std::shared_ptr<Storage> storage_;
  size_t offset_ = 0;  // bytes from the start of storage
};

}  // namespace mxtrain
