// WeightQuantCache: quantized weights for one optimizer step (DESIGN.md "Weight-quant
// cache"; MindSpeed's --fp8-reuse-quantized-weight). With gradient accumulation every
// micro-batch multiplies by the same weights, so each is quantized at most once per layout
// per step.
//
// Key: the parameter's identity and version (parameter.h), the blocked axis, the element
// format and the scale rule. A layout never hits another layout's entry; an in-place update
// (MarkModified) changes the version, so the old entries can never hit again and are
// dropped when the new version is first stored. Entries of a destroyed parameter are
// dropped at the next store, lookup or stats() (the cache watches Parameter::liveness()),
// so the cache holds at most one version per live parameter and layout, whether or not
// the optimizer step calls Clear(), as it should.
//
// Entries are MX tensors of category kWeightCache. A backward that took an entry keeps
// its own reference, so Clear() never pulls data from under a pending backward; and the
// cache holds no high-precision weight, so releasing one is never its decision.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <tuple>

#include "mxtrain/mx_tensor.h"
#include "mxtrain/parameter.h"
#include "mxtrain/quantize.h"

namespace mxtrain {

struct WeightCacheStats {
  int64_t hits = 0;        // layouts served from the cache
  int64_t misses = 0;      // layouts quantized and stored
  int64_t entries = 0;     // layouts held now
  int64_t bytes_held = 0;  // their data and scale bytes
};

class WeightQuantCache {
 public:
  WeightQuantCache() = default;
  WeightQuantCache(const WeightQuantCache&) = delete;
  WeightQuantCache& operator=(const WeightQuantCache&) = delete;

  // The process-wide cache that ops use when their options name none.
  static WeightQuantCache& Global();

  // p's value in layout `axis` (rowwise or columnwise), quantized with q's format and
  // rule; from the cache when present, else quantized now and stored.
  MxTensor Get(const Parameter& p, BlockAxis axis, const QuantizeOptions& q);
  // Both layouts; when both are missing, one dual-axis quantization makes them.
  DualMx GetDual(const Parameter& p, const QuantizeOptions& q);

  // Drops every entry (the optimizer step). Hit and miss counts stay.
  void Clear();
  // Drops p's entries (its value changed in a way its version does not show).
  void Forget(const Parameter& p);
  void ResetStats();
  WeightCacheStats stats() const;

 private:
  struct Key {
    uint64_t id;
    uint64_t version;
    BlockAxis axis;
    ElementFormat format;
    ScaleRule rule;
    auto Tie() const { return std::tie(id, version, axis, format, rule); }
    bool operator<(const Key& o) const { return Tie() < o.Tie(); }
  };
  struct Entry {
    MxTensor t;
    std::weak_ptr<const void> alive;  // the parameter's liveness()
  };
  static Key KeyOf(const Parameter& p, BlockAxis axis, const QuantizeOptions& q);
  // The entry for key, or nullptr. Counts a hit when found.
  const MxTensor* FindLocked(const Key& key);
  void StoreLocked(const Parameter& p, const Key& key, MxTensor t);
  // Drops the entries of destroyed parameters.
  void PruneLocked() const;

  mutable std::mutex mutex_;
  mutable std::map<Key, Entry> entries_;
  int64_t hits_ = 0;
  int64_t misses_ = 0;
};

}  // namespace mxtrain
