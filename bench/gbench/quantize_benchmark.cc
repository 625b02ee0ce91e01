// Google Benchmark front end for the quantization cases of mxtrain/bench.h: each case is
// registered twice, the kernel and its memcpy-style baseline, with bytes/s counters over the
// same input + output bytes; compare the two rows' bytes_per_second for the ratio.
#include <benchmark/benchmark.h>

#include <memory>
#include <string>

#include "mxtrain/bench/bench.h"

namespace {

void Register(const mxtrain::QuantizeBenchCase& c, bool baseline) {
  const std::string name = std::string(baseline ? "baseline/" : "quantize/") +
                           std::string(mxtrain::Name(c.kind)) + "/" +
                           std::string(mxtrain::Name(c.dtype)) + "/" + std::to_string(c.m) + "x" +
                           std::to_string(c.k) + "/threads:" + std::to_string(c.threads);
  // Built on first run, so that only the selected cases allocate their inputs.
  auto bench = std::make_shared<std::unique_ptr<mxtrain::QuantizeBench>>();
  benchmark::RegisterBenchmark(
      name.c_str(),
      [c, bench, baseline](benchmark::State& state) {
        if (!*bench) *bench = std::make_unique<mxtrain::QuantizeBench>(c);
        mxtrain::QuantizeBench* b = bench->get();
        for (auto _ : state) {
          if (baseline) {
            b->RunBaseline();
          } else {
            b->RunKernel();
          }
        }
        state.SetBytesProcessed(state.iterations() * (b->input_bytes() + b->output_bytes()));
      })
      ->UseRealTime()
      ->Unit(benchmark::kMillisecond);
}

}  // namespace

int main(int argc, char** argv) {
  for (const mxtrain::QuantizeBenchCase& c : mxtrain::StandardQuantizeBenchCases()) {
    Register(c, /*baseline=*/false);
    Register(c, /*baseline=*/true);
  }
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
