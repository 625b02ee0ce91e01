// The GEMM benchmark (mxtrain/bench.h): MX GEMMs of a transformer and a mixture-of-experts
// layer timed beside oneDNN's matmul of the same shapes and values (bf16 where oneDNN has
// it, else f32) and against the peak of the unit the path runs on.
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <sstream>

#include "bench_util.h"
#include "mxtrain/bench/bench.h"
#include "mxtrain/error.h"
#include "mxtrain/gemm.h"
#include "mxtrain/hp_gemm.h"
#include "onednn_matmul.h"

namespace mxtrain {

using internal::JsonNumber;
using internal::Median;
using internal::RandomTensor;

std::string_view Name(GemmBenchKind kind) {
  switch (kind) {
    case GemmBenchKind::kDense:
      return "dense";
    case GemmBenchKind::kGrouped:
      return "grouped";
  }
  return "?";
}

std::string_view Name(GemmPass pass) {
  switch (pass) {
    case GemmPass::kFprop:
      return "fprop";
    case GemmPass::kDgrad:
      return "dgrad";
    case GemmPass::kWgrad:
      return "wgrad";
  }
  return "?";
}

std::vector<GemmBenchCase> StandardGemmBenchCases() {
  std::vector<GemmBenchCase> cases;
  auto all_passes = [&](const std::string& shape, int64_t m, int64_t n, int64_t k,
                        const std::vector<int64_t>& counts) {
    const GemmBenchKind kind = counts.empty() ? GemmBenchKind::kDense : GemmBenchKind::kGrouped;
    for (GemmPass pass : {GemmPass::kFprop, GemmPass::kDgrad, GemmPass::kWgrad}) {
      cases.push_back({shape + "_" + std::string(Name(pass)), kind, pass, m, n, k, counts});
    }
  };
  // Smoke: seconds under sanitizers. Not square, so that a swapped dimension fails, and
  // uneven groups with an empty one, none a multiple of the 32-row block.
  all_passes("smoke", 96, 64, 128, {});
  all_passes("smoke_grouped", 100, 64, 96, {37, 0, 45, 18});
  cases.push_back({"square_4096", GemmBenchKind::kDense, GemmPass::kFprop, 4096, 4096, 4096, {}});
  // A transformer layer: 8192 tokens, hidden 2048, MLP 4 x 2048.
  constexpr int64_t kTokens = 8192, kHidden = 2048;
  all_passes("layer_qkv", kTokens, 3 * kHidden, kHidden, {});
  all_passes("layer_proj", kTokens, kHidden, kHidden, {});
  all_passes("layer_fc1", kTokens, 4 * kHidden, kHidden, {});
  all_passes("layer_fc2", kTokens, kHidden, 4 * kHidden, {});
  // A mixture-of-experts layer: 8192 tokens routed to 8 experts of FFN width 1408, uneven
  // as a router leaves them (one expert gets nothing; no count is a multiple of 32).
  const std::vector<int64_t> experts{1720, 409, 1392, 0, 1064, 1556, 737, 1314};
  constexpr int64_t kExpertFfn = 1408;
  all_passes("moe_fc1", kTokens, kExpertFfn, kHidden, experts);
  all_passes("moe_fc2", kTokens, kHidden, kExpertFfn, experts);
  // The default `mxtrain train` model's GEMMs per micro-batch: 1024 tokens, d_model 128
  // (the attention's four 128 x 128 projections), the byte LM head, and 4 experts of d_ff
  // 256 (SwiGLU: FC1 gives 2 x 256) taking 2 x 1024 token slots, unevenly.
  all_passes("train_attn", 1024, 128, 128, {});
  all_passes("train_lm_head", 1024, 256, 128, {});
  const std::vector<int64_t> train_experts{580, 466, 531, 471};
  all_passes("train_moe_fc1", 2048, 512, 128, train_experts);
  all_passes("train_moe_fc2", 2048, 128, 256, train_experts);
  return cases;
}

bool HaveOneDnnBaseline() { return internal::HaveOneDnn(); }

std::string GemmBaselineRoute() { return internal::HaveOneDnn() ? HpGemmRoute(DType::kBF16) : ""; }

GemmBench::GemmBench(const GemmBenchCase& c)
    : case_(c), threads_(c.threads > 0 ? c.threads : omp_get_max_threads()) {
  const bool grouped = c.kind == GemmBenchKind::kGrouped;
  const int64_t m = c.m, n = c.n, k = c.k;
  const int64_t experts = grouped ? static_cast<int64_t>(c.group_counts.size()) : 1;
  MXTRAIN_CHECK(m > 0 && n > 0 && k > 0, "GEMM benchmark case ", c.name, " needs positive sizes");
  if (grouped) groups_ = GroupList::Make(c.group_counts, GroupListType::kCounts, m);

  // The MX operands, quantized in the layouts the pass takes (mxtrain/gemm.h).
  const QuantizeOptions q{ElementFormat::kE4M3, ScaleRule::kRceil, threads_};
  const Shape w_shape = grouped ? Shape{experts, n, k} : Shape{n, k};
  switch (c.gemm) {
    case GemmPass::kFprop:
      a_ = QuantizeRowwise(RandomTensor({m, k}, 1, threads_), q);   // X
      b_ = QuantizeRowwise(RandomTensor(w_shape, 2, threads_), q);  // W, blocks along K
      break;
    case GemmPass::kDgrad:
      a_ = QuantizeRowwise(RandomTensor({m, n}, 3, threads_), q);      // dY
      b_ = QuantizeColumnwise(RandomTensor(w_shape, 2, threads_), q);  // W, blocks along N
      break;
    case GemmPass::kWgrad:
      if (grouped) {  // blocks along the tokens, restarting at each expert
        a_ = QuantizeGrouped(RandomTensor({m, n}, 3, threads_), groups_, q);  // dY
        b_ = QuantizeGrouped(RandomTensor({m, k}, 1, threads_), groups_, q);  // X
      } else {
        a_ = QuantizeColumnwise(RandomTensor({m, n}, 3, threads_), q);  // dY
        b_ = QuantizeColumnwise(RandomTensor({m, k}, 1, threads_), q);  // X
      }
      break;
  }
  // Grouped or not, the groups cover all M tokens, so the flops are 2*M*N*K.
  flops_ = c.flops();
  if (grouped) {
    if (c.gemm == GemmPass::kWgrad) {  // the same data, blocked over all M tokens
      dense_a_ = QuantizeColumnwise(RandomTensor({m, n}, 3, threads_), q);
      dense_b_ = QuantizeColumnwise(RandomTensor({m, k}, 1, threads_), q);
    } else {
      dense_a_ = a_;
      dense_b_ = b_.Matrix(0);
    }
  }

  baseline_ = GemmBaselineRoute();
  if (baseline_.empty() || baseline_ == "portable") {
    baseline_.clear();
    return;
  }
  // The baseline's inputs: the MX operands' exact values in bf16 (or, where oneDNN has no
  // bf16 matmul, the same values in f32), in the same memory order, so that oneDNN reads
  // the same layouts (a transposed weight, dY^T for wgrad) and computes the same product up
  // to summation order.
  const bool bf16 = baseline_ == "onednn-bf16";
  const DType in = bf16 ? DType::kBF16 : DType::kF32;
  const Tensor a16 = Dequantize(a_, in, threads_);
  const Tensor b16 = Dequantize(b_, in, threads_);
  const int64_t in_bytes = bf16 ? 2 : 4;
  // Element offsets into the inputs as typed pointers.
  auto a = [&](int64_t offset) { return static_cast<const char*>(a16.raw()) + offset * in_bytes; };
  auto b = [&](int64_t offset) { return static_cast<const char*>(b16.raw()) + offset * in_bytes; };
  const Shape out_shape = c.gemm == GemmPass::kFprop   ? Shape{m, n}
                          : c.gemm == GemmPass::kDgrad ? Shape{m, k}
                          : grouped                    ? Shape{experts, n, k}
                                                       : Shape{n, k};
  onednn_out_ = Tensor::Zeros(DType::kF32, out_shape);
  float* out = onednn_out_.data<float>();
  // Grouped cases run one matmul per non-empty expert, as a framework without a grouped
  // kernel would (rather than one dense matmul of equal flops, which would hide the cost of
  // small and uneven groups); an empty expert's dW stays 0, as MxGroupedWgrad writes it.
  std::vector<internal::MatmulView> views;
  for (int e = 0; e < (grouped ? groups_.num_groups() : 1); ++e) {
    const int64_t t0 = grouped ? groups_.begin(e) : 0;     // first token
    const int64_t tokens = grouped ? groups_.size(e) : m;  // this expert's tokens
    if (tokens == 0) continue;
    const int64_t w0 = grouped ? e * n * k : 0;  // this expert's W [N, K] or dW [N, K]
    switch (c.gemm) {
      case GemmPass::kFprop:  // Y_e [tokens, N] = X_e [tokens, K] . (W_e [N, K])^T
        views.push_back({tokens, n, k, a(t0 * k), k, 1, b(w0), 1, k, out + t0 * n, n});
        break;
      case GemmPass::kDgrad:  // dX_e [tokens, K] = dY_e [tokens, N] . W_e [N, K]
        views.push_back({tokens, k, n, a(t0 * n), n, 1, b(w0), k, 1, out + t0 * k, k});
        break;
      case GemmPass::kWgrad:  // dW_e [N, K] = (dY_e [tokens, N])^T . X_e [tokens, K]
        views.push_back({n, k, tokens, a(t0 * n), 1, n, b(t0 * k), k, 1, out + w0, k});
        break;
    }
  }
  onednn_tensors_ = {a16, b16};
  onednn_ = internal::OneDnnMatmuls::Create(views, threads_, bf16);
}

GemmBench::~GemmBench() = default;

void GemmBench::RunMx() {
  GemmOptions o;
  o.threads = threads_;
  if (case_.kind == GemmBenchKind::kDense) {
    mx_out_ = MxGemm(a_, b_, o);
  } else if (case_.gemm == GemmPass::kWgrad) {
    mx_out_ = MxGroupedWgrad(a_, b_, o);
  } else {
    mx_out_ = MxGroupedGemm(a_, b_, groups_, o);
  }
}

void GemmBench::RunDenseTwin() {
  if (!has_dense_twin()) return;
  GemmOptions o;
  o.threads = threads_;
  dense_out_ = MxGemm(dense_a_, dense_b_, o);
}

void GemmBench::WarmUp() {
  using Clock = std::chrono::steady_clock;
  const auto end = Clock::now() + std::chrono::milliseconds(500);
  do {
    RunMx();
    RunOneDnn();
    RunDenseTwin();
  } while (Clock::now() < end);
}

void GemmBench::RunOneDnn() {
  if (onednn_) onednn_->Run();
}

std::string GemmBench::onednn_impl() const { return onednn_ ? onednn_->impl() : ""; }

std::optional<double> GemmBench::MaxRelDiff() const {
  if (!onednn_ || !mx_out_.defined()) return std::nullopt;
  MXTRAIN_CHECK(mx_out_.shape() == onednn_out_.shape(), "GEMM benchmark ", case_.name,
                ": MX output ", mx_out_.shape().ToString(), " vs oneDNN ",
                onednn_out_.shape().ToString());
  const float* x = mx_out_.data<float>();
  const float* y = onednn_out_.data<float>();
  const int64_t size = mx_out_.NumElements();
  double max_diff = 0, max_abs = 0;
#pragma omp parallel for num_threads(threads_) reduction(max : max_diff, max_abs)
  for (int64_t i = 0; i < size; ++i) {
    // NaN compares false everywhere: count it as an infinite difference.
    const double d = std::fabs(static_cast<double>(x[i]) - y[i]);
    max_diff = std::max(max_diff, d == d ? d : INFINITY);
    max_abs = std::max(max_abs, std::fabs(static_cast<double>(y[i])));
  }
  return max_abs > 0 ? max_diff / max_abs : max_diff;
}

GemmBenchResult MeasureGemmBench(const GemmBenchCase& c, int reps) {
  GemmBenchResult r;
  r.c = c;
  r.threads = c.threads > 0 ? c.threads : omp_get_max_threads();
  // The peaks first, on an idle machine, before the case's buffers exist.
  r.path = CurrentGemmPath();
  r.peak_kind = PeakKind(r.path);
  if (const std::optional<PeakResult> peak = PathPeak(r.path, r.threads)) {
    r.peak_gflops = peak->gflops;
  }
  r.amx_peak_gflops = AmxPeakGflops(r.threads);
  GemmBench bench(c);
  r.baseline = bench.baseline();
  r.onednn_impl = bench.onednn_impl();
  using Clock = std::chrono::steady_clock;
  auto time_ms = [](auto&& fn) {
    const auto t0 = Clock::now();
    fn();
    return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
  };
  bench.WarmUp();
  r.max_rel_diff = bench.MaxRelDiff();
  // Small cases run until the MX GEMM has had about kMinMs of calls (at most kMaxReps): a
  // median of three 0.2 ms calls moved by 30% from one run to the next on a shared host.
  constexpr double kMinMs = 200;
  constexpr int kMaxReps = 2000;
  const double once = time_ms([&] { bench.RunMx(); });
  const int runs = std::max(
      std::max(reps, 1),
      static_cast<int>(std::min<double>(kMaxReps, std::ceil(kMinMs / std::max(once, 1e-3)))));
  std::vector<double> mx_ms, onednn_ms, dense_ms;
  for (int i = 0; i < runs; ++i) {
    mx_ms.push_back(time_ms([&] { bench.RunMx(); }));
    if (bench.has_onednn()) onednn_ms.push_back(time_ms([&] { bench.RunOneDnn(); }));
    if (bench.has_dense_twin()) dense_ms.push_back(time_ms([&] { bench.RunDenseTwin(); }));
  }
  const double mega_flops = bench.flops() * 1e-6;  // / ms = GFLOP/s
  r.ms = Median(mx_ms);
  r.gflops = mega_flops / r.ms;
  if (bench.has_onednn()) {
    r.onednn_ms = Median(onednn_ms);
    r.onednn_gflops = mega_flops / *r.onednn_ms;
    r.ratio = r.gflops / *r.onednn_gflops;
  }
  if (bench.has_dense_twin()) {
    r.dense_ms = Median(dense_ms);
    r.dense_gflops = mega_flops / *r.dense_ms;
    r.vs_dense = r.gflops / *r.dense_gflops;
  }
  // The peaks once more, the best of all kept: a peak taken while another tenant held a
  // core would flatter the fraction. The AMX loop runs once: on the amx-bf16 path PathPeak
  // reads the best it has just kept.
  r.amx_peak_gflops = AmxPeakGflops(r.threads, /*again=*/true);
  const bool peak_is_amx = PeakKind(r.path) == "amx-bf16";
  if (const std::optional<PeakResult> peak = PathPeak(r.path, r.threads, !peak_is_amx)) {
    r.peak_gflops = peak->gflops;
  }
  if (r.peak_gflops) r.peak_fraction = r.gflops / *r.peak_gflops;
  return r;
}

std::string ToJson(const GemmBenchResult& r) {
  std::ostringstream os;
  os << "{\"case\": \"" << r.c.name << "\", \"kind\": \"" << Name(r.c.kind) << "\", \"gemm\": \""
     << Name(r.c.gemm) << "\", \"m\": " << r.c.m << ", \"n\": " << r.c.n << ", \"k\": " << r.c.k
     << ", \"groups\": " << r.c.num_groups() << ", \"ms\": " << JsonNumber(r.ms)
     << ", \"gflops\": " << JsonNumber(r.gflops)
     << ", \"onednn_gflops\": " << JsonNumber(r.onednn_gflops)
     << ", \"ratio\": " << JsonNumber(r.ratio)
     << ", \"baseline\": " << (r.baseline.empty() ? "null" : "\"" + r.baseline + "\"")
     << ", \"amx_peak_gflops\": " << JsonNumber(r.amx_peak_gflops)
     << ", \"peak_gflops\": " << JsonNumber(r.peak_gflops) << ", \"peak_kind\": \"" << r.peak_kind
     << "\", \"peak_fraction\": " << JsonNumber(r.peak_fraction) << ", \"threads\": " << r.threads
     << ", \"path\": \"" << r.path << "\", \"onednn_ms\": " << JsonNumber(r.onednn_ms)
     << ", \"onednn_impl\": " << (r.onednn_impl.empty() ? "null" : "\"" + r.onednn_impl + "\"")
     << ", \"max_rel_diff\": " << JsonNumber(r.max_rel_diff, /*scientific=*/true)
     << ", \"dense_gflops\": " << JsonNumber(r.dense_gflops)
     << ", \"vs_dense\": " << JsonNumber(r.vs_dense) << "}";
  return os.str();
}

}  // namespace mxtrain
