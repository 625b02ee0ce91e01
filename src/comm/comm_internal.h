// Argument checks shared by the one-process and the MPI communicator (comm.h), so that both
// refuse the same calls with the same Error. Each check looks at this rank's arguments only,
// before any message is sent: a call that every rank gets wrong the same way fails on every
// rank, and none is left waiting in a collective.
#pragma once

#include <cstdint>
#include <span>

namespace mxtrain::internal {

// AllToAllCounts: one count per rank of a communicator of `size` ranks.
void CheckAllToAllCounts(int size, std::span<const int64_t> send);

// AllToAllV: one byte count per rank on each side, none negative, and a buffer on each side
// whose total is not zero. Throws Error naming the values.
void CheckAllToAllV(int size, const void* send, std::span<const int64_t> send_bytes,
                    const void* recv, std::span<const int64_t> recv_bytes);

// Split: MPI_Comm_split's colors, less MPI_UNDEFINED (every rank gets a communicator).
void CheckSplitColor(int color);

}  // namespace mxtrain::internal
