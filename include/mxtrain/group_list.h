// GroupList: how M rows (tokens sorted by expert) split into consecutive groups, given the
// way MindSpeed and torch_npu do (group_list_type 0: cumulative ends; 1: counts).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace mxtrain {

enum class GroupListType : uint8_t { kCumsum = 0, kCounts = 1 };
GroupListType ParseGroupListType(std::string_view name);  // "cumsum" | "counts"

class GroupList {
 public:
  GroupList() = default;
  // Validates the list against m rows (NUMERICS.md §6): cumulative ends must be
  // non-negative, non-decreasing and end at m; counts must be non-negative and sum to m.
  // At least one group. Throws Error naming the first offending entry.
  static GroupList Make(std::span<const int64_t> values, GroupListType type, int64_t m);
  // G groups of equal size m (used to view [B, M, K] as B groups of M rows).
  static GroupList Uniform(int64_t num_groups, int64_t m);

  int num_groups() const { return static_cast<int>(ends_.size()); }
  int64_t begin(int g) const { return g == 0 ? 0 : ends_[g - 1]; }
  int64_t end(int g) const { return ends_[g]; }
  int64_t size(int g) const { return end(g) - begin(g); }
  int64_t total_rows() const { return ends_.empty() ? 0 : ends_.back(); }
  // Rows of the token-grouped columnwise scale: sum_g ceil(m_g / 32).
  int64_t ScaleRows() const;
  // First scale row of group g.
  int64_t ScaleRowBegin(int g) const { return scale_row_begin_[g]; }
  const std::vector<int64_t>& ends() const { return ends_; }
  bool operator==(const GroupList& other) const { return ends_ == other.ends_; }
  std::string ToString() const;

 private:
  std::vector<int64_t> ends_;
  std::vector<int64_t> scale_row_begin_;  // num_groups + 1 entries
};

}  // namespace mxtrain
