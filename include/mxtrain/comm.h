// Communicator: the few collectives multi-process training needs (expert-parallel token
// dispatch, data-parallel gradient sums), over an existing engine: one process, or MPI
// (Open MPI, run by mpirun). Byte-oriented on purpose: the MoE layer sends MXFP8 codes and
// scales as bytes, and no collective here knows a tensor type. Kernels and ops never see
// it; the training model and loop do (docs/decisions.md "Training on several processes").
//
//   std::unique_ptr<Communicator> world = WorldCommunicator();
//   std::vector<int64_t> recv = world->AllToAllCounts(send_counts);
//   world->AllToAllV(send.data(), send_bytes, recv.data(), recv_bytes);
//   world->AllReduceSum(grads);   // fp32, added in rank order: every rank gets the same bits
//
// Every collective must be called by every rank of the communicator, in the same order,
// with consistent sizes (a rank with nothing to send still calls it). A mismatch is a bug
// of the caller that MPI may answer with a hang or an abort; callers check their
// configuration across ranks first (AllGather of a digest) so that a bad setup is an Error
// on every rank instead.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace mxtrain {

class Communicator {
 public:
  virtual ~Communicator() = default;

  virtual int rank() const = 0;
  virtual int size() const = 0;
  // "single process" or "MPI (Open MPI 4.1.4)": for reports.
  virtual std::string name() const = 0;

  // send[d] goes to rank d (send.size() == size()); returns recv with recv[s] from rank s.
  virtual std::vector<int64_t> AllToAllCounts(std::span<const int64_t> send) = 0;
  // Rank d receives send's chunk for d: chunks lie back to back in rank order, send_bytes[d]
  // bytes each; recv gets recv_bytes[s] bytes from rank s, back to back in rank order.
  // recv_bytes must equal what each sender sends (exchange the counts first). Zero-byte
  // chunks are fine; send / recv may be null when their totals are 0.
  virtual void AllToAllV(const void* send, std::span<const int64_t> send_bytes, void* recv,
                         std::span<const int64_t> recv_bytes) = 0;
  // data <- the element-wise sum of every rank's data, in fp32, added in rank order
  // ((d_0 + d_1) + d_2) + ... on every rank, so the result does not depend on timing or on
  // the engine's reduction algorithm. Every rank passes the same length.
  virtual void AllReduceSum(std::span<float> data) = 0;
  // Every rank's bytes (the same length on every rank), concatenated in rank order.
  virtual std::vector<uint8_t> AllGather(std::span<const uint8_t> bytes) = 0;
  virtual void Barrier() = 0;
  // The ranks that pass the same color, ordered by key (then by rank): MPI_Comm_split.
  // Collective over this communicator.
  virtual std::unique_ptr<Communicator> Split(int color, int key) = 0;
  // Ends every process of the job with this exit code, now (MPI_Abort); the one-process
  // communicator calls std::exit. For a rank that failed while others may be waiting in a
  // collective.
  [[noreturn]] virtual void Abort(int code) = 0;
};

// Collective: every rank's string (any lengths), in rank order; built on AllGather.
std::vector<std::string> AllGatherStrings(Communicator& comm, const std::string& s);

// One process: rank 0 of 1; every collective copies its input to its output.
std::unique_ptr<Communicator> MakeSingleProcessCommunicator();

// Whether this build has MPI (the CMake option MXTRAIN_WITH_MPI; optional like oneDNN).
bool HaveMpi();
// The number of processes the launcher started, read from its environment (mpirun's
// OMPI_COMM_WORLD_SIZE, PMI_SIZE), without starting MPI: 1 when not launched by one.
int LaunchedWorldSize();
// Every process of the job: MPI_COMM_WORLD with MPI (MPI is initialized on the first call
// and finalized at exit), the one-process communicator otherwise. Throws Error when the
// launcher started several processes but this build has no MPI.
std::unique_ptr<Communicator> WorldCommunicator();

}  // namespace mxtrain
