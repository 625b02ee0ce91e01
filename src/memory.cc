#include "mxtrain/memory.h"

#include <atomic>
#include <cstdlib>
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

Counter& CounterOf(MemoryCategory c) { return g_by_category[static_cast<int>(c)]; }

constexpr size_t kAlignment = 64;

}  // namespace

std::string_view Name(MemoryCategory category) {
  switch (category) {
    case MemoryCategory::kActivation: return "activation";
    case MemoryCategory::kSavedForBackward: return "saved_for_backward";
    case MemoryCategory::kQuantized: return "quantized";
    case MemoryCategory::kWeightCache: return "weight_cache";
    case MemoryCategory::kGradient: return "gradient";
    case MemoryCategory::kWorkspace: return "workspace";
  }
  return "?";
}

Storage::Storage(size_t bytes, MemoryCategory category) : bytes_(bytes), category_(category) {
  // aligned_alloc wants a multiple of the alignment, and at least one byte.
  const size_t padded = ((bytes == 0 ? 1 : bytes) + kAlignment - 1) / kAlignment * kAlignment;
  data_ = std::aligned_alloc(kAlignment, padded);
  if (data_ == nullptr) Fail("out of memory allocating ", bytes, " bytes");
  CounterOf(category_).Add(static_cast<int64_t>(bytes_));
  g_total.Add(static_cast<int64_t>(bytes_));
}

Storage::~Storage() {
  std::free(data_);
  CounterOf(category_).Sub(static_cast<int64_t>(bytes_));
  g_total.Sub(static_cast<int64_t>(bytes_));
}

void Storage::Recategorize(MemoryCategory category) {
  if (category == category_) return;
  CounterOf(category_).Sub(static_cast<int64_t>(bytes_));
  CounterOf(category).Add(static_cast<int64_t>(bytes_));
  category_ = category;
}

MemoryReport ReadMemory() {
  MemoryReport report;
  for (int i = 0; i < kNumMemoryCategories; ++i) report.by_category[i] = g_by_category[i].Read();
  report.total = g_total.Read();
  return report;
}

void ResetMemoryPeaks() {
  for (Counter& c : g_by_category) c.ResetPeak();
  g_total.ResetPeak();
}

}  // namespace mxtrain
