#include "mxtrain/weight_cache.h"

namespace mxtrain {
namespace {

QuantizeOptions CacheOptions(const QuantizeOptions& q) {
  QuantizeOptions o = q;
  o.category = MemoryCategory::kWeightCache;
  return o;
}

}  // namespace

WeightQuantCache& WeightQuantCache::Global() {
  static WeightQuantCache* cache = new WeightQuantCache();  // never destroyed
  return *cache;
}

WeightQuantCache::Key WeightQuantCache::KeyOf(const Parameter& p, BlockAxis axis,
                                              const QuantizeOptions& q) {
  return Key{p.id(), p.version(), axis, q.format, q.rule};
}

const MxTensor* WeightQuantCache::FindLocked(const Key& key) {
  PruneLocked();
  const auto it = entries_.find(key);
  if (it == entries_.end()) return nullptr;
  ++hits_;
  return &it->second.t;
}

void WeightQuantCache::PruneLocked() const {
  for (auto it = entries_.begin(); it != entries_.end();) {
    it = it->second.alive.expired() ? entries_.erase(it) : std::next(it);
  }
}

void WeightQuantCache::StoreLocked(const Parameter& p, const Key& key, MxTensor t) {
  // Entries of older versions of this parameter can never hit again; nor can those of
  // parameters that are gone.
  for (auto it = entries_.begin(); it != entries_.end();) {
    const bool stale =
        (it->first.id == key.id && it->first.version != key.version) || it->second.alive.expired();
    it = stale ? entries_.erase(it) : std::next(it);
  }
  ++misses_;
  entries_.insert_or_assign(key, Entry{std::move(t), p.liveness()});
}

MxTensor WeightQuantCache::Get(const Parameter& p, BlockAxis axis, const QuantizeOptions& q) {
  const Key key = KeyOf(p, axis, q);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (const MxTensor* t = FindLocked(key)) return *t;
  }
  // Quantize outside the lock: it is the long part.
  MxTensor t = axis == BlockAxis::kRowwise ? QuantizeRowwise(p.value(), CacheOptions(q))
                                           : QuantizeColumnwise(p.value(), CacheOptions(q));
  std::lock_guard<std::mutex> lock(mutex_);
  StoreLocked(p, key, t);
  return t;
}

DualMx WeightQuantCache::GetDual(const Parameter& p, const QuantizeOptions& q) {
  const Key row_key = KeyOf(p, BlockAxis::kRowwise, q);
  const Key col_key = KeyOf(p, BlockAxis::kColumnwise, q);
  bool have_any;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    PruneLocked();
    have_any = entries_.count(row_key) > 0 || entries_.count(col_key) > 0;
  }
  // A layout is here already (a deferred layer stored it): take it, make only the other.
  if (have_any) return DualMx{Get(p, BlockAxis::kRowwise, q), Get(p, BlockAxis::kColumnwise, q)};
  DualMx both = QuantizeDual(p.value(), CacheOptions(q));
  std::lock_guard<std::mutex> lock(mutex_);
  StoreLocked(p, row_key, both.rowwise);
  StoreLocked(p, col_key, both.columnwise);
  return both;
}

void WeightQuantCache::Clear() {
  std::lock_guard<std::mutex> lock(mutex_);
  entries_.clear();
}

void WeightQuantCache::Forget(const Parameter& p) {
  std::lock_guard<std::mutex> lock(mutex_);
  for (auto it = entries_.begin(); it != entries_.end();) {
    it = it->first.id == p.id() ? entries_.erase(it) : std::next(it);
  }
}

void WeightQuantCache::ResetStats() {
  std::lock_guard<std::mutex> lock(mutex_);
  hits_ = misses_ = 0;
}

WeightCacheStats WeightQuantCache::stats() const {
  std::lock_guard<std::mutex> lock(mutex_);
  PruneLocked();
  WeightCacheStats s;
  s.hits = hits_;
  s.misses = misses_;
  s.entries = static_cast<int64_t>(entries_.size());
  for (const auto& [key, e] : entries_) s.bytes_held += static_cast<int64_t>(e.t.NumBytes());
  return s;
}

}  // namespace mxtrain
