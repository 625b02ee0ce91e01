// The token exchange of expert parallelism (expert_exchange.h).
#include "nn/expert_exchange.h"

#include <cstring>
#include <numeric>

#include "mxtrain/error.h"

namespace mxtrain::nn {

ExpertRoute ExchangeCounts(Communicator& group, const Permutation& perm, int64_t local_experts) {
  const int w = group.size();
  const auto e = static_cast<int64_t>(perm.counts.size());
  MXTRAIN_CHECK(local_experts >= 1 && e == local_experts * w, "expert exchange: ", e,
                " experts do not split into ", w, " ranks of ", local_experts);
  const std::vector<uint8_t> all = group.AllGather(std::span<const uint8_t>(
      reinterpret_cast<const uint8_t*>(perm.counts.data()), perm.counts.size() * sizeof(int64_t)));
  std::vector<int64_t> counts(static_cast<size_t>(w * e));  // [sender][global expert]
  std::memcpy(counts.data(), all.data(), all.size());
  ExpertRoute r;
  r.local_experts = local_experts;
  r.send_rows.assign(static_cast<size_t>(w), 0);
  r.recv_rows.assign(static_cast<size_t>(w), 0);
  r.recv_begin.assign(static_cast<size_t>(w), 0);
  const int me = group.rank();
  for (int d = 0; d < w; ++d) {
    for (int64_t l = 0; l < local_experts; ++l)
      r.send_rows[d] += perm.counts[d * local_experts + l];
  }
  for (int s = 0; s < w; ++s) {
    const int64_t* mine = counts.data() + s * e + me * local_experts;  // sender s, my experts
    const std::vector<int64_t> c(mine, mine + local_experts);
    r.recv_rows[s] = std::accumulate(c.begin(), c.end(), int64_t{0});
    r.recv_begin[s] = r.recv_total;
    r.recv_total += r.recv_rows[s];
    r.recv_groups.push_back(GroupList::Make(c, GroupListType::kCounts, r.recv_rows[s]));
  }
  return r;
}

Tensor SendRows(Communicator& group, const Tensor& t, const ExpertRoute& route, bool to_experts,
                WireBytes* bytes) {
  MXTRAIN_CHECK(t.rank() == 2, "expert exchange: rows must be 2-D, got ", t.shape().ToString());
  const std::vector<int64_t>& send_rows = to_experts ? route.send_rows : route.recv_rows;
  const std::vector<int64_t>& recv_rows = to_experts ? route.recv_rows : route.send_rows;
  const int64_t cols = t.shape()[1];
  const int64_t row_bytes = cols * static_cast<int64_t>(DTypeSize(t.dtype()));
  const int64_t sending = std::accumulate(send_rows.begin(), send_rows.end(), int64_t{0});
  MXTRAIN_CHECK(sending == t.shape()[0], "expert exchange: ", t.shape()[0], " rows to send, the ",
                "route says ", sending);
  const int64_t total = std::accumulate(recv_rows.begin(), recv_rows.end(), int64_t{0});
  Tensor out = Tensor::Empty(t.dtype(), {total, cols}, MemoryCategory::kActivation);
  std::vector<int64_t> send_bytes(send_rows.size()), recv_bytes(recv_rows.size());
  for (size_t i = 0; i < send_rows.size(); ++i) {
    send_bytes[i] = send_rows[i] * row_bytes;
    recv_bytes[i] = recv_rows[i] * row_bytes;
    if (bytes != nullptr) {
      (static_cast<int>(i) == group.rank() ? bytes->local : bytes->remote) += send_bytes[i];
    }
  }
  group.AllToAllV(t.NumBytes() > 0 ? t.raw() : nullptr, send_bytes,
                  out.NumBytes() > 0 ? out.raw() : nullptr, recv_bytes);
  return out;
}

MxTensor SendRows(Communicator& group, const MxTensor& t, const ExpertRoute& route, bool to_experts,
                  WireBytes* bytes) {
  MXTRAIN_CHECK(t.axis() == BlockAxis::kRowwise && t.shape().rank() == 2,
                "expert exchange: MXFP8 rows must be 2-D rowwise");
  Tensor data = SendRows(group, t.data(), route, to_experts, bytes);
  Tensor scales = SendRows(group, t.scales(), route, to_experts, bytes);
  return MxTensor(std::move(data), std::move(scales), t.format(), t.rule(), BlockAxis::kRowwise);
}

}  // namespace mxtrain::nn
