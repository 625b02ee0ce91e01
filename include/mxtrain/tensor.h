// Tensor: a dense, C-contiguous array of fp32, bf16 (as uint16 bits) or bytes, with shared
// storage from the tracking allocator (memory.h). Copying a Tensor shares its storage.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include "mxtrain/error.h"
#include "mxtrain/memory.h"

namespace mxtrain {

enum class DType : uint8_t { kF32, kBF16, kU8 };
size_t DTypeSize(DType dtype);
std::string_view Name(DType dtype);

// The element type of each dtype as Tensor's typed accessors take it: float, bf16 as its
// uint16_t bits, uint8_t (E4M3 / E5M2 codes, E8M0 scales).
template <typename T>
constexpr DType DTypeOf() {
  static_assert(
      std::is_same_v<T, float> || std::is_same_v<T, uint16_t> || std::is_same_v<T, uint8_t>,
      "a Tensor holds float, uint16_t (bf16 bits) or uint8_t elements");
  if constexpr (std::is_same_v<T, float>) {
    return DType::kF32;
  } else if constexpr (std::is_same_v<T, uint16_t>) {
    return DType::kBF16;
  } else {
    return DType::kU8;
  }
}

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

  // The elements, typed: T must be the dtype's element type (DTypeOf; checked in debug
  // builds), and the tensor defined. As in ATen (const_data_ptr / mutable_data_ptr), a
  // const Tensor is a handle, not a promise about its storage: const_data says the caller
  // only reads, mutable_data that it writes; data<T>() is mutable_data<T>(). For bytes
  // whatever the dtype, use raw().
  template <typename T>
  const T* const_data() const {
    return mutable_data<T>();
  }
  template <typename T>
  T* mutable_data() const {
    MXTRAIN_DCHECK(storage_ != nullptr);
    MXTRAIN_DCHECK(dtype_ == DTypeOf<T>());
    return reinterpret_cast<T*>(static_cast<char*>(storage_->data()) + offset_);
  }
  template <typename T>
  T* data() const {
    return mutable_data<T>();
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
