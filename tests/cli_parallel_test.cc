// `mpirun -np 2 mxtrain train` end to end (docs/training.md "Training on several
// processes"): two ranks on this machine, each command under a timeout so that a hang fails
// the test instead of blocking it.
//  - expert parallelism 2 repeats expert parallelism 1 (data parallelism over the same two
//    ranks, with the same wire) bit for bit over several steps: every loss, gradient norm
//    and validation loss, and every final weight, the experts compared shard by shard;
//  - the MXFP8 wire against the bf16 one: 0.52x the bytes, and the losses within a stated
//    bound;
//  - a run stopped and resumed on both ranks repeats the run made at once;
//  - bad setups are errors on every rank with a non-zero exit, never a hang (a rank count
//    that does not divide the experts, mismatched flags across ranks);
//  - a rank that dies takes the job down with a non-zero exit within the timeout.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "io/json_util.h"
#include "mxtrain/safetensors.h"
// After the library headers (a block of its own, so that include sorting keeps it here).
#include "cli_test_util.h"
#include "test_util.h"

#ifndef MXTRAIN_MPIEXEC
#error "MXTRAIN_MPIEXEC must name mpiexec"
#endif

namespace mxtrain {
namespace {

namespace fs = std::filesystem;
using testing_util::Quote;
using testing_util::ReadBytes;
using testing_util::RunResult;

constexpr int kTimeoutS = 240;

// Two ranks on 2 cores (or fewer), as root in CI; one thread each.
std::string Mpirun(int ranks) {
  return StrCat("timeout ", kTimeoutS, " ", Quote(MXTRAIN_MPIEXEC),
                " --allow-run-as-root --oversubscribe -n ", ranks);
}

std::vector<std::string> Tiny(const std::string& experts = "4") {
  return {"train", "--precision",     "mxfp8", "--d-model",    "32",    "--layers",
          "2",     "--heads",         "2",     "--experts",    experts, "--top-k",
          "2",     "--d-ff",          "32",    "--context",    "16",    "--batch",
          "4",     "--micro-batches", "1",     "--eval-every", "2",     "--threads",
          "1"};
}

class CliParallelTest : public testing_util::CliFixture {
 protected:
  // mpirun -n ranks mxtrain <args>.
  RunResult RunRanks(int ranks, const std::vector<std::string>& args) const {
    std::string cmd = Mpirun(ranks) + " " + Quote(MXTRAIN_CLI_PATH);
    for (const std::string& a : args) {
      cmd += ' ';
      cmd += Quote(a);
    }
    return RunShell(cmd);
  }
  // A tiny run over two ranks into out/<dir>; returns its one run's summary.
  internal::Json Train2(const std::string& dir, std::vector<std::string> extra) const {
    std::vector<std::string> args = Tiny();
    args.insert(args.end(), extra.begin(), extra.end());
    args.push_back("--out");
    args.push_back(Out(dir));
    const RunResult r = RunRanks(2, args);
    EXPECT_EQ(r.code, 0) << r.out << r.err;
    if (r.code != 0) return internal::Json();
    const internal::Json s = internal::ParseJson(ReadBytes(Out(dir + "/summary.json")));
    EXPECT_EQ(s.size(), 1u);
    return s.at(0);
  }
};

// The metrics that must repeat bit for bit: train loss, aux loss, val loss, grad norm
// (columns 2, 3, 4, 6 of metrics.csv, written with 17 significant digits). A run stopped
// early also evaluates at its stop: with_val false leaves the validation column out.
std::vector<std::string> Curves(const std::string& csv_path, bool with_val = true) {
  std::istringstream in(ReadBytes(csv_path));
  std::string line;
  std::getline(in, line);
  std::vector<std::string> out;
  while (std::getline(in, line)) {
    std::vector<std::string> f;
    std::stringstream ls(line);
    for (std::string cell; std::getline(ls, cell, ',');) f.push_back(cell);
    if (f.size() < 6) {
      ADD_FAILURE() << line;
      continue;
    }
    out.push_back(f[0] + ":" + f[1] + "," + f[2] + "," + (with_val ? f[3] : "") + "," + f[5]);
  }
  return out;
}

std::map<std::string, Tensor> Params(const std::string& path) {
  std::map<std::string, Tensor> out;
  for (NamedTensor& t : ReadSafetensors(path).tensors) {
    if (t.name.rfind("param/", 0) == 0) out[t.name.substr(6)] = t.tensor;
  }
  return out;
}

bool SameBytes(const Tensor& a, const Tensor& b, int64_t b_offset_bytes = 0) {
  return std::memcmp(a.raw(), static_cast<const char*>(b.raw()) + b_offset_bytes, a.NumBytes()) ==
         0;
}

TEST_F(CliParallelTest, ExpertParallelTwoRepeatsOneBitForBit) {
  for (const char* wire : {"mxfp8", "hp"}) {
    SCOPED_TRACE(wire);
    const std::string ep1 = StrCat("ep1-", wire), ep2 = StrCat("ep2-", wire);
    const internal::Json a =
        Train2(ep1, {"--steps", "4", "--expert-parallel", "1", "--expert-wire", wire});
    const internal::Json b =
        Train2(ep2, {"--steps", "4", "--expert-parallel", "2", "--expert-wire", wire});
    if (a.is_null() || b.is_null()) return;
    EXPECT_EQ(a.at("world_size").get<int64_t>(), 2);
    EXPECT_EQ(b.at("expert_parallel").get<int64_t>(), 2);
    EXPECT_EQ(b.at("expert_wire").get<std::string>(), wire);
    const std::string run = a.at("name").get<std::string>();
    const std::vector<std::string> ca = Curves(Out(ep1 + "/" + run + "/metrics.csv"));
    EXPECT_EQ(ca.size(), 4u);
    EXPECT_EQ(ca, Curves(Out(ep2 + "/" + run + "/metrics.csv")));
    EXPECT_EQ(a.at("final_val_loss").get<double>(), b.at("final_val_loss").get<double>());
    // EP 1 exchanges within each rank: nothing crosses; EP 2 sends half of each rank's rows.
    EXPECT_EQ(a.at("wire_bytes_per_step").get<int64_t>(), 0);
    EXPECT_GT(b.at("wire_bytes_per_step").get<int64_t>(), 0);
    // The weights: the dense ones equal everywhere, each expert shard of EP 2 equal to its
    // slice of EP 1's whole expert tensors.
    for (int rank = 0; rank < 2; ++rank) {
      const auto p1 =
          Params(Out(StrCat(ep1, "/", run, "/checkpoint.rank", rank, "-of-2.safetensors")));
      const auto p2 =
          Params(Out(StrCat(ep2, "/", run, "/checkpoint.rank", rank, "-of-2.safetensors")));
      ASSERT_EQ(p1.size(), p2.size());
      int experts = 0;
      for (const auto& [name, t2] : p2) {
        const Tensor& t1 = p1.at(name);
        if (t2.shape() == t1.shape()) {
          EXPECT_TRUE(SameBytes(t2, t1)) << name << " rank " << rank;
        } else {
          ++experts;
          EXPECT_EQ(t2.shape()[0] * 2, t1.shape()[0]) << name;
          EXPECT_TRUE(SameBytes(t2, t1, rank * t2.NumBytes())) << name << " rank " << rank;
        }
      }
      EXPECT_EQ(experts, 4) << "w13 and w2 of two layers are sharded";
    }
  }
}

TEST_F(CliParallelTest, Mxfp8WireSendsHalfTheBytesAndTracksTheBf16Wire) {
  const internal::Json mx = Train2("mx", {"--steps", "6", "--expert-parallel", "2"});
  const internal::Json hp =
      Train2("hp", {"--steps", "6", "--expert-parallel", "2", "--expert-wire", "hp"});
  if (mx.is_null() || hp.is_null()) return;
  EXPECT_EQ(mx.at("expert_wire").get<std::string>(), "mxfp8");
  // Dispatch forward and combine backward travel as 1 + 1/32 bytes per element instead of
  // 2; the other two exchanges stay bf16: (2 * 1.03125 + 2 * 2) / (4 * 2) = 0.758.
  const double ratio = static_cast<double>(mx.at("wire_bytes_per_step").get<int64_t>()) /
                       static_cast<double>(hp.at("wire_bytes_per_step").get<int64_t>());
  EXPECT_NEAR(ratio, 0.7578, 0.01);
  // The experts' wgrads differ (double rounding); the loss after six steps moves little.
  // Measured: within 0.2% of each other.
  const double a = mx.at("final_val_loss").get<double>(), b = hp.at("final_val_loss").get<double>();
  EXPECT_NEAR(a, b, 0.01 * b);
}

TEST_F(CliParallelTest, ResumeOnEveryRankRepeatsTheRunBitForBit) {
  const internal::Json whole = Train2("whole", {"--steps", "6", "--expert-parallel", "2"});
  Train2("parts", {"--steps", "6", "--expert-parallel", "2", "--stop-after", "3"});
  std::vector<std::string> args = Tiny();
  for (const char* a : {"--steps", "6", "--expert-parallel", "2", "--resume"}) args.push_back(a);
  args.push_back(Out("parts"));
  const RunResult r = RunRanks(2, args);
  ASSERT_EQ(r.code, 0) << r.err;
  if (whole.is_null()) return;
  const std::string run = whole.at("name").get<std::string>();
  EXPECT_EQ(Curves(Out("whole/" + run + "/metrics.csv"), false),
            Curves(Out("parts/" + run + "/metrics.csv"), false));
  const internal::Json parts = internal::ParseJson(ReadBytes(Out("parts/summary.json"))).at(0);
  EXPECT_EQ(parts.at("resumed_from").get<int64_t>(), 3);
  EXPECT_EQ(whole.at("final_val_loss").get<double>(), parts.at("final_val_loss").get<double>());
  // A checkpoint of two ranks does not resume a one-process run.
  std::vector<std::string> one = Tiny();
  for (const char* a : {"--steps", "6", "--resume"}) one.push_back(a);
  one.push_back(Out("parts"));
  const RunResult single = Run(one);
  EXPECT_EQ(single.code, 2);
  EXPECT_NE(single.err.find("checkpoint"), std::string::npos) << single.err;
}

TEST_F(CliParallelTest, BadSetupsFailOnEveryRankWithoutHanging) {
  {  // two ranks cannot hold three groups' experts
    std::vector<std::string> args = Tiny();
    for (const char* a : {"--steps", "2", "--expert-parallel", "3"}) args.push_back(a);
    const RunResult r = RunRanks(2, args);
    EXPECT_NE(r.code, 0);
    EXPECT_NE(r.code, 124) << "timed out";
    EXPECT_NE(r.err.find("does not divide the job's 2 processes"), std::string::npos) << r.err;
  }
  {  // experts that do not split over the ranks
    std::vector<std::string> args = Tiny("3");
    for (const char* a : {"--steps", "2", "--expert-parallel", "2"}) args.push_back(a);
    const RunResult r = RunRanks(2, args);
    EXPECT_NE(r.code, 0);
    EXPECT_NE(r.code, 124) << "timed out";
    EXPECT_NE(r.err.find("3 experts do not split over 2"), std::string::npos) << r.err;
  }
  {  // ranks started with different flags (mpirun's colon syntax)
    std::string cmd = StrCat("timeout ", kTimeoutS, " ", Quote(MXTRAIN_MPIEXEC),
                             " --allow-run-as-root --oversubscribe");
    for (const char* steps : {"3", "4"}) {
      cmd += StrCat(" -n 1 ", Quote(MXTRAIN_CLI_PATH));
      for (const std::string& a : Tiny()) cmd += " " + Quote(a);
      cmd += StrCat(" --expert-parallel 2 --steps ", steps, " --out ", Quote(Out("mismatch")));
      if (steps[0] == '3') cmd += " :";
    }
    const RunResult r = RunShell(cmd);
    EXPECT_NE(r.code, 0);
    EXPECT_NE(r.code, 124) << "timed out";
    EXPECT_NE(r.err.find("rank 1 was started with steps=4, rank 0 with steps=3"), std::string::npos)
        << r.err;
  }
}

// `mpirun -n 2 mxtrain bench ep`: one JSON line per layout, then the table. One step, so
// that every layout routes the same tokens: the ratios are then the closed forms.
TEST_F(CliParallelTest, BenchEpReportsEveryLayoutWithItsBytes) {
  const RunResult r = RunRanks(2, {"bench", "ep", "--steps", "1"});
  ASSERT_EQ(r.code, 0) << r.err;
  std::istringstream in(r.out);
  std::vector<internal::Json> lines;
  for (std::string line; std::getline(in, line);) {
    if (!line.empty() && line[0] == '{') lines.push_back(internal::ParseJson(line));
  }
  ASSERT_EQ(lines.size(), 3u) << r.out;
  EXPECT_EQ(lines[0].at("layout").get<std::string>(), "ep1");
  EXPECT_EQ(lines[1].at("layout").get<std::string>(), "ep2-bf16");
  EXPECT_EQ(lines[2].at("layout").get<std::string>(), "ep2-mxfp8");
  EXPECT_EQ(lines[0].at("wire_bytes_per_step").get<int64_t>(), 0);
  for (const internal::Json& j : lines) {
    EXPECT_GT(j.at("step_ms").get<double>(), 0);
    EXPECT_EQ(j.at("world_size").get<int64_t>(), 2);
    EXPECT_EQ(j.at("wire_bytes_per_step").get<int64_t>(),
              j.at("dispatch_forward_bytes").get<int64_t>() +
                  j.at("combine_forward_bytes").get<int64_t>() +
                  j.at("combine_backward_bytes").get<int64_t>() +
                  j.at("dispatch_backward_bytes").get<int64_t>());
  }
  // MXFP8 rows: d_model codes and d_model / 32 scales against 2 * d_model bytes.
  EXPECT_DOUBLE_EQ(lines[2].at("dispatch_forward_vs_bf16_wire").get<double>(), 33.0 / 64.0);
  EXPECT_DOUBLE_EQ(lines[2].at("combine_backward_vs_bf16_wire").get<double>(), 33.0 / 64.0);
  EXPECT_EQ(lines[2].at("combine_forward_bytes").get<int64_t>(),
            lines[1].at("combine_forward_bytes").get<int64_t>());
  // Replicated experts sum every gradient over the two ranks; sharded ones only the dense.
  EXPECT_GT(lines[0].at("grad_sum_bytes_per_step").get<int64_t>(),
            lines[1].at("grad_sum_bytes_per_step").get<int64_t>());
  EXPECT_NE(r.out.find("| ep2-mxfp8 |"), std::string::npos) << r.out;
}

// The pid of the rank `rank` process of a job whose command line mentions `marker`.
pid_t FindRank(const std::string& marker, int rank) {
  for (const auto& e : fs::directory_iterator("/proc")) {
    const std::string name = e.path().filename();
    if (name.empty() || name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::string cmdline = ReadBytes(e.path().string() + "/cmdline");
    std::replace(cmdline.begin(), cmdline.end(), '\0', ' ');
    if (cmdline.find(marker) == std::string::npos || cmdline.find(" train ") == std::string::npos) {
      continue;
    }
    std::string env = ReadBytes(e.path().string() + "/environ");
    std::replace(env.begin(), env.end(), '\0', '\n');
    if (("\n" + env).find(StrCat("\nOMPI_COMM_WORLD_RANK=", rank, "\n")) != std::string::npos) {
      return static_cast<pid_t>(std::stol(name));
    }
  }
  return -1;
}

TEST_F(CliParallelTest, ARankThatDiesEndsTheJobWithAnError) {
  std::string cmd = Mpirun(2) + " " + Quote(MXTRAIN_CLI_PATH);
  for (const std::string& a : Tiny()) cmd += " " + Quote(a);
  cmd += " --expert-parallel 2 --steps 100000 --out " + Quote(Out("dies"));
  cmd += " >" + base_ + "/io/stdout 2>" + base_ + "/io/stderr";
  const pid_t job = fork();
  ASSERT_GE(job, 0);
  if (job == 0) {
    execl("/bin/sh", "sh", "-c", cmd.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  // Wait for rank 1 to be training, then kill it.
  pid_t victim = -1;
  const auto start = std::chrono::steady_clock::now();
  while (victim < 0 && std::chrono::steady_clock::now() - start < std::chrono::seconds(60)) {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    victim = FindRank(Out("dies"), 1);
  }
  ASSERT_GT(victim, 0) << "rank 1 never started";
  std::this_thread::sleep_for(std::chrono::seconds(2));  // inside the training loop
  ASSERT_EQ(kill(victim, SIGKILL), 0);
  int status = 0;
  pid_t done = 0;
  const auto killed = std::chrono::steady_clock::now();
  while ((done = waitpid(job, &status, WNOHANG)) == 0 &&
         std::chrono::steady_clock::now() - killed < std::chrono::seconds(90)) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  if (done == 0) {
    kill(job, SIGKILL);
    waitpid(job, &status, 0);
    FAIL() << "the job did not end within 90 s of a rank dying";
  }
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_NE(WEXITSTATUS(status), 0);
  EXPECT_NE(WEXITSTATUS(status), 124) << "timed out";
  EXPECT_EQ(FindRank(Out("dies"), 0), -1) << "rank 0 outlived the job";
}

}  // namespace
}  // namespace mxtrain
