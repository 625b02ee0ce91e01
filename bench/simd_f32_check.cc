// A same-run check of the simd-f32 GEMM path against the fp32 FMA peak and oneDNN's f32
// matmul on one Highway target (until `mxtrain bench gemm` reports both itself). Not part
// of the CMake build; after `cmake --build --preset release --target mxtrain`:
//   g++ -O2 -std=c++20 -fopenmp -Iinclude -Isrc bench/simd_f32_check.cc \
//       build/release/libmxtrain.a -lhwy -ldnnl -o simd_f32_check
//   OMP_WAIT_POLICY=ACTIVE ./simd_f32_check TARGET [reps] [case substring ...]
// TARGET is AVX2 (oneDNN capped to AVX2 too) or an AVX-512 target (AVX3, AVX3_DL).
// Prints one line per case: MX GFLOP/s, fraction of the peak loop of that target (12
// independent FMA chains per thread, best of 5), oneDNN f32 GFLOP/s and the ratio,
// vs_dense for grouped cases.
#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <oneapi/dnnl/dnnl.hpp>
#include <string>
#include <vector>

#include "bench/bench_util.h"
#include "mxtrain/bench.h"
#include "mxtrain/gemm.h"
#include "mxtrain/group_list.h"
#include "mxtrain/quantize.h"
#include "mxtrain/simd.h"
#include "mxtrain/tensor.h"

namespace {

// The machine this was written on is shared (load 6-10 on 2 cores), so wall time mostly
// measures the other processes. Time is process CPU time divided by the thread count:
// seconds while running (OpenMP threads spin at barriers with OMP_WAIT_POLICY=ACTIVE, so
// waiting at one still counts). Set WALL=1 for wall time.
int g_threads = 2;
const bool g_wall = std::getenv("WALL") != nullptr;
struct Clock {
  using time_point = double;
  static double now() {
    if (g_wall) {
      return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch())
          .count();
    }
    timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (ts.tv_sec + 1e-9 * ts.tv_nsec) / g_threads;
  }
};
double Seconds(double t0) { return Clock::now() - t0; }

constexpr long kPeakIters = 50'000'000;

__attribute__((target("avx2,fma"))) float PeakAvx2(long iters) {
  __m256 acc[12];
  for (int i = 0; i < 12; ++i) acc[i] = _mm256_set1_ps(static_cast<float>(i));
  const __m256 x = _mm256_set1_ps(0.999f), y = _mm256_set1_ps(1e-7f);
  for (long it = 0; it < iters; ++it) {
#pragma GCC unroll 12
    for (int i = 0; i < 12; ++i) acc[i] = _mm256_fmadd_ps(acc[i], x, y);
    asm volatile(""
                 : "+x"(acc[0]), "+x"(acc[1]), "+x"(acc[2]), "+x"(acc[3]), "+x"(acc[4]),
                   "+x"(acc[5]), "+x"(acc[6]), "+x"(acc[7]), "+x"(acc[8]), "+x"(acc[9]),
                   "+x"(acc[10]), "+x"(acc[11]));
  }
  __m256 s = acc[0];
  for (int i = 1; i < 12; ++i) s = _mm256_add_ps(s, acc[i]);
  return _mm256_cvtss_f32(s);
}

__attribute__((target("avx512f"))) float PeakAvx512(long iters) {
  __m512 acc[12];
  for (int i = 0; i < 12; ++i) acc[i] = _mm512_set1_ps(static_cast<float>(i));
  const __m512 x = _mm512_set1_ps(0.999f), y = _mm512_set1_ps(1e-7f);
  for (long it = 0; it < iters; ++it) {
#pragma GCC unroll 12
    for (int i = 0; i < 12; ++i) acc[i] = _mm512_fmadd_ps(acc[i], x, y);
    asm volatile(""
                 : "+v"(acc[0]), "+v"(acc[1]), "+v"(acc[2]), "+v"(acc[3]), "+v"(acc[4]),
                   "+v"(acc[5]), "+v"(acc[6]), "+v"(acc[7]), "+v"(acc[8]), "+v"(acc[9]),
                   "+v"(acc[10]), "+v"(acc[11]));
  }
  return _mm512_reduce_add_ps(acc[0]) + _mm512_reduce_add_ps(acc[11]);
}

// GFLOP/s of `threads` threads each running the peak loop; best of 5.
double PeakGflops(bool avx512, int threads, long iters = kPeakIters, int runs = 5) {
  double best = 0;
  for (int rep = 0; rep < runs; ++rep) {
    float sink = 0;
    const auto t0 = Clock::now();
#pragma omp parallel num_threads(threads) reduction(+ : sink)
    sink += avx512 ? PeakAvx512(iters) : PeakAvx2(iters);
    const double s = Seconds(t0);
    const double flops = 2.0 * (avx512 ? 16 : 8) * 12 * static_cast<double>(iters) * threads;
    best = std::max(best, flops / s * 1e-9);
    if (sink == 12345.f) std::printf(" ");
  }
  return best;
}

// oneDNN f32 matmuls laid out as `mxtrain bench gemm` lays out its bf16 ones.
struct View {
  int64_t m, n, k;
  int64_t a_off, a_sm, a_sk, b_off, b_sk, b_sn, c_off, c_sm;
};

struct OneDnnF32 {
  dnnl::engine engine{dnnl::engine::kind::cpu, 0};
  dnnl::stream stream{engine};
  std::vector<float> a, b, c;
  struct Step {
    dnnl::matmul mm;
    dnnl::memory am, bm, cm;
  };
  std::vector<Step> steps;
  std::string impl;

  explicit OneDnnF32(const mxtrain::GemmBenchCase& cs) {
    using dt = dnnl::memory::data_type;
    const bool grouped = !cs.group_counts.empty();
    const int64_t m = cs.m, n = cs.n, k = cs.k;
    const int64_t experts = grouped ? static_cast<int64_t>(cs.group_counts.size()) : 1;
    std::vector<View> views;
    int64_t t0 = 0;
    for (int64_t e = 0; e < experts; ++e) {
      const int64_t tokens = grouped ? cs.group_counts[e] : m;
      const int64_t w0 = e * n * k;
      if (tokens > 0) {
        switch (cs.gemm) {
          case mxtrain::GemmPass::kFprop:
            views.push_back({tokens, n, k, t0 * k, k, 1, w0, 1, k, t0 * n, n});
            break;
          case mxtrain::GemmPass::kDgrad:
            views.push_back({tokens, k, n, t0 * n, n, 1, w0, k, 1, t0 * k, k});
            break;
          case mxtrain::GemmPass::kWgrad:
            views.push_back({n, k, tokens, t0 * n, 1, n, t0 * k, k, 1, w0, k});
            break;
        }
      }
      t0 += tokens;
    }
    const int64_t a_size = m * std::max(n, k), b_size = std::max(experts * n * k, m * k);
    a.assign(a_size, 0.5f);
    b.assign(b_size, 0.25f);
    c.assign(std::max(m * std::max(n, k), experts * n * k), 0.0f);
    for (const View& v : views) {
      const dnnl::memory::desc a_md({v.m, v.k}, dt::f32, {v.a_sm, v.a_sk});
      const dnnl::memory::desc b_md({v.k, v.n}, dt::f32, {v.b_sk, v.b_sn});
      const dnnl::memory::desc c_md({v.m, v.n}, dt::f32, {v.c_sm, 1});
      const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a_md, b_md, c_md), engine);
      impl = pd.impl_info_str();
      steps.push_back({dnnl::matmul(pd), dnnl::memory(a_md, engine, a.data() + v.a_off),
                       dnnl::memory(b_md, engine, b.data() + v.b_off),
                       dnnl::memory(c_md, engine, c.data() + v.c_off)});
    }
  }
  void Run() {
    for (Step& s : steps) {
      s.mm.execute(stream, {{DNNL_ARG_SRC, s.am}, {DNNL_ARG_WEIGHTS, s.bm}, {DNNL_ARG_DST, s.cm}});
    }
    stream.wait();
  }
};

// The MX operands of a bench case, quantized as `mxtrain bench gemm` quantizes them, and
// the dense twin of a grouped case.
struct MxCase {
  mxtrain::GemmBenchCase c;
  bool grouped;
  mxtrain::GroupList groups;
  mxtrain::MxTensor a, b, dense_a, dense_b;
  explicit MxCase(const mxtrain::GemmBenchCase& cs) : c(cs), grouped(!cs.group_counts.empty()) {
    using namespace mxtrain;
    using internal::RandomTensor;
    const int t = c.threads;
    const int64_t m = c.m, n = c.n, k = c.k;
    const int64_t experts = grouped ? static_cast<int64_t>(c.group_counts.size()) : 1;
    if (grouped) groups = GroupList::Make(c.group_counts, GroupListType::kCounts, m);
    const QuantizeOptions q{ElementFormat::kE4M3, ScaleRule::kRceil, t};
    const Shape w_shape = grouped ? Shape{experts, n, k} : Shape{n, k};
    switch (c.gemm) {
      case GemmPass::kFprop:
        a = QuantizeRowwise(RandomTensor({m, k}, 1, t), q);
        b = QuantizeRowwise(RandomTensor(w_shape, 2, t), q);
        break;
      case GemmPass::kDgrad:
        a = QuantizeRowwise(RandomTensor({m, n}, 3, t), q);
        b = QuantizeColumnwise(RandomTensor(w_shape, 2, t), q);
        break;
      case GemmPass::kWgrad:
        if (grouped) {
          a = QuantizeGrouped(RandomTensor({m, n}, 3, t), groups, q);
          b = QuantizeGrouped(RandomTensor({m, k}, 1, t), groups, q);
        } else {
          a = QuantizeColumnwise(RandomTensor({m, n}, 3, t), q);
          b = QuantizeColumnwise(RandomTensor({m, k}, 1, t), q);
        }
        break;
    }
    if (grouped) {
      if (c.gemm == GemmPass::kWgrad) {
        dense_a = QuantizeColumnwise(RandomTensor({m, n}, 3, t), q);
        dense_b = QuantizeColumnwise(RandomTensor({m, k}, 1, t), q);
      } else {
        dense_a = a;
        dense_b = b.Matrix(0);
      }
    }
  }
  mxtrain::Tensor out;
  void Run() {
    mxtrain::GemmOptions o;
    o.threads = c.threads;
    if (!grouped) {
      out = mxtrain::MxGemm(a, b, o);
    } else if (c.gemm == mxtrain::GemmPass::kWgrad) {
      out = mxtrain::MxGroupedWgrad(a, b, o);
    } else {
      out = mxtrain::MxGroupedGemm(a, b, groups, o);
    }
  }
  void RunDense() {
    if (!grouped) return;
    mxtrain::GemmOptions o;
    o.threads = c.threads;
    out = mxtrain::MxGemm(dense_a, dense_b, o);
  }
};

}  // namespace

int main(int argc, char** argv) {
  const std::string target = argc > 1 ? argv[1] : "AVX2";
  const int reps = argc > 2 ? std::atoi(argv[2]) : 5;
  std::vector<std::string> filters;
  for (int i = 3; i < argc; ++i) filters.emplace_back(argv[i]);
  const int threads = std::getenv("THREADS") ? std::atoi(std::getenv("THREADS")) : 2;
  g_threads = threads;
  omp_set_num_threads(threads);
  mxtrain::ForceGemmPath("simd-f32");
  mxtrain::ForceSimdTarget(target);
  const bool avx512 = target != "AVX2";
  // oneDNN on the same ISA as the target measured (it would pick AVX-512 kernels here).
  dnnl::set_max_cpu_isa(avx512 ? dnnl::cpu_isa::avx512_core : dnnl::cpu_isa::avx2);
  const double peak = PeakGflops(avx512, threads);
  std::printf("target %s  peak %.1f GFLOP/s (%s, 12 chains x %d threads)\n", target.c_str(), peak,
              avx512 ? "zmm" : "ymm", threads);
  std::printf("%-22s %9s %6s %9s %6s %8s\n", "case", "mx", "peak", "onednn", "ratio", "vs_dense");
  for (mxtrain::GemmBenchCase c : mxtrain::StandardGemmBenchCases()) {
    if (c.name.rfind("smoke", 0) == 0) continue;
    bool keep = filters.empty();
    for (const std::string& f : filters) keep = keep || c.name.find(f) != std::string::npos;
    if (!keep) continue;
    c.threads = threads;
    // Rounds of: a short peak loop, the MX GEMM, oneDNN, the dense twin; best of each (the
    // machine is shared, so the best of interleaved runs is the least disturbed figure).
    OneDnnF32 dnn(c);
    MxCase mx(c);
    dnn.Run();
    mx.Run();
    mx.RunDense();
    double best_peak = 0, best_mx = 1e30, best_dnn = 1e30, best_dense = 1e30;
    for (int r = 0; r < reps; ++r) {
      best_peak = std::max(best_peak, PeakGflops(avx512, threads, kPeakIters / 5, 1));
      auto t0 = Clock::now();
      mx.Run();
      best_mx = std::min(best_mx, Seconds(t0));
      t0 = Clock::now();
      dnn.Run();
      best_dnn = std::min(best_dnn, Seconds(t0));
      if (mx.grouped) {
        t0 = Clock::now();
        mx.RunDense();
        best_dense = std::min(best_dense, Seconds(t0));
      }
    }
    const double gflops = c.flops() * 1e-9 / best_mx;
    const double dnn_gflops = c.flops() * 1e-9 / best_dnn;
    const double vs_dense = mx.grouped ? best_dense / best_mx : 0;
    std::printf("%-22s %9.1f %6.3f %9.1f %6.3f %8s   [peak %.1f, %s]\n", c.name.c_str(), gflops,
                gflops / best_peak, dnn_gflops, gflops / dnn_gflops,
                mx.grouped ? std::to_string(vs_dense).substr(0, 5).c_str() : "-", best_peak,
                dnn.impl.c_str());
    std::fflush(stdout);
  }
  return 0;
}
