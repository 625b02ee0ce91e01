// High-precision GEMM (hp_gemm.h): validation and operand rounding here, then oneDNN's
// matmul on strided views (no transposed copies) or the portable loops. Where oneDNN has no
// bf16 matmul (below avx512_core, or capped by ONEDNN_MAX_CPU_ISA), a bf16 GEMM runs as
// oneDNN's f32 matmul on the bf16-rounded operands widened to fp32: products of two bf16
// values are exact in fp32, so only the summation order differs from a native bf16 matmul.
#include "mxtrain/hp_gemm.h"

#include <omp.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <mutex>
#include <tuple>

#include "convert.h"
#include "fp_env.h"
#include "gemm/grouped.h"
#include "gemm/kernels.h"
#include "mxtrain/elementwise.h"
#include "mxtrain/error.h"
#include "mxtrain/testing.h"
#include "omp_threads.h"
#include "simd_internal.h"

#ifdef MXTRAIN_HAVE_DNNL
#include <oneapi/dnnl/dnnl.hpp>
#endif

namespace mxtrain {
namespace {

std::mutex g_hp_path_mutex;
std::string g_hp_forced_path;

// One operand as the GEMM sees it: a logical [free, S] matrix stored [free, S] or [S, free].
struct HpView {
  Tensor t;  // f32 or bf16, already rounded to the compute type
  bool contract_first;
  int64_t free;
  int64_t s;
};

// `widen`: a bf16 compute type on an fp32 matmul (the "onednn-f32" path): the operand is
// rounded to bf16, then widened exactly to fp32.
HpView ViewOf(const Tensor& t, Contract c, DType compute, bool widen, int threads,
              const char* name) {
  MXTRAIN_CHECK(
      t.defined() && t.rank() == 2 && (t.dtype() == DType::kF32 || t.dtype() == DType::kBF16),
      "hp gemm: ", name, " must be a 2-D f32 or bf16 tensor");
  const bool first = c == Contract::kFirst;
  // Rounding to the compute type is the only copy: bf16 operands for a bf16 GEMM, f32 for
  // f32, and for `widen` an fp32 operand rounded to bf16 within fp32 in one pass (a bf16
  // copy widened took two: 6.3-6.9 against 4.0-4.6 ms for 4096 x 4096, 2 threads, AVX2,
  // Zen 4); a bf16 operand is widened.
  Tensor rounded;
  if (widen && t.dtype() == DType::kF32) {
    rounded = Tensor::Empty(DType::kF32, t.shape(), MemoryCategory::kWorkspace);
    const float* src = t.const_data<float>();
    float* dst = rounded.mutable_data<float>();
    const int64_t n = t.NumElements();
    internal::EnsureSimdTargetChosen();
#pragma omp parallel num_threads(threads) if (n > (1 << 16))
    {
      const internal::ThreadShare share(n);
      internal::RoundToBf16(src + share.begin, share.end - share.begin, dst + share.begin);
    }
  } else {
    rounded = CastTo(t, widen ? DType::kF32 : compute, MemoryCategory::kWorkspace, threads);
  }
  return HpView{std::move(rounded), first, first ? t.shape()[1] : t.shape()[0],
                first ? t.shape()[0] : t.shape()[1]};
}

// Element (f, k) of a view as fp32.
inline float At(const HpView& v, int64_t f, int64_t k) {
  const int64_t idx = v.contract_first ? k * v.free + f : f * v.s + k;
  return v.t.dtype() == DType::kBF16 ? Bf16ToF32(v.t.const_data<uint16_t>()[idx])
                                     : v.t.const_data<float>()[idx];
}

// The portable path: B packed as fp32 [S, J] once, then for each block of 4 rows of C the
// sum over s in order, vectorized over j (no reassociation: the order is fixed by s).
void HpGemmPortable(const HpView& a, const HpView& b, float* c, bool overwrite, int threads) {
  MXTRAIN_DCHECK(a.s == b.s && a.t.dtype() == b.t.dtype() && c != nullptr && threads >= 1);
  const int64_t rows = a.free, cols = b.free, s_len = a.s;
  Tensor bt = Tensor::Empty(DType::kF32, {s_len, cols}, MemoryCategory::kWorkspace);
  float* bp = bt.mutable_data<float>();
#pragma omp parallel num_threads(threads)
  {
    const internal::ScopedFpEnv fp_env;
#pragma omp for schedule(static)
    for (int64_t k = 0; k < s_len; ++k) {
      for (int64_t j = 0; j < cols; ++j) bp[k * cols + j] = At(b, j, k);
    }
  }
  constexpr int64_t kRows = 4;
#pragma omp parallel num_threads(threads)
  {
    const internal::ScopedFpEnv fp_env;
#pragma omp for schedule(dynamic)
    for (int64_t i0 = 0; i0 < rows; i0 += kRows) {
      const int64_t i1 = std::min(rows, i0 + kRows);
      if (overwrite) std::memset(c + i0 * cols, 0, sizeof(float) * (i1 - i0) * cols);
      for (int64_t k = 0; k < s_len; ++k) {
        const float* brow = bp + k * cols;
        for (int64_t i = i0; i < i1; ++i) {
          const float av = At(a, i, k);
          float* crow = c + i * cols;
          for (int64_t j = 0; j < cols; ++j) crow[j] += av * brow[j];
        }
      }
    }
  }
}

#ifdef MXTRAIN_HAVE_DNNL

// Primitives by problem: a training step runs the same shapes every micro-batch, and
// creating a primitive descriptor costs far more than a small matmul.
struct PrimitiveKey {
  int64_t m, n, k;
  int64_t a_sm, a_sk, b_sk, b_sn;
  bool bf16, accumulate;
  int threads;
  auto Tie() const { return std::tie(m, n, k, a_sm, a_sk, b_sk, b_sn, bf16, accumulate, threads); }
  bool operator<(const PrimitiveKey& o) const { return Tie() < o.Tie(); }
};

struct Primitive {
  dnnl::matmul matmul;
  dnnl::memory::desc a_md, b_md, c_md, scratch_md;
};

class OneDnn {
 public:
  static OneDnn& Get() {
    static OneDnn* instance = new OneDnn();  // never destroyed: may run at exit
    return *instance;
  }

  void Run(const HpView& a, const HpView& b, float* c, bool accumulate, int threads) {
    MXTRAIN_DCHECK(a.s == b.s && a.t.dtype() == b.t.dtype() && c != nullptr && threads >= 1);
    using dt = dnnl::memory::data_type;
    const bool bf16 = a.t.dtype() == DType::kBF16;
    // A [M, K]: element (i, s) at i * a_sm + s * a_sk; B [K, N]: (s, j) at s * b_sk + j * b_sn.
    const PrimitiveKey key{a.free,
                           b.free,
                           a.s,
                           a.contract_first ? 1 : a.s,
                           a.contract_first ? a.free : 1,
                           b.contract_first ? b.free : 1,
                           b.contract_first ? 1 : b.s,
                           bf16,
                           accumulate,
                           threads};
    const internal::ScopedOmpThreads scope(threads);
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = primitives_.find(key);
    if (it == primitives_.end()) {
      const dt type = bf16 ? dt::bf16 : dt::f32;
      Primitive p;
      p.a_md = dnnl::memory::desc({key.m, key.k}, type, {key.a_sm, key.a_sk});
      p.b_md = dnnl::memory::desc({key.k, key.n}, type, {key.b_sk, key.b_sn});
      p.c_md = dnnl::memory::desc({key.m, key.n}, dt::f32, {key.n, 1});
      dnnl::primitive_attr attr;
      attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);  // counted as workspace
      if (accumulate) {
        dnnl::post_ops ops;
        ops.append_sum(1.0f);
        attr.set_post_ops(ops);
      }
      try {
#if DNNL_VERSION_MAJOR >= 3
        const dnnl::matmul::primitive_desc pd(engine_, p.a_md, p.b_md, p.c_md, attr);
#else
        const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(p.a_md, p.b_md, p.c_md), attr,
                                              engine_);
#endif
        p.scratch_md = pd.scratchpad_desc();
        p.matmul = dnnl::matmul(pd);
      } catch (const dnnl::error& e) {
        Fail("hp gemm: oneDNN cannot create a matmul for ", key.m, "x", key.n, "x", key.k, ": ",
             e.what());
      }
      it = primitives_.emplace(key, std::move(p)).first;
    }
    Primitive& p = it->second;
    Tensor scratch = Tensor::Empty(DType::kU8, {static_cast<int64_t>(p.scratch_md.get_size())},
                                   MemoryCategory::kWorkspace);
    // oneDNN takes non-const handles; it only reads the inputs.
    dnnl::memory am(p.a_md, engine_, a.t.raw());
    dnnl::memory bm(p.b_md, engine_, b.t.raw());
    dnnl::memory cm(p.c_md, engine_, c);
    dnnl::memory sm(p.scratch_md, engine_, scratch.raw());
    p.matmul.execute(stream_, {{DNNL_ARG_SRC, am},
                               {DNNL_ARG_WEIGHTS, bm},
                               {DNNL_ARG_DST, cm},
                               {DNNL_ARG_SCRATCHPAD, sm}});
    stream_.wait();
  }

 private:
  OneDnn() : engine_(dnnl::engine::kind::cpu, 0), stream_(engine_) {}

  std::mutex mutex_;
  dnnl::engine engine_;
  dnnl::stream stream_;
  std::map<PrimitiveKey, Primitive> primitives_;
};

// Whether oneDNN builds a bf16 matmul that is not its reference loop, asked once per
// process with a small problem: oneDNN 2.6 has none below avx512_core, and
// ONEDNN_MAX_CPU_ISA (read by oneDNN at its first use) caps the ISA it may use.
bool OneDnnHasBf16Matmul() {
  static const bool has = [] {
    using dt = dnnl::memory::data_type;
    try {
      const dnnl::engine engine(dnnl::engine::kind::cpu, 0);
      const dnnl::memory::desc a({64, 64}, dt::bf16, {64, 1});
      const dnnl::memory::desc c({64, 64}, dt::f32, {64, 1});
#if DNNL_VERSION_MAJOR >= 3
      const dnnl::matmul::primitive_desc pd(engine, a, a, c);
#else
      const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a, a, c), engine);
#endif
      return std::string(pd.impl_info_str()).rfind("ref", 0) != 0;
    } catch (const dnnl::error&) {
      return false;
    }
  }();
  return has;
}

#endif  // MXTRAIN_HAVE_DNNL

}  // namespace

std::vector<std::string> AvailableHpGemmPaths() {
  std::vector<std::string> paths;
#ifdef MXTRAIN_HAVE_DNNL
  if (OneDnnHasBf16Matmul()) paths.push_back("onednn-bf16");
  paths.push_back("onednn-f32");
#endif
  paths.push_back("portable");
  return paths;
}

std::string HpGemmRoute(DType compute) {
  const std::string path = CurrentHpGemmPath();
  if (path == "onednn-bf16") return compute == DType::kBF16 ? "onednn-bf16" : "onednn-f32";
  return path;
}

void ForceHpGemmPath(const std::string& name) {
  if (!name.empty()) {
    const std::vector<std::string> paths = AvailableHpGemmPaths();
    MXTRAIN_CHECK(std::find(paths.begin(), paths.end(), name) != paths.end(),
                  "unknown or unavailable high-precision GEMM path '", name, "'");
  }
  std::lock_guard<std::mutex> lock(g_hp_path_mutex);
  g_hp_forced_path = name;
}

std::string CurrentHpGemmPath() {
  {
    std::lock_guard<std::mutex> lock(g_hp_path_mutex);
    if (!g_hp_forced_path.empty()) return g_hp_forced_path;
  }
  return AvailableHpGemmPaths().front();
}

Tensor HpGemm(const Tensor& a, Contract a_contract, const Tensor& b, Contract b_contract,
              DType compute, const GemmOptions& options) {
  const internal::ScopedFpEnv fp_env;
  MXTRAIN_CHECK(compute == DType::kF32 || compute == DType::kBF16,
                "hp gemm: compute type must be f32 or bf16, got ", Name(compute));
  const int threads = internal::TeamSize(options.threads, "hp gemm");
  const std::string path = CurrentHpGemmPath();
  const bool widen = compute == DType::kBF16 && path == "onednn-f32";
  const HpView av = ViewOf(a, a_contract, compute, widen, threads, "A");
  const HpView bv = ViewOf(b, b_contract, compute, widen, threads, "B");
  MXTRAIN_CHECK(av.s == bv.s, "hp gemm: contraction lengths differ: A ", a.shape().ToString(),
                " contracts ", av.s, ", B ", b.shape().ToString(), " contracts ", bv.s);
  internal::CheckGemmOutputOptions(av.free, bv.free, options, "hp gemm");
  Tensor c32 = internal::GemmResultBuffer(av.free, bv.free, av.s == 0, options);
  if (av.free > 0 && bv.free > 0 && av.s > 0) {
    const bool accumulate = options.accumulate != nullptr;
#ifdef MXTRAIN_HAVE_DNNL
    if (path != "portable") {
      OneDnn::Get().Run(av, bv, c32.mutable_data<float>(), accumulate, threads);
      return internal::FinishGemm(std::move(c32), options, threads);
    }
#endif
    HpGemmPortable(av, bv, c32.mutable_data<float>(), !accumulate, threads);
  }
  return internal::FinishGemm(std::move(c32), options, threads);
}

Tensor HpGroupedGemm(const Tensor& x, const Tensor& w, Contract w_contract, const GroupList& groups,
                     DType compute, const GemmOptions& options) {
  const internal::ScopedFpEnv fp_env;
  MXTRAIN_CHECK(x.defined() && x.rank() == 2, "hp grouped gemm: x must be 2-D [M, S]");
  MXTRAIN_CHECK(w.defined() && w.rank() == 3, "hp grouped gemm: w must be 3-D [E, R, C], got ",
                w.shape().ToString());
  const int64_t out_cols = w_contract == Contract::kLast ? w.shape()[1] : w.shape()[2];
  return internal::GroupedRowsGemm(
      groups, w.shape()[0], x.shape()[0], out_cols, options, "hp grouped gemm",
      internal::GroupThreads::kAllThreads, [&](int e, const GemmOptions& o) {
        HpGemm(x.Slice(groups.begin(e), groups.end(e)), Contract::kLast,
               w.Slice(e, e + 1).Reshape({w.shape()[1], w.shape()[2]}), w_contract, compute, o);
      });
}

Tensor HpGroupedWgrad(const Tensor& dy, const Tensor& x, const GroupList& groups, DType compute,
                      const GemmOptions& options) {
  const internal::ScopedFpEnv fp_env;
  MXTRAIN_CHECK(dy.defined() && x.defined() && dy.rank() == 2 && x.rank() == 2 &&
                    dy.shape()[0] == groups.total_rows() && x.shape()[0] == groups.total_rows(),
                "hp grouped wgrad: dy ", dy.shape().ToString(), " and x ", x.shape().ToString(),
                " must be 2-D with the group list's ", groups.total_rows(), " rows");
  const Shape shape{groups.num_groups(), dy.shape()[1], x.shape()[1]};
  return internal::GroupedWgradGemm(
      groups, shape, options, "hp grouped wgrad", internal::GroupThreads::kAllThreads,
      [&](int e, const GemmOptions& o) {
        HpGemm(dy.Slice(groups.begin(e), groups.end(e)), Contract::kFirst,
               x.Slice(groups.begin(e), groups.end(e)), Contract::kFirst, compute, o);
      });
}

}  // namespace mxtrain
