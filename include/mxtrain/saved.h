// SavedTensors: what a forward pass keeps for its backward pass, held so that the memory
// accounting sees it (memory.h, MemoryReport::held_for_backward).
//
// Each held buffer counts once however many holders it has. memory() splits the held
// bytes the way the save policies trade them: buffers made for the backward (category
// kSavedForBackward: the columnwise FP8 copies of the "quantized" policy, the bf16
// baseline's operand casts) and buffers of other categories the backward merely keeps
// alive (the high-precision input a "deferred" policy references, a cached weight). The
// second costs nothing extra when its owner keeps the buffer anyway, and a parameter's
// value (Storage::persistent) always is: it is counted apart, and not in
// MemoryReport::held_for_backward.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "mxtrain/mx_tensor.h"
#include "mxtrain/tensor.h"

namespace mxtrain {

struct SavedMemory {
  int64_t allocated_bytes = 0;   // held buffers of category kSavedForBackward
  int64_t referenced_bytes = 0;  // held buffers of any other category, not persistent
  int64_t persistent_bytes = 0;  // held parameter values (alive for the training anyway)
};

class SavedTensors {
 public:
  SavedTensors() = default;
  SavedTensors(SavedTensors&& other) noexcept = default;
  SavedTensors& operator=(SavedTensors&& other) noexcept;
  SavedTensors(const SavedTensors&) = delete;
  SavedTensors& operator=(const SavedTensors&) = delete;
  ~SavedTensors() { Release(); }

  // Holds t's storage (and an MX tensor's data and scales) until Release.
  void Hold(const Tensor& t);
  void Hold(const MxTensor& t);
  // Drops the hold on t's storage (an MX tensor's data and scales), if held here: the
  // backward has read it for the last time.
  void Drop(const Tensor& t);
  void Drop(const MxTensor& t);
  // Drops every hold held here.
  void Release();
  // Held bytes over distinct buffers.
  SavedMemory memory() const;

 private:
  std::vector<std::shared_ptr<Storage>> held_;
};

}  // namespace mxtrain
