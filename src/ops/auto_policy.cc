#include "ops/auto_policy.h"

#include <mutex>
#include <unordered_map>
#include <vector>

namespace mxtrain::internal {
namespace {

// Live input buffers of auto layers and the layers that took each. An entry whose buffer
// is gone is stale (its address may come back for another buffer) and is replaced or
// pruned; the map stays as small as the set of live activations.
struct Consumers {
  std::weak_ptr<Storage> buffer;
  std::vector<std::weak_ptr<AutoRecord>> records;
};

std::mutex g_mutex;
std::unordered_map<const Storage*, Consumers>& Registry() {
  static auto* registry = new std::unordered_map<const Storage*, Consumers>();
  return *registry;
}

}  // namespace

void NoteAutoConsumer(const std::shared_ptr<Storage>& input,
                      const std::shared_ptr<AutoRecord>& record) {
  std::lock_guard<std::mutex> lock(g_mutex);
  auto& registry = Registry();
  if (registry.size() >= 256) {
    for (auto it = registry.begin(); it != registry.end();) {
      it = it->second.buffer.expired() ? registry.erase(it) : std::next(it);
    }
  }
  Consumers& c = registry[input.get()];
  if (c.buffer.lock() != input) c = Consumers{input, {}};
  std::vector<std::shared_ptr<AutoRecord>> live;
  bool listed = false;
  for (const std::weak_ptr<AutoRecord>& w : c.records) {
    if (std::shared_ptr<AutoRecord> r = w.lock()) {
      listed = listed || r == record;
      live.push_back(std::move(r));
    }
  }
  if (!listed) {
    c.records.push_back(record);
    live.push_back(record);
  }
  const int n = static_cast<int>(live.size());
  for (const std::shared_ptr<AutoRecord>& r : live) {
    int seen = r->consumers.load(std::memory_order_relaxed);
    while (seen < n && !r->consumers.compare_exchange_weak(seen, n, std::memory_order_relaxed)) {
    }
  }
}

}  // namespace mxtrain::internal
