#include "mxtrain/memory.h"

#include <atomic>
#include <cstdlib>
#include <iterator>
#include <list>
#include <map>
#include <mutex>
#include <new>

#include "mxtrain/error.h"

namespace mxtrain {
namespace {

struct Counter {
  std::atomic<int64_t> live{0};
  std::atomic<int64_t> peak{0};

  void Add(int64_t bytes) {
    const int64_t now = live.fetch_add(bytes, std::memory_order_relaxed) + bytes;
    int64_t seen = peak.load(std::memory_order_relaxed);
    while (now > seen && !peak.compare_exchange_weak(seen, now, std::memory_order_relaxed)) {
    }
  }
  void Sub(int64_t bytes) { live.fetch_sub(bytes, std::memory_order_relaxed); }
  MemoryFigures Read() const { return {live.load(), peak.load()}; }
  void ResetPeak() { peak.store(live.load()); }
};

Counter g_by_category[kNumMemoryCategories];
Counter g_total;
Counter g_held_for_backward;

Counter& CounterOf(MemoryCategory c) { return g_by_category[static_cast<int>(c)]; }

constexpr size_t kAlignment = 64;
// From here on freed buffers are cached. Below it they go back to malloc, whose heap top
// is trimmed whenever its free space passes a threshold (128 KiB by default, raised to
// twice the largest freed mmap chunk): a GEMM's pack buffers of 100-200 KiB, freed above
// a bf16 output allocated before them, were trimmed and page-faulted back at every call
// (small model's GEMMs 1.1-1.5x slower, Zen 4).
constexpr size_t kCacheMinBytes = 64 << 10;

// Large freed buffers by padded size, for reuse (SetMemoryCacheLimit). Least recently
// freed go first when the limit is reached, so the sizes in current use stay (a benchmark
// of many shapes would otherwise fill the cache with sizes no longer asked for). A buffer
// is found by size in a multimap (equal keys keep their insertion order: the newest of a
// size is the last of them) and evicted from the front of a list in the order freed.
class BufferCache {
 public:
  void* Take(size_t padded) {
    if (padded < kCacheMinBytes) return nullptr;
    std::lock_guard<std::mutex> lock(mutex_);
    const auto [first, last] = by_size_.equal_range(padded);
    if (first == last) return nullptr;
    const auto newest = std::prev(last);
    void* p = newest->second->second;
    order_.erase(newest->second);
    by_size_.erase(newest);
    cached_ -= static_cast<int64_t>(padded);
    return p;
  }
  // Keeps p (newest), evicting the oldest buffers to stay under the limit; frees p if it
  // alone exceeds the limit.
  void Give(void* p, size_t padded) {
    if (padded >= kCacheMinBytes) {
      std::lock_guard<std::mutex> lock(mutex_);
      if (static_cast<int64_t>(padded) <= limit_) {
        while (cached_ + static_cast<int64_t>(padded) > limit_) EvictOldestLocked();
        order_.emplace_back(padded, p);
        by_size_.emplace(padded, std::prev(order_.end()));
        cached_ += static_cast<int64_t>(padded);
        return;
      }
    }
    std::free(p);
  }
  void SetLimit(int64_t limit) {
    std::lock_guard<std::mutex> lock(mutex_);
    limit_ = limit;
    while (cached_ > limit_) EvictOldestLocked();
  }
  int64_t cached() {
    std::lock_guard<std::mutex> lock(mutex_);
    return cached_;
  }
  int64_t limit() {
    std::lock_guard<std::mutex> lock(mutex_);
    return limit_;
  }

 private:
  // Cached buffers (padded size, memory), oldest first, and an index by size into it.
  using Order = std::list<std::pair<size_t, void*>>;
  using Index = std::multimap<size_t, Order::iterator>;

  // The oldest buffer is also the oldest of its size, which the index lists first of them.
  void EvictOldestLocked() {
    const auto [size, p] = order_.front();
    const Index::iterator oldest = by_size_.lower_bound(size);
    MXTRAIN_DCHECK(oldest != by_size_.end() && oldest->second == order_.begin());
    cached_ -= static_cast<int64_t>(size);
    std::free(p);
    by_size_.erase(oldest);
    order_.pop_front();
  }

  std::mutex mutex_;
  Order order_;
  Index by_size_;
  int64_t cached_ = 0;
  int64_t limit_ = int64_t{1} << 30;
};

BufferCache& Cache() {
  static BufferCache* cache = new BufferCache();  // never destroyed: storages may outlive main
  return *cache;
}

// The allocation size of a buffer of `bytes`. aligned_alloc wants a multiple of the
// alignment, and at least one byte. Cacheable sizes are rounded up to one of eight classes
// per power of two (at most 12.5% more), so that a request a little smaller or larger than
// a freed buffer still reuses it: mixture-of-experts groups change size every micro-batch,
// and with exact sizes the cache filled with sizes asked for once.
size_t Padded(size_t bytes) {
  const size_t aligned = ((bytes == 0 ? 1 : bytes) + kAlignment - 1) / kAlignment * kAlignment;
  if (aligned < kCacheMinBytes) return aligned;
  const int log2 = 63 - __builtin_clzll(aligned);
  const size_t step = size_t{1} << (log2 - 3);
  return (aligned + step - 1) / step * step;
}

}  // namespace

std::string_view Name(MemoryCategory category) {
  switch (category) {
    case MemoryCategory::kActivation:
      return "activation";
    case MemoryCategory::kSavedForBackward:
      return "saved_for_backward";
    case MemoryCategory::kQuantized:
      return "quantized";
    case MemoryCategory::kWeightCache:
      return "weight_cache";
    case MemoryCategory::kGradient:
      return "gradient";
    case MemoryCategory::kWorkspace:
      return "workspace";
  }
  return "?";
}

Storage::Storage(size_t bytes, MemoryCategory category) : bytes_(bytes), category_(category) {
  const size_t padded = Padded(bytes);
  data_ = Cache().Take(padded);
  if (data_ == nullptr) data_ = std::aligned_alloc(kAlignment, padded);
  if (data_ == nullptr) Fail("out of memory allocating ", bytes, " bytes");
  CounterOf(category_).Add(static_cast<int64_t>(bytes_));
  g_total.Add(static_cast<int64_t>(bytes_));
}

Storage::Storage(void* data, size_t bytes, std::shared_ptr<void> owner)
    : data_(data),
      bytes_(bytes),
      category_(MemoryCategory::kActivation),
      borrowed_(true),
      owner_(std::move(owner)) {}

Storage::~Storage() {
  MXTRAIN_DCHECK(backward_holds_.load() == 0);  // a hold owns a reference
  if (borrowed_) return;                        // owner_ releases the buffer
  Cache().Give(data_, Padded(bytes_));
  CounterOf(category_).Sub(static_cast<int64_t>(bytes_));
  g_total.Sub(static_cast<int64_t>(bytes_));
}

void Storage::Recategorize(MemoryCategory category) {
  if (borrowed_ || category == category_) return;
  CounterOf(category_).Sub(static_cast<int64_t>(bytes_));
  CounterOf(category).Add(static_cast<int64_t>(bytes_));
  category_ = category;
}

void Storage::MarkPersistent() {
  MXTRAIN_DCHECK(backward_holds_.load() == 0);  // the held figure counted it at the hold
  persistent_ = true;
}

void Storage::AddBackwardHold() {
  if (backward_holds_.fetch_add(1, std::memory_order_relaxed) == 0 && !borrowed_ && !persistent_) {
    g_held_for_backward.Add(static_cast<int64_t>(bytes_));
  }
}

void Storage::RemoveBackwardHold() {
  const int before = backward_holds_.fetch_sub(1, std::memory_order_relaxed);
  MXTRAIN_DCHECK(before > 0);
  if (before == 1 && !borrowed_ && !persistent_) {
    g_held_for_backward.Sub(static_cast<int64_t>(bytes_));
  }
}

MemoryReport ReadMemory() {
  MemoryReport report;
  for (int i = 0; i < kNumMemoryCategories; ++i) report.by_category[i] = g_by_category[i].Read();
  report.total = g_total.Read();
  report.cached_bytes = Cache().cached();
  report.held_for_backward = g_held_for_backward.Read();
  return report;
}

void SetMemoryCacheLimit(int64_t bytes) { Cache().SetLimit(bytes < 0 ? 0 : bytes); }

void ReleaseCachedMemory() {
  const int64_t limit = Cache().limit();
  Cache().SetLimit(0);
  Cache().SetLimit(limit);
}

void ResetMemoryPeaks() {
  for (Counter& c : g_by_category) c.ResetPeak();
  g_total.ResetPeak();
  g_held_for_backward.ResetPeak();
}

}  // namespace mxtrain
