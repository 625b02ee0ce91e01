// Internal: the token exchange of expert parallelism (docs/decisions.md "Expert
// parallelism"). A rank's tokens, sorted by global expert (nn::Permutation), go to the ranks
// that hold their experts: rank d holds experts [d * L, (d + 1) * L), so the rows for d are
// one contiguous range of the sorted rows. Rows arrive sender-major, and within one
// sender's range sorted by local expert: the receiver runs its experts once per sender, so
// that no quantization block or GEMM sum mixes two senders' tokens.
//
// Counts travel first (every rank learns every rank's counts: W x E integers), then the rows
// as bytes: bf16 / fp32 rows, or an MxTensor's codes and scales (1 + 1/32 bytes per element
// against 2 for bf16). Only the communicator sees the bytes; the layers see tensors.
#pragma once

#include <cstdint>
#include <vector>

#include "mxtrain/comm.h"
#include "mxtrain/group_list.h"
#include "mxtrain/mx_tensor.h"
#include "mxtrain/tensor.h"
#include "mxtrain/train/nn.h"

namespace mxtrain::nn {

// Where one micro-batch's rows of one MoE block go and come from.
struct ExpertRoute {
  std::vector<int64_t> send_rows;      // [W] rows this rank sends to each rank
  std::vector<int64_t> recv_rows;      // [W] rows it receives from each rank
  std::vector<int64_t> recv_begin;     // [W] first received row of each sender
  std::vector<GroupList> recv_groups;  // [W] per sender: its rows per local expert
  int64_t recv_total = 0;
  int64_t local_experts = 0;
};

// Collective over `group`: every rank passes the permutation of its own tokens over the
// W * local_experts global experts.
ExpertRoute ExchangeCounts(Communicator& group, const Permutation& perm, int64_t local_experts);

// Bytes to other ranks (the wire), and to this rank itself (a copy), of one exchange.
struct WireBytes {
  int64_t remote = 0;
  int64_t local = 0;
};

// Collective: the rows of a 2-D tensor to the experts' ranks (to_experts: t holds this
// rank's sorted rows, the result the received rows) or back (t holds the received rows in
// arrival order, the result this rank's sorted rows). Adds what it sent to *bytes.
Tensor SendRows(Communicator& group, const Tensor& t, const ExpertRoute& route, bool to_experts,
                WireBytes* bytes);
// Rowwise MXFP8 rows likewise: codes and scales, as the sender quantized them.
MxTensor SendRows(Communicator& group, const MxTensor& t, const ExpertRoute& route, bool to_experts,
                  WireBytes* bytes);

}  // namespace mxtrain::nn
