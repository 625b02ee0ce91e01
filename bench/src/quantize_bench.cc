#include <emmintrin.h>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <random>
#include <sstream>

#include "bench_util.h"
#include "mxtrain/bench/bench.h"
#include "mxtrain/error.h"
#include "mxtrain/simd.h"

namespace mxtrain {

using internal::Median;

std::string_view Name(QuantizeKind kind) {
  switch (kind) {
    case QuantizeKind::kRowwise:
      return "rowwise";
    case QuantizeKind::kColumnwise:
      return "columnwise";
    case QuantizeKind::kDual:
      return "dual";
    case QuantizeKind::kGrouped:
      return "grouped";
  }
  return "?";
}

std::vector<QuantizeBenchCase> StandardQuantizeBenchCases() {
  std::vector<QuantizeBenchCase> cases;
  const std::pair<int64_t, int64_t> shapes[] = {{4096, 4096}, {256, 1024}};
  for (auto [m, k] : shapes) {
    for (int threads : {1, 2}) {
      for (DType dtype : {DType::kF32, DType::kBF16}) {
        for (QuantizeKind kind : {QuantizeKind::kRowwise, QuantizeKind::kColumnwise,
                                  QuantizeKind::kDual, QuantizeKind::kGrouped}) {
          cases.push_back({kind, dtype, m, k, threads});
        }
      }
    }
  }
  return cases;
}

namespace {

// 8 experts with uneven token counts (none a multiple of 32, one empty) summing to m.
GroupList BenchGroups(int64_t m) {
  const double weights[] = {0.21, 0.05, 0.17, 0.0, 0.13, 0.19, 0.09};
  std::vector<int64_t> counts;
  int64_t used = 0;
  for (double w : weights) {
    int64_t n = static_cast<int64_t>(w * static_cast<double>(m));
    if (n % 32 == 0 && n > 0) n -= 3;
    counts.push_back(n);
    used += n;
  }
  counts.push_back(m - used);
  return GroupList::Make(counts, GroupListType::kCounts, m);
}

// Codes and scales of a rowwise quantization of [m, k].
int64_t RowwiseBytes(const QuantizeBenchCase& c) { return c.m * c.k + c.m * CeilDiv(c.k, 32); }

int64_t OutputBytes(const QuantizeBenchCase& c, const GroupList& groups) {
  const int64_t columnwise = c.m * c.k + CeilDiv(c.m, 32) * c.k;
  switch (c.kind) {
    case QuantizeKind::kRowwise:
      return RowwiseBytes(c);
    case QuantizeKind::kColumnwise:
      return columnwise;
    case QuantizeKind::kDual:
      return RowwiseBytes(c) + columnwise;
    case QuantizeKind::kGrouped:
      return c.m * c.k + groups.ScaleRows() * c.k;
  }
  return 0;
}

// memcpy with 16-byte non-temporal stores (the ends that are not 16-byte aligned by
// memcpy); the caller fences.
void StreamCopy(uint8_t* dst, const uint8_t* src, int64_t n) {
  const int64_t head = std::min<int64_t>(n, (16 - reinterpret_cast<uintptr_t>(dst) % 16) % 16);
  std::memcpy(dst, src, static_cast<size_t>(head));
  int64_t i = head;
  for (; i + 16 <= n; i += 16) {
    _mm_stream_si128(reinterpret_cast<__m128i*>(dst + i),
                     _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i)));
  }
  std::memcpy(dst + i, src + i, static_cast<size_t>(n - i));
}

}  // namespace

QuantizeBench::QuantizeBench(const QuantizeBenchCase& c) : case_(c) {
  MXTRAIN_CHECK(c.dtype == DType::kF32 || c.dtype == DType::kBF16,
                "benchmark input must be f32 or bf16");
  input_ = Tensor::Empty(c.dtype, {c.m, c.k});
  std::mt19937 rng(42);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (int64_t i = 0; i < c.m * c.k; ++i) {
    const float v = normal(rng);
    if (c.dtype == DType::kF32) {
      input_.data<float>()[i] = v;
    } else {
      input_.data<uint16_t>()[i] = F32ToBf16(v);
    }
  }
  groups_ = BenchGroups(c.m);
  output_bytes_ = OutputBytes(c, groups_);
  QuantizeOptions o;
  o.code_stores = c.code_stores;
  streams_ = c.kind != QuantizeKind::kRowwise && StreamsColumnwiseCodes(input_, o);
  // Dual's output is its rowwise half (codes, scales) and then its columnwise half; the
  // baseline streams its rowwise half where the kernel streams its rowwise codes
  // (StreamsDualRowwiseCodes: on AVX-512, where K is whole blocks).
  const bool rowwise_streams = c.kind == QuantizeKind::kDual && StreamsDualRowwiseCodes(input_, o);
  const int64_t rowwise_half = c.kind == QuantizeKind::kDual ? RowwiseBytes(c) : 0;
  streamed_from_ = streams_ ? (rowwise_streams ? 0 : rowwise_half) : output_bytes_;
}

void QuantizeBench::RunKernel(bool other_stores) {
  QuantizeOptions o{ElementFormat::kE4M3, ScaleRule::kRceil, case_.threads};
  o.code_stores = case_.code_stores;
  if (other_stores) o.code_stores = streams_ ? CodeStores::kCached : CodeStores::kStreaming;
  switch (case_.kind) {
    case QuantizeKind::kRowwise:
      QuantizeRowwise(input_, o);
      break;
    case QuantizeKind::kColumnwise:
      QuantizeColumnwise(input_, o);
      break;
    case QuantizeKind::kDual:
      QuantizeDual(input_, o);
      break;
    case QuantizeKind::kGrouped:
      QuantizeGrouped(input_, groups_, o);
      break;
  }
}

void QuantizeBench::RunBaseline() {
  // The output is allocated per call, as the quantizers allocate theirs.
  Tensor out = Tensor::Empty(DType::kU8, {output_bytes_});
  const auto* in = static_cast<const uint8_t*>(input_.raw());
  auto* dst = out.data<uint8_t>();
  const int64_t in_bytes = input_bytes();
  constexpr int64_t kPiece = 64 << 10;
  const int64_t pieces = CeilDiv(in_bytes, kPiece);
  uint64_t sink = 0;
#pragma omp parallel for num_threads(case_.threads) schedule(static) reduction(^ : sink)
  for (int64_t p = 0; p < pieces; ++p) {
    const int64_t begin = p * kPiece;
    const int64_t len = std::min(kPiece, in_bytes - begin);
    uint64_t acc = 0;
    for (int64_t i = 0; i + 8 <= len; i += 8) {
      uint64_t word;
      std::memcpy(&word, in + begin + i, 8);
      acc ^= word;
    }
    sink ^= acc;
    // This piece's share of each part of the output (the cached part, then the streamed
    // one: each thread writes both, as the kernels do), copied from the piece just read.
    const int64_t parts[2][2] = {{0, streamed_from_}, {streamed_from_, output_bytes_}};
    for (int part = 0; part < 2; ++part) {
      const int64_t size = parts[part][1] - parts[part][0];
      const int64_t out_begin = parts[part][0] + size * begin / in_bytes;
      const int64_t out_end = parts[part][0] + size * (begin + len) / in_bytes;
      for (int64_t o = out_begin; o < out_end; o += len) {
        const int64_t n = std::min(len, out_end - o);
        if (part == 1) {
          StreamCopy(dst + o, in + begin, n);
        } else {
          std::memcpy(dst + o, in + begin, static_cast<size_t>(n));
        }
      }
    }
  }
  if (streams_) _mm_sfence();
  sink_ ^= sink;
}

QuantizeBenchResult MeasureQuantizeBench(const QuantizeBenchCase& c, int reps) {
  QuantizeBench bench(c);
  using Clock = std::chrono::steady_clock;
  auto time_ms = [](auto&& fn) {
    const auto t0 = Clock::now();
    fn();
    return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
  };
  for (int i = 0; i < 2; ++i) {  // warm-up: page in buffers, settle the allocator
    bench.RunKernel();
    bench.RunBaseline();
  }
  const bool other = c.kind != QuantizeKind::kRowwise;
  if (other) bench.RunKernel(/*other_stores=*/true);
  std::vector<double> kernel_ms, baseline_ms, other_ms;
  for (int i = 0; i < std::max(reps, 1); ++i) {
    kernel_ms.push_back(time_ms([&] { bench.RunKernel(); }));
    baseline_ms.push_back(time_ms([&] { bench.RunBaseline(); }));
    if (other) other_ms.push_back(time_ms([&] { bench.RunKernel(/*other_stores=*/true); }));
  }
  QuantizeBenchResult r;
  r.c = c;
  r.target = CurrentSimdTarget();
  r.ms = Median(kernel_ms);
  r.baseline_ms = Median(baseline_ms);
  const double bytes = static_cast<double>(bench.input_bytes() + bench.output_bytes());
  r.gbps = bytes / (r.ms * 1e6);
  r.baseline_gbps = bytes / (r.baseline_ms * 1e6);
  r.ratio = r.gbps / r.baseline_gbps;
  r.streams = bench.streams();
  if (other) r.other_stores_ms = Median(other_ms);
  return r;
}

std::string ToJson(const QuantizeBenchResult& r) {
  std::ostringstream os;
  os.setf(std::ios::fixed);
  os.precision(4);
  os << "{\"case\": \"" << Name(r.c.kind) << "\", \"dtype\": \"" << Name(r.c.dtype)
     << "\", \"shape\": [" << r.c.m << ", " << r.c.k << "], \"threads\": " << r.c.threads
     << ", \"ms\": " << r.ms << ", \"gbps\": " << r.gbps
     << ", \"baseline_gbps\": " << r.baseline_gbps << ", \"ratio\": " << r.ratio
     << ", \"baseline_ms\": " << r.baseline_ms << ", \"target\": \"" << r.target
     << "\", \"code_stores\": \"" << Name(r.streams ? CodeStores::kStreaming : CodeStores::kCached)
     << "\"";
  if (r.other_stores_ms) os << ", \"other_stores_ms\": " << *r.other_stores_ms;
  os << "}";
  return os.str();
}

}  // namespace mxtrain
