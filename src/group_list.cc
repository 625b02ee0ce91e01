#include "mxtrain/group_list.h"

#include "mxtrain/error.h"
#include "mxtrain/mx_tensor.h"

namespace mxtrain {

GroupListType ParseGroupListType(std::string_view name) {
  if (name == "cumsum") return GroupListType::kCumsum;
  if (name == "counts") return GroupListType::kCounts;
  Fail("unknown group list type '", name, "' (expected cumsum or counts)");
}

GroupList GroupList::Make(std::span<const int64_t> values, GroupListType type, int64_t m) {
  MXTRAIN_CHECK(!values.empty(), "group list is empty");
  GroupList g;
  g.ends_.reserve(values.size());
  int64_t previous = 0;
  for (size_t i = 0; i < values.size(); ++i) {
    const int64_t v = values[i];
    if (type == GroupListType::kCumsum) {
      MXTRAIN_CHECK(v >= previous, "group list is not non-decreasing: entry ", i, " is ", v,
                    " after ", previous);
      previous = v;
    } else {
      MXTRAIN_CHECK(v >= 0, "group list has a negative count: entry ", i, " is ", v);
      MXTRAIN_CHECK(v <= m - previous, "group counts sum to more than M = ", m, " at entry ", i);
      previous += v;
    }
    g.ends_.push_back(previous);
  }
  if (type == GroupListType::kCumsum) {
    MXTRAIN_CHECK(previous == m, "group list ends at ", previous, ", not at M = ", m);
  } else {
    MXTRAIN_CHECK(previous == m, "group counts sum to ", previous, ", not to M = ", m);
  }
  g.scale_row_begin_.assign(1, 0);
  for (int i = 0; i < g.num_groups(); ++i) {
    g.scale_row_begin_.push_back(g.scale_row_begin_.back() + CeilDiv(g.size(i), kMxBlock));
  }
  return g;
}

GroupList GroupList::Uniform(int64_t num_groups, int64_t m) {
  std::vector<int64_t> counts(static_cast<size_t>(num_groups), m);
  return Make(counts, GroupListType::kCounts, num_groups * m);
}

int64_t GroupList::ScaleRows() const { return scale_row_begin_.back(); }

std::string GroupList::ToString() const {
  std::string s;
  for (size_t i = 0; i < ends_.size(); ++i) {
    if (i) s += ",";
    s += std::to_string(ends_[i]);
  }
  return s;
}

}  // namespace mxtrain
