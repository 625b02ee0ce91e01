// Benchmarks shared by `mxtrain bench` and the Google Benchmark binary: one table of cases
// per area, each timed beside a baseline in the same run, so that the ratio survives a
// noisy machine.
//
//   quantize: each quantizer beside a memcpy-style baseline that reads the same input bytes
//             and writes the same output bytes;
//   gemm:     each MX GEMM beside oneDNN's matmul of the same shape and values (when
//             mxtrain was built with oneDNN): its bf16 matmul where oneDNN has one for this
//             CPU, else its f32 matmul on the same bf16 values ("baseline": the high-
//             precision GEMM route, so ForceHpGemmPath("onednn-f32") picks the f32 one
//             anywhere, as `mxtrain bench gemm --baseline` does); and against the
//             measured peak of the unit the GEMM path runs on (AMX tiles, VDPBF16PS, or fp32
//             FMA on the current Highway target).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "mxtrain/group_list.h"
#include "mxtrain/mx_tensor.h"
#include "mxtrain/quantize.h"
#include "mxtrain/tensor.h"

namespace mxtrain {

enum class QuantizeKind : uint8_t { kRowwise, kColumnwise, kDual, kGrouped };
std::string_view Name(QuantizeKind kind);  // "rowwise" | "columnwise" | "dual" | "grouped"

struct QuantizeBenchCase {
  QuantizeKind kind;
  DType dtype;  // kF32 or kBF16
  int64_t m;
  int64_t k;
  int threads;
  CodeStores code_stores = CodeStores::kAuto;  // QuantizeOptions::code_stores
};

// rowwise, columnwise, dual and grouped x f32, bf16 x 4096x4096 and an L2-sized 256x1024 x 1
// and 2 threads.
std::vector<QuantizeBenchCase> StandardQuantizeBenchCases();

// A prepared case: seeded input, the group list for grouped cases (8 experts of uneven
// sizes, not multiples of 32), and the baseline's buffers.
class QuantizeBench {
 public:
  explicit QuantizeBench(const QuantizeBenchCase& c);
  // One call of the library function the case measures; `other_stores`: with the opposite
  // of the case's columnwise code stores (streaming where it caches, and back).
  void RunKernel(bool other_stores = false);
  // Whether the case's kernel streams its columnwise codes (StreamsColumnwiseCodes).
  bool streams() const { return streams_; }
  // Reads every input byte and writes as many output bytes as the kernel writes, in
  // 64 KiB pieces split over the same number of threads; the bytes the kernel writes with
  // non-temporal stores (its columnwise codes and scales, when it streams them; never the
  // rowwise half of dual) with non-temporal stores too, so that the ratio stays one
  // against the same memory traffic.
  void RunBaseline();
  int64_t input_bytes() const { return input_.NumBytes(); }
  int64_t output_bytes() const { return output_bytes_; }

 private:
  QuantizeBenchCase case_;
  Tensor input_;
  GroupList groups_;
  int64_t output_bytes_ = 0;
  bool streams_ = false;
  // The output bytes from here on are the ones the baseline streams (output_bytes_: none).
  int64_t streamed_from_ = 0;
  Tensor baseline_out_;
  uint64_t sink_ = 0;
};

struct QuantizeBenchResult {
  QuantizeBenchCase c;
  std::string target;  // SIMD target the kernel ran
  double ms;           // median wall time of the kernel
  double gbps;         // (input + output bytes) / ms
  double baseline_ms;  // median wall time of the baseline
  double baseline_gbps;
  double ratio;  // gbps / baseline_gbps
  bool streams;  // the kernel streamed its columnwise codes (and the baseline its output)
  // Median of the kernel with the other code stores (QuantizeBench::RunKernel(true)), timed
  // in the same loop; absent for rowwise, which has no columnwise codes.
  std::optional<double> other_stores_ms;
};

// Warms up, then alternates kernel and baseline `reps` times each; medians.
QuantizeBenchResult MeasureQuantizeBench(const QuantizeBenchCase& c, int reps);
// One JSON line: {"case", "dtype", "shape", "threads", "ms", "gbps", "baseline_gbps",
// "ratio", "baseline_ms", "target", "code_stores": "cached"|"streaming", and but for rowwise
// "other_stores_ms"}.
std::string ToJson(const QuantizeBenchResult& r);

// --- GEMM ------------------------------------------------------------------------------

enum class GemmBenchKind : uint8_t { kDense, kGrouped };
std::string_view Name(GemmBenchKind kind);  // "dense" | "grouped"
enum class GemmPass : uint8_t { kFprop, kDgrad, kWgrad };
std::string_view Name(GemmPass pass);  // "fprop" | "dgrad" | "wgrad"

// One GEMM of a linear layer Y [M, N] = X [M, K] . W [N, K]^T in one training pass. m, n, k
// are the layer's sizes whatever the pass, so each pass does 2*M*N*K flops:
//   fprop  MxGemm(X rowwise, W rowwise)          => Y  [M, N]  (contracts K)
//   dgrad  MxGemm(dY rowwise, W columnwise)      => dX [M, K]  (contracts N)
//   wgrad  MxGemm(dY columnwise, X columnwise)   => dW [N, K]  (contracts M)
// Grouped cases are a mixture-of-experts layer: M tokens sorted by expert, W [E, N, K];
// fprop and dgrad run MxGroupedGemm, wgrad MxGroupedWgrad on token-grouped operands.
struct GemmBenchCase {
  std::string name;  // unique in the table: "<shape>_<pass>", e.g. "layer_fc1_wgrad"
  GemmBenchKind kind;
  GemmPass gemm;
  int64_t m;
  int64_t n;
  int64_t k;
  std::vector<int64_t> group_counts;  // grouped: tokens per expert (sum m); dense: empty
  int threads = 0;                    // 0: all cores (omp_get_max_threads())

  int num_groups() const {
    return group_counts.empty() ? 1 : static_cast<int>(group_counts.size());
  }
  double flops() const {
    return 2.0 * static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k);
  }
};

// Tiny smoke cases (every pass, dense and grouped), 4096^3 fprop, a transformer layer (8192
// tokens, hidden 2048, MLP 4 x 2048: QKV, attention output, FC1, FC2) and a
// mixture-of-experts layer (8192 tokens, hidden 2048, expert FFN 1408, 8 experts of uneven
// sizes, one empty: FC1, FC2), each in fprop, dgrad and wgrad.
std::vector<GemmBenchCase> StandardGemmBenchCases();

// True when this build has the oneDNN baseline (MXTRAIN_HAVE_DNNL).
bool HaveOneDnnBaseline();
// The baseline route the GEMM benchmark runs: "onednn-bf16" (oneDNN's bf16 matmul) where
// oneDNN has one for this CPU, else "onednn-f32" (its f32 matmul on the same bf16 values),
// "" without oneDNN. The high-precision GEMM's bf16 route (hp_gemm.h), so the same choice.
std::string GemmBaselineRoute();

// The peak of the unit a GEMM path runs on, measured in this process (cached per kind and
// thread count): kind "amx-bf16" (TDPBF16PS, AmxPeakGflops), "avx512-bf16" (VDPBF16PS,
// 12 independent chains), or "fma-f32-<TARGET>" for simd-f32 and portable (fp32 FMA on
// the current Highway target, 12 independent chains of full vectors). nullopt where the
// unit is missing. With `again`, the loop runs once more and the result is the best of
// every measurement of the process: a peak measured while another tenant held a core is
// only lower, and a low peak would flatter every fraction taken against it.
struct PeakResult {
  std::string kind;
  double gflops;
};
std::string PeakKind(const std::string& gemm_path);
std::optional<PeakResult> PathPeak(const std::string& gemm_path, int threads, bool again = false);
// One run of the loop of `kind` (PeakKind) on `threads` threads, `iterations` steps of 12
// instructions (AMX: 4); returns the flops done (0 where the unit is missing). For the
// Google Benchmark front end.
double RunPeakLoop(const std::string& kind, int threads, int64_t iterations);

// The AMX-BF16 peak: TDPBF16PS back to back on resident tiles (4 accumulators, 2 A and 2 B
// tiles, no loads) on `threads` threads, in GFLOP/s (2*16*16*32 flops an instruction); the
// best of a few runs, measured once per thread count and process (`again`: once more, the
// best of all kept, as PathPeak). nullopt without AMX.
std::optional<double> AmxPeakGflops(int threads, bool again = false);
// One run of that loop: `iterations` x 4 instructions on every thread; returns the flops
// done (0 without AMX). For the Google Benchmark front end.
double RunAmxPeakLoop(int threads, int64_t iterations);

namespace internal {
class OneDnnMatmuls;
// The best of 10 timed runs after 0.2 s of warm-up, in GFLOP/s: a run that lost its core
// to another process is only slower. `run(iterations)` returns the flops it did.
double BestOfRuns(const std::function<double(int64_t)>& run, int64_t iterations);
}  // namespace internal

// A prepared case: seeded operands quantized in the layouts the pass needs, and for the
// baseline their dequantized values in bf16 (exact: MX elements times power-of-two scales
// fit bf16), laid out as the MX operands are, so both compute the same product.
class GemmBench {
 public:
  explicit GemmBench(const GemmBenchCase& c);
  ~GemmBench();
  GemmBench(const GemmBench&) = delete;
  GemmBench& operator=(const GemmBench&) = delete;

  // One call of the MX function the case measures (allocating its output, as callers do).
  void RunMx();
  bool has_onednn() const { return onednn_ != nullptr; }
  // The case's oneDNN matmuls, once each (one per non-empty group for grouped cases).
  void RunOneDnn();
  // GemmBaselineRoute() when the case has a baseline, else "".
  const std::string& baseline() const { return baseline_; }
  // Runs the MX GEMM and the baseline alternately for 0.5 s, or once each when they take
  // longer: the first calls page in the outputs, start the OpenMP team and oneDNN's
  // scratchpads, and on the development VM the first tenths of a second of a process run
  // several times slower than the rest.
  void WarmUp();
  // oneDNN's implementation name ("brg:avx512_core_amx_bf16"), "" without oneDNN.
  std::string onednn_impl() const;
  // max |C_mx - C_onednn| / max |C_onednn| over the last outputs of both (run each first);
  // nullopt without oneDNN. Only accumulation order differs, so this is ~1e-6; more means
  // the two do not compute the same GEMM.
  std::optional<double> MaxRelDiff() const;
  // Grouped cases only: one dense MxGemm of the same pass and equal flops (M tokens against
  // expert 0's weights; for wgrad dY and X quantized columnwise without groups), the
  // baseline of the grouped-vs-dense target.
  bool has_dense_twin() const { return dense_a_.defined(); }
  void RunDenseTwin();
  const GemmBenchCase& gemm_case() const { return case_; }
  int threads() const { return threads_; }
  double flops() const { return flops_; }

 private:
  GemmBenchCase case_;
  int threads_;
  double flops_;
  GroupList groups_;
  MxTensor a_, b_;              // the MX operands, in the order the function takes them
  MxTensor dense_a_, dense_b_;  // the dense twin's operands (grouped cases)
  Tensor mx_out_, dense_out_;
  std::string baseline_;
  std::vector<Tensor> onednn_tensors_;  // the bf16 (or f32) inputs its matmuls read
  Tensor onednn_out_;
  std::unique_ptr<internal::OneDnnMatmuls> onednn_;
};

struct GemmBenchResult {
  GemmBenchCase c;
  int threads;
  std::string path;                 // the MX GEMM path that ran (CurrentGemmPath())
  double ms;                        // median wall time of the MX GEMM
  double gflops;                    // flops / ms
  std::optional<double> onednn_ms;  // median wall time of the oneDNN matmuls
  std::optional<double> onednn_gflops;
  std::optional<double> ratio;            // gflops / onednn_gflops
  std::string baseline;                   // GemmBaselineRoute(); "" without one
  std::optional<double> amx_peak_gflops;  // AmxPeakGflops(threads): AMX machines only
  std::optional<double> peak_gflops;      // PathPeak(path, threads), before and after
  std::string peak_kind;                  // PeakKind(path)
  std::optional<double> peak_fraction;    // gflops / peak_gflops
  std::string onednn_impl;
  std::optional<double> max_rel_diff;  // GemmBench::MaxRelDiff() after the warm-up
  std::optional<double> dense_ms;      // grouped: median of the dense twin (RunDenseTwin)
  std::optional<double> dense_gflops;
  std::optional<double> vs_dense;  // grouped: gflops / dense_gflops
};

// Measures the peaks (once a process), warms up (GemmBench::WarmUp), then alternates MX,
// oneDNN and (grouped cases) the dense twin `reps` times each, or as many times as give the
// MX GEMM about 200 ms of calls where that is more (small cases, at most 2000); medians.
// The peaks are then measured again and the best kept (PathPeak's `again`).
GemmBenchResult MeasureGemmBench(const GemmBenchCase& c, int reps);
// One JSON line: {"case", "kind", "gemm", "m", "n", "k", "groups", "ms", "gflops",
// "onednn_gflops", "ratio", "baseline", "amx_peak_gflops", "peak_gflops", "peak_kind",
// "peak_fraction", "threads", "path", "onednn_ms", "onednn_impl", "max_rel_diff",
// "dense_gflops", "vs_dense"}; null where a value is absent ("dense_gflops" and "vs_dense"
// for dense cases, "amx_peak_gflops" without AMX).
std::string ToJson(const GemmBenchResult& r);

}  // namespace mxtrain
