// Communicator (comm.h): every collective on seeded data, on the world, the one-process
// communicator and communicators from Split; uneven splits and a rank with nothing to send
// or receive; AllReduceSum's bits against the rank-order sum; mismatched lengths as an
// Error on every rank; the launcher's environment.
//
// One binary for one process (the ctest entries) and for mpirun (comm_test_mpi2: 2 ranks).
// Every rank derives every rank's data from the seed, so no collective's size depends on
// what another rank sent and all ranks call the same collectives in the same order whatever
// fails; a rank whose test failed ends the job (Abort) rather than leave the others
// waiting. Only rank 0 prints gtest's report; other ranks print their failures.
#include "mxtrain/comm.h"

#include <gtest/gtest.h>

#include <climits>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "mxtrain/error.h"

namespace mxtrain {
namespace {

// MPI starts once, in main, before any test runs (WorldCommunicator's first call).
Communicator& World() {
  static const std::unique_ptr<Communicator> world = WorldCommunicator();
  return *world;
}

constexpr uint64_t kSeed = 24;

uint64_t Mix(uint64_t x) {  // splitmix64's finalizer
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

uint64_t Hash(uint64_t seed, uint64_t a, uint64_t b = 0, uint64_t c = 0) {
  return Mix(Mix(Mix(Mix(seed) ^ a) ^ b) ^ c);
}

std::string SeedTrace(uint64_t seed, const Communicator& c) {
  return StrCat("seed ", seed, ", rank ", c.rank(), " of ", c.size(), " (", c.name(), ")");
}

// Bytes rank src sends rank dst: uneven, zero for about one pair in six, and with several
// ranks the last one sends and receives nothing (it still calls every collective).
int64_t BytesFromTo(uint64_t seed, int src, int dst, int size) {
  if (size > 1 && (src == size - 1 || dst == size - 1)) return 0;
  const uint64_t h = Hash(seed, static_cast<uint64_t>(src), static_cast<uint64_t>(dst));
  return h % 6 == 0 ? 0 : static_cast<int64_t>(h >> 8) % 5000;
}

uint8_t ByteFromTo(uint64_t seed, int src, int dst, int64_t i) {
  return static_cast<uint8_t>(Hash(seed ^ 0xB17E, static_cast<uint64_t>(src),
                                   static_cast<uint64_t>(dst), static_cast<uint64_t>(i)));
}

void CheckAllToAllCounts(Communicator& c, uint64_t seed) {
  SCOPED_TRACE(SeedTrace(seed, c));
  std::vector<int64_t> send;
  for (int d = 0; d < c.size(); ++d) send.push_back(BytesFromTo(seed, c.rank(), d, c.size()));
  const std::vector<int64_t> recv = c.AllToAllCounts(send);
  ASSERT_EQ(recv.size(), static_cast<size_t>(c.size()));
  for (int s = 0; s < c.size(); ++s) {
    EXPECT_EQ(recv[s], BytesFromTo(seed, s, c.rank(), c.size())) << "from rank " << s;
  }
}

// Sends every rank its chunk, checks what arrived, sends it back and checks that the
// original returns. With `empty` every count is zero and every buffer null.
void CheckAllToAllV(Communicator& c, uint64_t seed, bool empty = false) {
  SCOPED_TRACE(SeedTrace(seed, c) + (empty ? ", all empty" : ""));
  const int me = c.rank();
  std::vector<int64_t> send_bytes, recv_bytes;
  std::vector<uint8_t> send;
  for (int d = 0; d < c.size(); ++d) {
    send_bytes.push_back(empty ? 0 : BytesFromTo(seed, me, d, c.size()));
    recv_bytes.push_back(empty ? 0 : BytesFromTo(seed, d, me, c.size()));
    for (int64_t i = 0; i < send_bytes.back(); ++i) send.push_back(ByteFromTo(seed, me, d, i));
  }
  int64_t recv_total = 0;
  for (int64_t n : recv_bytes) recv_total += n;
  std::vector<uint8_t> recv(static_cast<size_t>(recv_total));
  c.AllToAllV(send.empty() ? nullptr : send.data(), send_bytes,
              recv.empty() ? nullptr : recv.data(), recv_bytes);
  int64_t at = 0;
  for (int s = 0; s < c.size(); ++s) {
    int64_t wrong = 0;
    for (int64_t i = 0; i < recv_bytes[s]; ++i) wrong += recv[at + i] != ByteFromTo(seed, s, me, i);
    EXPECT_EQ(wrong, 0) << "bytes from rank " << s;
    at += recv_bytes[s];
  }
  // The way back: what each rank received goes back to where it came from.
  std::vector<uint8_t> back(send.size());
  c.AllToAllV(recv.empty() ? nullptr : recv.data(), recv_bytes,
              back.empty() ? nullptr : back.data(), send_bytes);
  EXPECT_EQ(back, send);
}

// fp32 values across 40 binades and both signs, so that the order of additions shows in the
// low bits.
std::vector<float> ReduceInput(uint64_t seed, int rank, int64_t n) {
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    const uint64_t h = Hash(seed ^ 0x5E3, static_cast<uint64_t>(rank), static_cast<uint64_t>(i));
    const float mantissa = static_cast<float>(h >> 40) / static_cast<float>(1 << 24);
    const int exponent = static_cast<int>((h >> 8) % 41) - 20;
    v[i] = std::ldexp((h & 1) ? -mantissa : mantissa, exponent);
  }
  return v;
}

// memcmp, which may not be given null pointers (empty vectors), even for 0 bytes.
bool SameBytes(const void* a, const void* b, size_t n) {
  return n == 0 || std::memcmp(a, b, n) == 0;
}

std::vector<uint8_t> AsBytes(const std::vector<float>& v) {
  std::vector<uint8_t> bytes(v.size() * sizeof(float));
  if (!v.empty()) std::memcpy(bytes.data(), v.data(), bytes.size());
  return bytes;
}

void CheckAllReduceSum(Communicator& c, uint64_t seed, int64_t n) {
  SCOPED_TRACE(SeedTrace(seed, c) + StrCat(", ", n, " floats"));
  const std::vector<float> input = ReduceInput(seed, c.rank(), n);
  std::vector<float> sum = input;
  c.AllReduceSum(sum);
  ASSERT_EQ(sum.size(), static_cast<size_t>(n));

  // The rank-order sum ((d_0 + d_1) + d_2) + ..., from the inputs as AllGather delivers them.
  const std::vector<uint8_t> inputs = c.AllGather(AsBytes(input));
  ASSERT_EQ(inputs.size(), static_cast<size_t>(n) * sizeof(float) * c.size());
  std::vector<float> expect(static_cast<size_t>(n));
  for (int r = 0; r < c.size(); ++r) {
    const std::vector<float> theirs = ReduceInput(seed, r, n);
    EXPECT_TRUE(SameBytes(inputs.data() + r * n * sizeof(float), theirs.data(),
                          static_cast<size_t>(n) * sizeof(float)))
        << "AllGather'd input of rank " << r;
    for (int64_t i = 0; i < n; ++i) {
      float x;
      std::memcpy(&x, inputs.data() + (r * n + i) * sizeof(float), sizeof x);
      expect[i] = r == 0 ? x : expect[i] + x;
    }
  }
  int64_t differ = 0;
  for (int64_t i = 0; i < n; ++i) differ += std::memcmp(&sum[i], &expect[i], sizeof(float)) != 0;
  EXPECT_EQ(differ, 0) << "elements whose bits differ from the rank-order sum";

  // The same bits on every rank.
  const std::vector<uint8_t> sums = c.AllGather(AsBytes(sum));
  const std::vector<uint8_t> mine = AsBytes(sum);
  for (int r = 0; r < c.size(); ++r) {
    EXPECT_TRUE(SameBytes(sums.data() + r * mine.size(), mine.data(), mine.size()))
        << "rank " << r << "'s sum differs from this rank's";
  }
}

void CheckAllGather(Communicator& c, uint64_t seed, int64_t n) {
  SCOPED_TRACE(SeedTrace(seed, c) + StrCat(", ", n, " bytes"));
  auto bytes_of = [&](int r) {
    std::vector<uint8_t> v(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) v[i] = ByteFromTo(seed ^ 0xA11, r, 0, i);
    return v;
  };
  const std::vector<uint8_t> all = c.AllGather(bytes_of(c.rank()));
  ASSERT_EQ(all.size(), static_cast<size_t>(n * c.size()));
  for (int r = 0; r < c.size(); ++r) {
    const std::vector<uint8_t> theirs(all.begin() + r * n, all.begin() + (r + 1) * n);
    EXPECT_EQ(theirs, bytes_of(r)) << "rank " << r << "'s bytes (rank order)";
  }
}

// Every collective once, on communicator c.
void CheckEveryCollective(Communicator& c, uint64_t seed) {
  CheckAllToAllCounts(c, seed);
  CheckAllToAllV(c, seed);
  CheckAllToAllV(c, seed, /*empty=*/true);
  CheckAllReduceSum(c, seed, 1000);
  CheckAllGather(c, seed, 77);
  c.Barrier();
}

TEST(CommWorld, IsEveryLaunchedProcess) {
  Communicator& world = World();
  EXPECT_EQ(world.size(), LaunchedWorldSize());
  EXPECT_GE(world.rank(), 0);
  EXPECT_LT(world.rank(), world.size());
#ifdef MXTRAIN_HAVE_MPI
  EXPECT_TRUE(HaveMpi());
  const std::string name = world.name();
  EXPECT_EQ(name.rfind("MPI (", 0), 0u) << name;
  EXPECT_EQ(name.back(), ')') << name;
  EXPECT_GT(name.size(), std::string("MPI ()").size()) << name;
#else
  EXPECT_FALSE(HaveMpi());
  EXPECT_EQ(world.name(), "single process");  // the one-process communicator
#endif
  // Another call gives the same world, MPI already running.
  const std::unique_ptr<Communicator> again = WorldCommunicator();
  EXPECT_EQ(again->rank(), world.rank());
  EXPECT_EQ(again->size(), world.size());
}

TEST(CommWorld, EveryCollective) { CheckEveryCollective(World(), kSeed); }

TEST(CommWorld, AllToAllVManySeeds) {
  for (uint64_t seed = 1; seed <= 20; ++seed) CheckAllToAllV(World(), seed);
}

TEST(CommWorld, AllReduceSumLengths) {
  // 2.5M floats: three rounds of AllReduceSum's 1M-float chunks on 2 ranks.
  for (int64_t n : {0, 1, 31, 4097, 2'500'000}) CheckAllReduceSum(World(), kSeed + n, n);
}

TEST(CommWorld, AllGatherLengths) {
  for (int64_t n : {0, 1, 4097, 100'000}) CheckAllGather(World(), kSeed + n, n);
}

// Two ranks or more (one cannot disagree with itself): left out of the one-process entries
// (tests/CMakeLists.txt), run by comm_test_mpi2.
TEST(CommMultiRank, MismatchedLengthsAreAnErrorOnEveryRank) {
  Communicator& world = World();
  ASSERT_GE(world.size(), 2);
  const std::vector<uint8_t> bytes(static_cast<size_t>(world.rank() + 1), 7);
  try {
    world.AllGather(bytes);
    ADD_FAILURE() << "AllGather of 1 and 2 bytes returned";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("AllGather: the ranks passed different lengths "
                                         "(rank 0: 1, rank 1: 2"),
              std::string::npos)
        << e.what();
  }
  std::vector<float> floats(static_cast<size_t>(world.rank() + 3), 1.0f);
  EXPECT_THROW(world.AllReduceSum(floats), Error);
  // Nothing was left half sent: the next collectives pair up as before.
  CheckAllGather(world, kSeed, 5);
  CheckAllReduceSum(world, kSeed, 100);
}

TEST(CommWorld, BadArgumentsAreAnErrorBeforeAnythingIsSent) {
  Communicator& world = World();
  const int size = world.size();
  const std::vector<int64_t> too_many(static_cast<size_t>(size + 1), 0);
  EXPECT_THROW(world.AllToAllCounts(too_many), Error);
  std::vector<int64_t> counts(static_cast<size_t>(size), 0);
  uint8_t byte = 0;
  EXPECT_THROW(world.AllToAllV(&byte, too_many, &byte, counts), Error);
  counts[0] = -1;
  EXPECT_THROW(world.AllToAllV(&byte, counts, &byte, std::vector<int64_t>(size, 0)), Error);
  counts[0] = 1;
  EXPECT_THROW(world.AllToAllV(nullptr, counts, &byte, std::vector<int64_t>(size, 0)), Error);
  EXPECT_THROW(world.Split(-1, 0), Error);
#ifdef MXTRAIN_HAVE_MPI
  // MPI counts are int; the check comes before any byte is touched.
  counts[0] = int64_t{INT_MAX} + 1;
  try {
    world.AllToAllV(&byte, counts, &byte, counts);
    ADD_FAILURE() << "AllToAllV of 2 GiB returned";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("past MPI's int counts"), std::string::npos) << e.what();
  }
#endif
  CheckAllToAllCounts(world, kSeed);  // still in step
}

TEST(CommSplit, TwoColors) {
  Communicator& world = World();
  // Even and odd ranks, each group in reverse rank order (key = -rank).
  const std::unique_ptr<Communicator> half = world.Split(world.rank() % 2, -world.rank());
  int same_color = 0;
  int after_me = 0;
  for (int r = 0; r < world.size(); ++r) {
    if (r % 2 != world.rank() % 2) continue;
    ++same_color;
    after_me += r > world.rank();
  }
  EXPECT_EQ(half->size(), same_color);  // with 2 ranks: each alone
  EXPECT_EQ(half->rank(), after_me);
  CheckEveryCollective(*half, kSeed + 100 + world.rank() % 2);
  CheckAllReduceSum(*half, kSeed, 1 << 16);
  // A split of a split, and the world still works beside them.
  const std::unique_ptr<Communicator> quarter = half->Split(0, 0);
  EXPECT_EQ(quarter->size(), half->size());
  EXPECT_EQ(quarter->rank(), half->rank());
  CheckEveryCollective(*quarter, kSeed + 200);
  CheckEveryCollective(world, kSeed + 300);
}

TEST(CommSplit, OneColorKeepsRankOrder) {
  Communicator& world = World();
  const std::unique_ptr<Communicator> all = world.Split(3, 0);  // ties by rank
  EXPECT_EQ(all->size(), world.size());
  EXPECT_EQ(all->rank(), world.rank());
  EXPECT_EQ(all->name(), world.name());
  CheckEveryCollective(*all, kSeed + 400);
}

TEST(CommSingleProcess, EveryCollective) {
  const std::unique_ptr<Communicator> single = MakeSingleProcessCommunicator();
  EXPECT_EQ(single->rank(), 0);
  EXPECT_EQ(single->size(), 1);
  EXPECT_EQ(single->name(), "single process");
  CheckEveryCollective(*single, kSeed);
  for (uint64_t seed = 1; seed <= 5; ++seed) CheckAllToAllV(*single, seed);
  const std::unique_ptr<Communicator> split = single->Split(5, 1);
  EXPECT_EQ(split->size(), 1);
  CheckEveryCollective(*split, kSeed + 1);
}

TEST(CommSingleProcess, AllToAllVNeedsWhatItSends) {
  const std::unique_ptr<Communicator> single = MakeSingleProcessCommunicator();
  uint8_t bytes[4] = {1, 2, 3, 4};
  const int64_t four[] = {4};
  const int64_t three[] = {3};
  EXPECT_THROW(single->AllToAllV(bytes, four, bytes, three), Error);
  single->AllToAllV(bytes, four, bytes, four);  // in place: nothing moves
  EXPECT_EQ(bytes[3], 4);
}

#ifndef MXTRAIN_HAVE_MPI
TEST(CommSingleProcessDeathTest, AbortExitsWithTheCodeAfterFlushing) {
  EXPECT_EXIT(
      {
        static char buffer[256];
        std::setvbuf(stderr, buffer, _IOFBF, sizeof buffer);  // held until flushed
        std::fputs("written before Abort", stderr);
        MakeSingleProcessCommunicator()->Abort(7);
      },
      testing::ExitedWithCode(7), "written before Abort");
}
#endif

// Sets or unsets an environment variable for one scope, then puts back what was there
// (under mpirun, OMPI_COMM_WORLD_SIZE).
class ScopedEnv {
 public:
  explicit ScopedEnv(const char* name) : name_(name) {
    if (const char* value = std::getenv(name)) saved_ = value;
  }
  ~ScopedEnv() {
    if (saved_) {
      setenv(name_, saved_->c_str(), 1);
    } else {
      unsetenv(name_);
    }
  }
  void Set(const char* value) {
    if (value) {
      setenv(name_, value, 1);
    } else {
      unsetenv(name_);
    }
  }

 private:
  const char* name_;
  std::optional<std::string> saved_;
};

TEST(CommLaunchedWorldSize, ReadsTheLaunchersVariable) {
  ScopedEnv ompi("OMPI_COMM_WORLD_SIZE");
  ScopedEnv pmi("PMI_SIZE");
  ompi.Set(nullptr);
  pmi.Set(nullptr);
  EXPECT_EQ(LaunchedWorldSize(), 1);
  ompi.Set("3");
  EXPECT_EQ(LaunchedWorldSize(), 3);
  pmi.Set("5");
  EXPECT_EQ(LaunchedWorldSize(), 3);  // Open MPI's first
  ompi.Set(nullptr);
  EXPECT_EQ(LaunchedWorldSize(), 5);
  pmi.Set(nullptr);
  for (const char* unparsable : {"", "two", "2 ", "-2", "0", "99999999999"}) {
    ompi.Set(unparsable);
    EXPECT_EQ(LaunchedWorldSize(), 1) << "'" << unparsable << "'";
  }
}

#ifndef MXTRAIN_HAVE_MPI
TEST(CommWorld, WithoutMpiSeveralProcessesAreAnError) {
  ScopedEnv ompi("OMPI_COMM_WORLD_SIZE");
  ompi.Set("2");
  try {
    WorldCommunicator();
    ADD_FAILURE() << "WorldCommunicator returned under OMPI_COMM_WORLD_SIZE=2";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(),
                 "mpirun started 2 processes but this mxtrain was built without MPI (configure "
                 "with -DMXTRAIN_WITH_MPI=ON and install libopenmpi-dev)");
  }
}
#endif

// On ranks other than 0: only failures, each with the rank.
class FailurePrinter : public testing::EmptyTestEventListener {
 public:
  explicit FailurePrinter(int rank) : rank_(rank) {}
  void OnTestPartResult(const testing::TestPartResult& result) override {
    if (!result.failed()) return;
    std::fprintf(stderr, "[rank %d] %s:%d: Failure\n%s\n", rank_,
                 result.file_name() ? result.file_name() : "?", result.line_number(),
                 result.message());
  }

 private:
  int rank_;
};

// A rank whose test failed may have left a collective out, and the other ranks would wait
// in it until the timeout: end the whole job instead.
class AbortJobOnFailure : public testing::EmptyTestEventListener {
 public:
  void OnTestEnd(const testing::TestInfo& info) override {
    if (!info.result()->Failed() || World().size() == 1) return;
    std::fprintf(stderr, "[rank %d] %s.%s failed: ending the job (Abort) so that no rank waits\n",
                 World().rank(), info.test_suite_name(), info.name());
    World().Abort(1);
  }
};

}  // namespace
}  // namespace mxtrain

int main(int argc, char** argv) {
  testing::InitGoogleTest(&argc, argv);
  // Listing the tests (gtest_discover_tests at build time) starts no MPI.
  if (GTEST_FLAG_GET(list_tests)) return RUN_ALL_TESTS();
  // Without MPI under mpirun: WorldCommunicator's Error, once per rank, not std::terminate.
  try {
    mxtrain::World();
  } catch (const mxtrain::Error& e) {
    std::fprintf(stderr, "comm_test: %s\n", e.what());
    return 1;
  }
  mxtrain::Communicator& world = mxtrain::World();
  testing::TestEventListeners& listeners = testing::UnitTest::GetInstance()->listeners();
  if (world.rank() != 0) {
    delete listeners.Release(listeners.default_result_printer());
    listeners.Append(new mxtrain::FailurePrinter(world.rank()));
  }
  listeners.Append(new mxtrain::AbortJobOnFailure);
  return RUN_ALL_TESTS();
}
