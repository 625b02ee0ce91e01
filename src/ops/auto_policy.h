// Internal: what the auto save policy (recipe.h, linear.h "The auto policy") knows about a
// layer's input: whether something besides the layer keeps it alive until the backward,
// so that referencing it (deferred) costs nothing while a columnwise copy (quantized)
// costs 1.03 bytes per element.
#pragma once

#include <atomic>
#include <memory>

#include "mxtrain/memory.h"

namespace mxtrain::internal {

// One layer's record (LinearParams owns it; the one piece of state a layer learns), read by
// every later forward:
//   consumers    the most auto layers seen taking this layer's input buffer in one pass
//                (Q, K and V over one normalized activation: 3)
//   input_alive  the input was seen alive at this layer's backward with nothing of this
//                layer holding it (its caller keeps it)
struct AutoRecord {
  std::atomic<int> consumers{1};
  std::atomic<bool> input_alive{false};
};

// Called by the forward of a layer whose input policy is auto, with its input's buffer:
// counts the auto layers that took this buffer while it lived, this one included, and
// raises every one's record to that count (so the earlier ones learn of the later ones
// for their next forward, and this one's record holds at least the count now).
void NoteAutoConsumer(const std::shared_ptr<Storage>& input,
                      const std::shared_ptr<AutoRecord>& record);

}  // namespace mxtrain::internal
