// `mxtrain bench quantize [--reps N] [--threads T] [--dtype f32|bf16] [--case KIND]
//  [--shape MxK] [--simd TARGET]` and `mxtrain bench --list`: JSON lines from the library's
// benchmark table (mxtrain/bench.h).
#include <iostream>
#include <string>
#include <vector>

#include "args.h"
#include "commands.h"
#include "mxtrain/bench.h"
#include "mxtrain/error.h"
#include "mxtrain/simd.h"

namespace mxtrain::cli {

namespace {

constexpr const char* kUsage =
    "usage: mxtrain bench quantize [--reps N] [--threads 1|2] [--dtype f32|bf16] "
    "[--case rowwise|colwise|dual|grouped] [--shape MxK] [--simd TARGET] | mxtrain bench --list";

void PrintList() {
  std::cout << "quantize cases:";
  for (QuantizeKind k : {QuantizeKind::kRowwise, QuantizeKind::kColwise, QuantizeKind::kDual,
                         QuantizeKind::kGrouped}) {
    std::cout << " " << Name(k);
  }
  std::cout << "\nsimd targets:";
  for (const std::string& t : AvailableSimdTargets()) std::cout << " " << t;
  std::cout << "\n";
}

}  // namespace

int RunBench(const std::vector<std::string>& argv) {
  const ParsedArgs args = ParsedArgs::Parse(
      argv, "mxtrain bench",
      {{"reps"}, {"threads"}, {"dtype"}, {"case"}, {"shape"}, {"simd"}, {"list", false}});
  if (args.help()) {
    std::cout << kUsage << "\n";
    return 0;
  }
  if (args.Has("list")) {
    PrintList();
    return 0;
  }
  MXTRAIN_CHECK(args.positional().size() == 1 && args.positional()[0] == "quantize", kUsage);
  const int reps = static_cast<int>(ParseInt(args.Get("reps", "9"), "--reps", 1, 1000));
  const int64_t threads = args.Has("threads") ? ParseInt(args.Get("threads"), "--threads", 1, 2) : 0;
  if (args.Has("dtype")) {
    MXTRAIN_CHECK(args.Get("dtype") == "f32" || args.Get("dtype") == "bf16",
                  "--dtype must be f32 or bf16, got '", args.Get("dtype"), "'");
  }
  if (args.Has("case")) {
    const std::string c = args.Get("case");
    MXTRAIN_CHECK(c == "rowwise" || c == "colwise" || c == "dual" || c == "grouped",
                  "--case must be rowwise, colwise, dual or grouped, got '", c, "'");
  }
  int64_t m = 0, k = 0;
  if (args.Has("shape")) {
    const std::string s = args.Get("shape");
    const size_t x = s.find('x');
    MXTRAIN_CHECK(x != std::string::npos, "--shape must look like 4096x4096, got '", s, "'");
    m = ParseInt(s.substr(0, x), "--shape", 1, 1 << 20);
    k = ParseInt(s.substr(x + 1), "--shape", 1, 1 << 20);
  }
  if (args.Has("simd")) ForceSimdTarget(args.Get("simd"));
  for (QuantizeBenchCase c : StandardQuantizeBenchCases()) {
    if (threads > 0 && c.threads != threads) continue;
    if (args.Has("dtype") && Name(c.dtype) != args.Get("dtype")) continue;
    if (args.Has("case") && Name(c.kind) != args.Get("case")) continue;
    if (m > 0) {
      if (c.m != 4096) continue;  // one case per (kind, dtype, threads) at the given shape
      c.m = m;
      c.k = k;
    }
    std::cout << ToJson(MeasureQuantizeBench(c, reps)) << std::endl;
  }
  return 0;
}

}  // namespace mxtrain::cli
