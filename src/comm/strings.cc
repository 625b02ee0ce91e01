// AllGatherStrings (comm.h): the lengths first, then every string padded to the longest.
#include <algorithm>
#include <cstring>

#include "mxtrain/comm.h"

namespace mxtrain {

std::vector<std::string> AllGatherStrings(Communicator& comm, const std::string& s) {
  const int64_t len = static_cast<int64_t>(s.size());
  const std::vector<uint8_t> lens =
      comm.AllGather(std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(&len), sizeof len));
  std::vector<int64_t> each(static_cast<size_t>(comm.size()));
  std::memcpy(each.data(), lens.data(), lens.size());
  const int64_t longest = *std::max_element(each.begin(), each.end());
  std::vector<uint8_t> mine(static_cast<size_t>(longest), 0);
  if (!s.empty()) std::memcpy(mine.data(), s.data(), s.size());
  const std::vector<uint8_t> all = comm.AllGather(mine);
  std::vector<std::string> out;
  for (int r = 0; r < comm.size(); ++r) {
    if (each[r] == 0) {
      out.emplace_back();
      continue;
    }
    out.emplace_back(reinterpret_cast<const char*>(all.data()) + r * longest,
                     static_cast<size_t>(each[r]));
  }
  return out;
}

}  // namespace mxtrain
