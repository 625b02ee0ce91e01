// Google Benchmark front end for the GEMM cases of mxtrain/bench.h: each case is registered
// as an MX row and, when mxtrain was built with oneDNN, a oneDNN row of the same shape, with
// a FLOP/s counter; grouped cases add a dense row (the dense MX GEMM of equal flops); two
// more rows run the AMX peak loop and the peak loop of the GEMM path that runs (AMX,
// VDPBF16PS or fp32 FMA). Compare the rows' flops counters for the ratio, the peak fraction
// and vs_dense that `mxtrain bench gemm` prints.
#include <benchmark/benchmark.h>
#include <omp.h>

#include <memory>
#include <string>

#include "mxtrain/bench/bench.h"
#include "mxtrain/gemm.h"

namespace {

// The prepared case of the rows running now. The MX and oneDNN rows of a case are
// registered next to each other and share it; the next case replaces it, so that one
// case's operands (up to about 1 GB for the layer shapes) are alive at a time. Never
// destroyed: at exit, oneDNN's own statics may already be gone.
std::unique_ptr<mxtrain::GemmBench>& current = *new std::unique_ptr<mxtrain::GemmBench>;

enum class Row { kMx, kOneDnn, kDense };

void RunCase(benchmark::State& state, const mxtrain::GemmBenchCase& c, Row row) {
  if (!current || current->gemm_case().name != c.name) {
    current.reset();
    current = std::make_unique<mxtrain::GemmBench>(c);
    // Debian 12's Google Benchmark has no MinWarmUpTime, and a slow first iteration would
    // end a layer case's measurement on its own.
    current->WarmUp();
  }
  for (auto _ : state) {
    switch (row) {
      case Row::kMx:
        current->RunMx();
        break;
      case Row::kOneDnn:
        current->RunOneDnn();
        break;
      case Row::kDense:
        current->RunDenseTwin();
        break;
    }
  }
  state.counters["flops"] = benchmark::Counter(
      current->flops() * static_cast<double>(state.iterations()), benchmark::Counter::kIsRate);
}

void Register(const mxtrain::GemmBenchCase& c, Row row) {
  const char* suffix = row == Row::kMx ? "/mx" : row == Row::kOneDnn ? "/onednn" : "/dense";
  const std::string name =
      "gemm/" + c.name + suffix + "/threads:" + std::to_string(omp_get_max_threads());
  benchmark::RegisterBenchmark(name.c_str(),
                               [c, row](benchmark::State& state) { RunCase(state, c, row); })
      ->UseRealTime()
      ->Unit(benchmark::kMillisecond);
}

// `row`: "amx_peak" (the AMX loop, skipped without AMX) or "peak" (the loop of the path
// that runs: kind PeakKind(CurrentGemmPath())).
void RegisterPeak(const std::string& row) {
  const int threads = omp_get_max_threads();
  const std::string name = "gemm/" + row + "/threads:" + std::to_string(threads);
  benchmark::RegisterBenchmark(
      name.c_str(),
      [threads, row](benchmark::State& state) {
        const std::string kind =
            row == "amx_peak" ? "amx-bf16" : mxtrain::PeakKind(mxtrain::CurrentGemmPath());
        double flops = 0;
        for (auto _ : state) flops += mxtrain::RunPeakLoop(kind, threads, int64_t{1} << 16);
        if (flops == 0) state.SkipWithError((kind + " is not available").c_str());
        state.SetLabel(kind);
        state.counters["flops"] = benchmark::Counter(flops, benchmark::Counter::kIsRate);
      })
      ->UseRealTime()
      ->Unit(benchmark::kMillisecond);
}

bool RegisterGemmBenchmarks() {
  RegisterPeak("amx_peak");
  RegisterPeak("peak");
  for (const mxtrain::GemmBenchCase& c : mxtrain::StandardGemmBenchCases()) {
    Register(c, Row::kMx);
    if (mxtrain::HaveOneDnnBaseline()) Register(c, Row::kOneDnn);
    if (c.kind == mxtrain::GemmBenchKind::kGrouped) Register(c, Row::kDense);
  }
  return true;
}

// Registered at static initialization, as BENCHMARK() does, so that the main() in
// quantize_benchmark.cc runs these rows too.
[[maybe_unused]] const bool kRegistered = RegisterGemmBenchmarks();

}  // namespace
