// The one-process communicator, the launcher's world size read from its environment, and
// the argument checks both communicators share (comm_internal.h).
#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <string_view>
#include <system_error>

#include "comm/comm_internal.h"
#include "mxtrain/comm.h"
#include "mxtrain/error.h"

namespace mxtrain {
namespace internal {

void CheckAllToAllCounts(int size, std::span<const int64_t> send) {
  MXTRAIN_CHECK(static_cast<int64_t>(send.size()) == size, "AllToAllCounts: ", send.size(),
                " counts for a communicator of ", size, " ranks; pass one per rank");
}

namespace {

// The sum of one side's counts, each checked; `side` is "send" or "recv".
int64_t CheckedTotal(int size, const void* buffer, std::span<const int64_t> bytes,
                     const char* side) {
  MXTRAIN_CHECK(static_cast<int64_t>(bytes.size()) == size, "AllToAllV: ", bytes.size(), " ", side,
                " counts for a communicator of ", size, " ranks; pass one per rank");
  int64_t total = 0;
  for (int r = 0; r < size; ++r) {
    MXTRAIN_CHECK(bytes[r] >= 0, "AllToAllV: ", side, "_bytes[", r, "] is ", bytes[r],
                  "; byte counts cannot be negative");
    total += bytes[r];
  }
  MXTRAIN_CHECK(total == 0 || buffer != nullptr, "AllToAllV: the ", side,
                " buffer is null but its counts add up to ", total, " bytes");
  return total;
}

}  // namespace

void CheckAllToAllV(int size, const void* send, std::span<const int64_t> send_bytes,
                    const void* recv, std::span<const int64_t> recv_bytes) {
  CheckedTotal(size, send, send_bytes, "send");
  CheckedTotal(size, recv, recv_bytes, "recv");
}

void CheckSplitColor(int color) {
  MXTRAIN_CHECK(color >= 0, "Split: color ", color, " is negative; colors are 0 or more");
}

}  // namespace internal

namespace {

class SingleProcessCommunicator final : public Communicator {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  std::string name() const override { return "single process"; }

  std::vector<int64_t> AllToAllCounts(std::span<const int64_t> send) override {
    internal::CheckAllToAllCounts(1, send);
    return {send.begin(), send.end()};
  }

  void AllToAllV(const void* send, std::span<const int64_t> send_bytes, void* recv,
                 std::span<const int64_t> recv_bytes) override {
    internal::CheckAllToAllV(1, send, send_bytes, recv, recv_bytes);
    MXTRAIN_CHECK(recv_bytes[0] == send_bytes[0], "AllToAllV: rank 0 sends itself ", send_bytes[0],
                  " bytes but expects to receive ", recv_bytes[0]);
    if (send_bytes[0] > 0 && send != recv)
      std::memmove(recv, send, static_cast<size_t>(send_bytes[0]));
  }

  void AllReduceSum(std::span<float> data) override {}  // the sum of one rank's data

  std::vector<uint8_t> AllGather(std::span<const uint8_t> bytes) override {
    return {bytes.begin(), bytes.end()};
  }

  void Barrier() override {}

  std::unique_ptr<Communicator> Split(int color, int key) override {
    internal::CheckSplitColor(color);
    return MakeSingleProcessCommunicator();
  }

  [[noreturn]] void Abort(int code) override {
    std::cout.flush();
    std::cerr.flush();
    std::fflush(nullptr);
    std::exit(code);
  }
};

// The variable's value as a world size: a whole decimal number of at least 1, else 0.
int ParseWorldSize(const char* name) {
  const char* value = std::getenv(name);
  if (value == nullptr) return 0;
  const std::string_view text(value);
  int n = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), n);
  if (ec != std::errc() || end != text.data() + text.size() || n < 1) return 0;
  return n;
}

}  // namespace

std::unique_ptr<Communicator> MakeSingleProcessCommunicator() {
  return std::make_unique<SingleProcessCommunicator>();
}

int LaunchedWorldSize() {
  // Open MPI's mpirun sets OMPI_COMM_WORLD_SIZE; MPICH's Hydra and Slurm's PMI set PMI_SIZE.
  for (const char* name : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE"}) {
    if (const int n = ParseWorldSize(name); n > 0) return n;
  }
  return 1;
}

}  // namespace mxtrain
