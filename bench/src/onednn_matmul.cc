#include "onednn_matmul.h"

#ifdef MXTRAIN_HAVE_DNNL
#include <omp.h>

#include <oneapi/dnnl/dnnl.hpp>

#include "mxtrain/error.h"
#include "omp_threads.h"
#endif

namespace mxtrain::internal {

#ifndef MXTRAIN_HAVE_DNNL

bool HaveOneDnn() { return false; }

std::unique_ptr<OneDnnMatmuls> OneDnnMatmuls::Create(const std::vector<MatmulView>&, int, bool) {
  return nullptr;
}

#else

bool HaveOneDnn() { return true; }

namespace {

class DnnlMatmuls final : public OneDnnMatmuls {
 public:
  DnnlMatmuls(const std::vector<MatmulView>& views, int threads, bool bf16)
      : threads_(threads), engine_(dnnl::engine::kind::cpu, 0), stream_(engine_) {
    using dt = dnnl::memory::data_type;
    const ScopedOmpThreads scope(threads_);
    const dt in = bf16 ? dt::bf16 : dt::f32;
    for (const MatmulView& v : views) {
      const dnnl::memory::desc a_md({v.m, v.k}, in, {v.a_stride_m, v.a_stride_k});
      const dnnl::memory::desc b_md({v.k, v.n}, in, {v.b_stride_k, v.b_stride_n});
      const dnnl::memory::desc c_md({v.m, v.n}, dt::f32, {v.c_stride_m, 1});
#if DNNL_VERSION_MAJOR >= 3
      const dnnl::matmul::primitive_desc pd(engine_, a_md, b_md, c_md);
#else
      const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a_md, b_md, c_md), engine_);
#endif
      const std::string name = pd.impl_info_str();
      if (impl_.find(name) == std::string::npos) impl_ += (impl_.empty() ? "" : "+") + name;
      // oneDNN takes non-const handles; it only reads the inputs.
      Step step{dnnl::matmul(pd), dnnl::memory(a_md, engine_, const_cast<void*>(v.a)),
                dnnl::memory(b_md, engine_, const_cast<void*>(v.b)),
                dnnl::memory(c_md, engine_, v.c)};
      steps_.push_back(std::move(step));
    }
  }

  void Run() override {
    const ScopedOmpThreads scope(threads_);
    for (Step& s : steps_) {
      s.matmul.execute(stream_,
                       {{DNNL_ARG_SRC, s.a}, {DNNL_ARG_WEIGHTS, s.b}, {DNNL_ARG_DST, s.c}});
    }
    stream_.wait();
  }

  std::string impl() const override { return impl_; }

 private:
  struct Step {
    dnnl::matmul matmul;
    dnnl::memory a, b, c;
  };
  int threads_;
  dnnl::engine engine_;
  dnnl::stream stream_;
  std::vector<Step> steps_;
  std::string impl_;
};

}  // namespace

std::unique_ptr<OneDnnMatmuls> OneDnnMatmuls::Create(const std::vector<MatmulView>& views,
                                                     int threads, bool bf16) {
  try {
    return std::make_unique<DnnlMatmuls>(views, threads, bf16);
  } catch (const dnnl::error& e) {
    Fail("oneDNN baseline: cannot create a ", bf16 ? "bf16" : "f32",
         " matmul primitive: ", e.what());
  }
}

#endif  // MXTRAIN_HAVE_DNNL

}  // namespace mxtrain::internal
