// The MPI communicator (builds with MXTRAIN_WITH_MPI): comm.h's collectives over an
// MPI_Comm, through MPI's C API. Every MPI call returns its error code
// (MPI_ERRORS_RETURN) and a failure becomes an Error naming the collective and MPI's
// message. MPI is initialized by the first WorldCommunicator() and finalized at exit.
#include <mpi.h>

#include <algorithm>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <mutex>
#include <string>
#include <vector>

#include "comm/comm_internal.h"
#include "mxtrain/comm.h"
#include "mxtrain/error.h"

namespace mxtrain {
namespace {

// Throws Error when an MPI call failed: "AllToAllV: MPI_Alltoallv failed: <MPI's text>".
void CheckMpi(int rc, const char* collective, const char* call) {
  if (rc == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  if (MPI_Error_string(rc, text, &len) != MPI_SUCCESS) {
    Fail(collective, ": ", call, " failed with MPI error code ", rc);
  }
  Fail(collective, ": ", call, " failed: ", std::string(text, static_cast<size_t>(len)));
}

// AllReduceSum gathers at most this many floats from all ranks together per round (16 MiB),
// and at most kMaxChunkFloats (4 MiB) from each rank.
constexpr int64_t kGatherFloats = int64_t{1} << 22;
constexpr int64_t kMaxChunkFloats = int64_t{1} << 20;
constexpr int64_t kMinChunkFloats = int64_t{1} << 12;

// MPI counts and displacements are int: byte counts and their running sums over 2 GiB are
// refused rather than chunked (one exchange of the training loop moves far less).
void ToMpiCounts(std::span<const int64_t> bytes, const char* side, std::vector<int>& counts,
                 std::vector<int>& displs) {
  counts.resize(bytes.size());
  displs.resize(bytes.size());
  int64_t offset = 0;
  for (size_t r = 0; r < bytes.size(); ++r) {
    MXTRAIN_CHECK(bytes[r] <= INT_MAX && offset <= INT_MAX, "AllToAllV: ", side, "_bytes[", r,
                  "] = ", bytes[r], " at byte offset ", offset,
                  " is past MPI's int counts (at most ", INT_MAX, " bytes per exchange)");
    counts[r] = static_cast<int>(bytes[r]);
    displs[r] = static_cast<int>(offset);
    offset += bytes[r];
  }
}

class MpiCommunicator final : public Communicator {
 public:
  // Owns `comm` (frees it when destroyed) unless it is MPI_COMM_WORLD.
  explicit MpiCommunicator(MPI_Comm comm) : comm_(comm) {
    CheckMpi(MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN), "Communicator",
             "MPI_Comm_set_errhandler");
    CheckMpi(MPI_Comm_rank(comm_, &rank_), "Communicator", "MPI_Comm_rank");
    CheckMpi(MPI_Comm_size(comm_, &size_), "Communicator", "MPI_Comm_size");
  }
  MpiCommunicator(const MpiCommunicator&) = delete;
  MpiCommunicator& operator=(const MpiCommunicator&) = delete;

  ~MpiCommunicator() override {
    int finalized = 0;
    MPI_Finalized(&finalized);
    // After MPI_Finalize (a communicator destroyed at exit) there is nothing left to free.
    if (comm_ != MPI_COMM_WORLD && !finalized) MPI_Comm_free(&comm_);
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }

  std::string name() const override {
    // Open MPI: "Open MPI v4.1.4, package: Debian OpenMPI, ident: 4.1.4, ...", MPICH:
    // "MPICH Version: 4.0\n...": the first line up to its first comma.
    char text[MPI_MAX_LIBRARY_VERSION_STRING];
    int len = 0;
    CheckMpi(MPI_Get_library_version(text, &len), "name", "MPI_Get_library_version");
    std::string version(text, static_cast<size_t>(len));
    version = version.substr(0, version.find_first_of("\n,"));
    for (char& c : version) {
      if (c == '\t') c = ' ';
    }
    const size_t first = version.find_first_not_of(' ');
    const size_t last = version.find_last_not_of(' ');
    version = first == std::string::npos ? "unknown" : version.substr(first, last - first + 1);
    return "MPI (" + version + ")";
  }

  std::vector<int64_t> AllToAllCounts(std::span<const int64_t> send) override {
    internal::CheckAllToAllCounts(size_, send);
    std::vector<int64_t> recv(static_cast<size_t>(size_));
    CheckMpi(MPI_Alltoall(send.data(), 1, MPI_INT64_T, recv.data(), 1, MPI_INT64_T, comm_),
             "AllToAllCounts", "MPI_Alltoall");
    return recv;
  }

  void AllToAllV(const void* send, std::span<const int64_t> send_bytes, void* recv,
                 std::span<const int64_t> recv_bytes) override {
    internal::CheckAllToAllV(size_, send, send_bytes, recv, recv_bytes);
    std::vector<int> send_counts, send_displs, recv_counts, recv_displs;
    ToMpiCounts(send_bytes, "send", send_counts, send_displs);
    ToMpiCounts(recv_bytes, "recv", recv_counts, recv_displs);
    // A null buffer with zero bytes is allowed by comm.h; give MPI an address anyway.
    static const char kNothing = 0;
    static char no_recv = 0;
    CheckMpi(MPI_Alltoallv(send != nullptr ? send : &kNothing, send_counts.data(),
                           send_displs.data(), MPI_BYTE, recv != nullptr ? recv : &no_recv,
                           recv_counts.data(), recv_displs.data(), MPI_BYTE, comm_),
             "AllToAllV", "MPI_Alltoallv");
  }

  // Not MPI_Allreduce: its order of additions depends on the algorithm MPI picks (by
  // message size and rank count), and some algorithms give different ranks different
  // bits. Every rank gathers every rank's data and adds it in rank order instead
  // (docs/decisions.md "Communicator: MPI underneath, a byte interface on top").
  void AllReduceSum(std::span<float> data) override {
    const int64_t n = static_cast<int64_t>(data.size());
    CheckSameLength(n, "AllReduceSum", "floats");
    if (n == 0 || size_ == 1) return;
    const int64_t chunk = std::clamp(kGatherFloats / size_, kMinChunkFloats, kMaxChunkFloats);
    std::vector<float> gathered(static_cast<size_t>(std::min(chunk, n) * size_));
    for (int64_t begin = 0; begin < n; begin += chunk) {
      const int64_t count = std::min(chunk, n - begin);
      float* out = data.data() + begin;
      CheckMpi(MPI_Allgather(out, static_cast<int>(count), MPI_FLOAT, gathered.data(),
                             static_cast<int>(count), MPI_FLOAT, comm_),
               "AllReduceSum", "MPI_Allgather");
      std::copy_n(gathered.data(), count, out);
      for (int r = 1; r < size_; ++r) {
        const float* in = gathered.data() + r * count;
        for (int64_t i = 0; i < count; ++i) out[i] += in[i];
      }
    }
  }

  std::vector<uint8_t> AllGather(std::span<const uint8_t> bytes) override {
    const int64_t n = static_cast<int64_t>(bytes.size());
    CheckSameLength(n, "AllGather", "bytes");
    // Every rank passed n, so every rank refuses the same n.
    MXTRAIN_CHECK(n <= INT_MAX, "AllGather: ", n, " bytes is past MPI's int counts (at most ",
                  INT_MAX, ")");
    std::vector<uint8_t> all(static_cast<size_t>(n * size_));
    if (n == 0) return all;
    CheckMpi(MPI_Allgather(bytes.data(), static_cast<int>(n), MPI_BYTE, all.data(),
                           static_cast<int>(n), MPI_BYTE, comm_),
             "AllGather", "MPI_Allgather");
    return all;
  }

  void Barrier() override { CheckMpi(MPI_Barrier(comm_), "Barrier", "MPI_Barrier"); }

  std::unique_ptr<Communicator> Split(int color, int key) override {
    internal::CheckSplitColor(color);
    MPI_Comm out = MPI_COMM_NULL;
    CheckMpi(MPI_Comm_split(comm_, color, key, &out), "Split", "MPI_Comm_split");
    try {
      return std::make_unique<MpiCommunicator>(out);
    } catch (...) {
      MPI_Comm_free(&out);
      throw;
    }
  }

  [[noreturn]] void Abort(int code) override {
    std::cout.flush();
    std::cerr.flush();
    std::fflush(nullptr);
    MPI_Abort(comm_, code);
    std::_Exit(code);  // MPI_Abort does not return; should it, end this process at least
  }

 private:
  // Every rank's length of a collective that needs the same length everywhere, checked:
  // a mismatch is an Error on every rank (each sees every length) instead of a truncation
  // error on some ranks and a hang on others.
  void CheckSameLength(int64_t n, const char* collective, const char* unit) {
    std::vector<int64_t> lengths(static_cast<size_t>(size_));
    CheckMpi(MPI_Allgather(&n, 1, MPI_INT64_T, lengths.data(), 1, MPI_INT64_T, comm_), collective,
             "MPI_Allgather");
    if (std::all_of(lengths.begin(), lengths.end(),
                    [&](int64_t length) { return length == lengths[0]; })) {
      return;
    }
    std::string listed;
    constexpr int kListed = 16;
    for (int r = 0; r < std::min(size_, kListed); ++r) {
      listed += StrCat(r == 0 ? "" : ", ", "rank ", r, ": ", lengths[static_cast<size_t>(r)]);
    }
    if (size_ > kListed) listed += ", ...";
    Fail(collective, ": the ranks passed different lengths (", listed, " ", unit,
         "); every rank must pass the same length");
  }

  MPI_Comm comm_;
  int rank_ = 0;
  int size_ = 0;
};

void FinalizeMpiAtExit() {
  int initialized = 0;
  int finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (initialized && !finalized) MPI_Finalize();
}

}  // namespace

bool HaveMpi() { return true; }

std::unique_ptr<Communicator> WorldCommunicator() {
  static std::mutex mutex;
  const std::lock_guard<std::mutex> lock(mutex);
  int initialized = 0;
  int finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  MXTRAIN_CHECK(!finalized, "WorldCommunicator: MPI has been finalized; it cannot start again");
  if (!initialized) {
    // FUNNELED: OpenMP threads run the kernels, only the main thread calls MPI.
    int provided = 0;
    CheckMpi(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided), "WorldCommunicator",
             "MPI_Init_thread");
    // Only an MPI this process started is finalized here; a host that started it (mpi4py)
    // finalizes it itself.
    std::atexit(FinalizeMpiAtExit);
    auto world = std::make_unique<MpiCommunicator>(MPI_COMM_WORLD);
    // An mxtrain built against one MPI and started by another's mpirun comes up as
    // independent one-rank worlds, each of which would train alone.
    const int launched = LaunchedWorldSize();
    MXTRAIN_CHECK(launched == 1 || world->size() == launched, "the launcher started ", launched,
                  " processes (OMPI_COMM_WORLD_SIZE or PMI_SIZE) but MPI_COMM_WORLD has ",
                  world->size(), " rank(s): this mxtrain's ", world->name(),
                  " is not the launcher's MPI");
    return world;
  }
  return std::make_unique<MpiCommunicator>(MPI_COMM_WORLD);
}

}  // namespace mxtrain
