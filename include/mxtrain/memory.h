// The tracking allocator: every tensor's storage comes from here, and every figure mxtrain
// reports about memory is read from it (DESIGN.md "Memory accounting").
//
// Storage is reference-counted (std::shared_ptr), so a buffer held by several tensors is
// counted once, for as long as any holder keeps it.
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string_view>

namespace mxtrain {

enum class MemoryCategory : uint8_t {
  kActivation,        // tensors a caller allocates (inputs, outputs)
  kSavedForBackward,  // what a forward pass keeps for its backward pass
  kQuantized,         // MX copies (data and scales) made by the quantizers
  kWeightCache,       // quantized weights held by the weight-quant cache
  kGradient,          // gradients and main_grad buffers
  kWorkspace,         // scratch buffers of kernels
};
inline constexpr int kNumMemoryCategories = 6;
std::string_view Name(MemoryCategory category);

struct MemoryFigures {
  int64_t live_bytes = 0;
  int64_t peak_bytes = 0;
};

struct MemoryReport {
  std::array<MemoryFigures, kNumMemoryCategories> by_category;
  MemoryFigures total;   // bytes held by live tensors (what every memory figure reports)
  int64_t cached_bytes;  // freed buffers kept for reuse, not counted in total
  // Bytes of every buffer a pending backward pass holds (Storage::AddBackwardHold), each
  // counted once however many holders it has and whatever its category: the copies made
  // for backward (kSavedForBackward) and the high-precision tensors a deferred policy
  // references. Parameters' values (Storage::MarkPersistent) are left out: they live for
  // the whole training anyway, so a backward that references them holds nothing extra.
  // An overlay on the categories, not one of them.
  MemoryFigures held_for_backward;
};

// A 64-byte aligned buffer whose bytes are counted under its category while it lives.
//
// Or a borrowed buffer (Tensor::Borrow): memory mxtrain did not allocate (a numpy array, a
// torch tensor), kept alive by `owner` for as long as the Storage lives. Its owner counts
// it, so mxtrain does not: a borrowed buffer is in no figure of MemoryReport (no category,
// not total, not held_for_backward), Recategorize leaves it alone, and a backward pass that
// keeps a reference to it costs nothing here (SavedMemory still lists it as referenced).
class Storage {
 public:
  Storage(size_t bytes, MemoryCategory category);
  Storage(void* data, size_t bytes, std::shared_ptr<void> owner);
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  void* data() const { return data_; }
  size_t bytes() const { return bytes_; }
  MemoryCategory category() const { return category_; }
  bool borrowed() const { return borrowed_; }
  // Moves the bytes to another category (a buffer changes role, e.g. an activation that
  // becomes saved for backward). No effect on a borrowed buffer.
  void Recategorize(MemoryCategory category);

  // A buffer alive for the whole training, whoever else holds it: a Parameter's value
  // (parameter.h). A backward pass that references it costs nothing, so it is left out
  // of MemoryReport::held_for_backward (it still counts in its category and the total).
  // Set before any backward hold; never cleared.
  void MarkPersistent();
  bool persistent() const { return persistent_; }

  // A backward pass holds this buffer (SavedTensors, ops/saved.h): its bytes count in
  // MemoryReport::held_for_backward while at least one hold lasts, unless the buffer is
  // borrowed or persistent.
  void AddBackwardHold();
  void RemoveBackwardHold();
  int backward_holds() const { return backward_holds_.load(std::memory_order_relaxed); }

 private:
  void* data_;
  size_t bytes_;
  MemoryCategory category_;
  bool borrowed_ = false;
  bool persistent_ = false;
  std::shared_ptr<void> owner_;  // borrowed buffers only
  std::atomic<int> backward_holds_{0};
};

// Current figures. Peaks are since the start of the process or the last ResetMemoryPeaks.
MemoryReport ReadMemory();
// Freed buffers of 64 KiB and more are kept, up to this many bytes in all, and handed out
// again for a request of the same size class (eight per power of two, so a buffer serves
// requests up to 12.5% smaller than its class): a training step allocates the same shapes every
// micro-batch, and giving large buffers back to the OS makes every step pay page faults on them
// (measured: dual-axis quantize at 4096x4096 spent over half its time there; a small model's GEMMs,
// whose 100-200 KiB pack buffers malloc trimmed off its heap at every call, 1.1-1.5x slower).
// Default 1 GiB; 0 disables caching. Shrinking the limit releases the excess at once.
void SetMemoryCacheLimit(int64_t bytes);
// Returns every cached buffer to the system.
void ReleaseCachedMemory();
// Sets every peak to the current live figure.
void ResetMemoryPeaks();

}  // namespace mxtrain
