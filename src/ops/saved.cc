#include "mxtrain/saved.h"

#include <algorithm>

namespace mxtrain {

SavedTensors& SavedTensors::operator=(SavedTensors&& other) noexcept {
  if (this != &other) {
    Release();
    held_ = std::move(other.held_);
    other.held_.clear();
  }
  return *this;
}

void SavedTensors::Hold(const Tensor& t) {
  if (!t.defined()) return;
  for (const auto& s : held_) {
    if (s == t.storage()) return;  // one hold per buffer per holder
  }
  t.storage()->AddBackwardHold();
  held_.push_back(t.storage());
}

void SavedTensors::Hold(const MxTensor& t) {
  Hold(t.data());
  Hold(t.scales());
}

void SavedTensors::Drop(const Tensor& t) {
  if (!t.defined()) return;
  const auto it = std::find(held_.begin(), held_.end(), t.storage());
  if (it == held_.end()) return;
  (*it)->RemoveBackwardHold();
  held_.erase(it);
}

void SavedTensors::Drop(const MxTensor& t) {
  Drop(t.data());
  Drop(t.scales());
}

void SavedTensors::Release() {
  for (const auto& s : held_) s->RemoveBackwardHold();
  held_.clear();
}

SavedMemory SavedTensors::memory() const {
  SavedMemory m;
  for (const auto& s : held_) {
    const auto bytes = static_cast<int64_t>(s->bytes());
    if (s->persistent()) {
      m.persistent_bytes += bytes;
    } else if (s->category() == MemoryCategory::kSavedForBackward) {
      m.allocated_bytes += bytes;
    } else {
      m.referenced_bytes += bytes;
    }
  }
  return m;
}

}  // namespace mxtrain
