// Quantization benchmarks shared by `mxtrain bench quantize` and the Google Benchmark
// binary: one table of cases, each timed beside a memcpy-style baseline that reads the same
// input bytes and writes the same output bytes in the same run, so the ratio survives a
// noisy machine.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "mxtrain/group_list.h"
#include "mxtrain/quantize.h"
#include "mxtrain/tensor.h"

namespace mxtrain {

enum class QuantizeKind : uint8_t { kRowwise, kColwise, kDual, kGrouped };
std::string_view Name(QuantizeKind kind);  // "rowwise" | "colwise" | "dual" | "grouped"

struct QuantizeBenchCase {
  QuantizeKind kind;
  DType dtype;  // kF32 or kBF16
  int64_t m;
  int64_t k;
  int threads;
};

// rowwise, colwise, dual and grouped x f32, bf16 x 4096x4096 and an L2-sized 256x1024 x 1
// and 2 threads.
std::vector<QuantizeBenchCase> StandardQuantizeBenchCases();

// A prepared case: seeded input, the group list for grouped cases (8 experts of uneven
// sizes, not multiples of 32), and the baseline's buffers.
class QuantizeBench {
 public:
  explicit QuantizeBench(const QuantizeBenchCase& c);
  // One call of the library function the case measures.
  void RunKernel();
  // Reads every input byte and writes as many output bytes as the kernel writes, in
  // 64 KiB pieces split over the same number of threads.
  void RunBaseline();
  int64_t input_bytes() const { return input_.NumBytes(); }
  int64_t output_bytes() const { return output_bytes_; }

 private:
  QuantizeBenchCase case_;
  Tensor input_;
  GroupList groups_;
  int64_t output_bytes_ = 0;
  Tensor baseline_out_;
  uint64_t sink_ = 0;
};

struct QuantizeBenchResult {
  QuantizeBenchCase c;
  std::string target;      // SIMD target the kernel ran
  double ms;               // median wall time of the kernel
  double gbps;             // (input + output bytes) / ms
  double baseline_ms;      // median wall time of the baseline
  double baseline_gbps;
  double ratio;            // gbps / baseline_gbps
};

// Warms up, then alternates kernel and baseline `reps` times each; medians.
QuantizeBenchResult MeasureQuantizeBench(const QuantizeBenchCase& c, int reps);
// One JSON line: {"case", "dtype", "shape", "threads", "ms", "gbps", "baseline_gbps",
// "ratio", "baseline_ms", "target"}.
std::string ToJson(const QuantizeBenchResult& r);

}  // namespace mxtrain
