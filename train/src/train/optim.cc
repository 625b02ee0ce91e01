// AdamW, gradient clipping and the learning-rate schedule (optim.h).
#include "mxtrain/train/optim.h"

#include <cmath>
#include <cstring>

#include "mxtrain/error.h"
#include "omp_threads.h"

namespace mxtrain {

double LrSchedule::At(int64_t step) const {
  if (warmup_steps > 0 && step <= warmup_steps) {
    return peak_lr * static_cast<double>(step) / static_cast<double>(warmup_steps);
  }
  if (step >= total_steps) return min_lr;
  const double span = static_cast<double>(total_steps - warmup_steps);
  const double progress = span > 0 ? static_cast<double>(step - warmup_steps) / span : 1.0;
  return min_lr + 0.5 * (peak_lr - min_lr) * (1.0 + std::cos(3.141592653589793 * progress));
}

double ClipGradNorm(const std::vector<std::shared_ptr<Parameter>>& params, double max_norm) {
  double ss = 0;
  for (const auto& p : params) {
    if (!p->has_main_grad()) continue;
    const float* g = p->main_grad().data<float>();
    const int64_t n = p->main_grad().NumElements();
    for (int64_t i = 0; i < n; ++i) ss += static_cast<double>(g[i]) * g[i];
  }
  const double norm = std::sqrt(ss);
  ClipGradsToNorm(params, norm, max_norm);
  return norm;
}

void ClipGradsToNorm(const std::vector<std::shared_ptr<Parameter>>& params, double norm,
                     double max_norm) {
  if (!(max_norm > 0 && norm > max_norm && std::isfinite(norm))) return;
  const float scale = static_cast<float>(max_norm / norm);
  for (const auto& p : params) {
    if (!p->has_main_grad()) continue;
    float* g = p->main_grad().data<float>();
    const int64_t n = p->main_grad().NumElements();
    for (int64_t i = 0; i < n; ++i) g[i] *= scale;
  }
}

AdamW::AdamW(std::vector<std::shared_ptr<Parameter>> params, AdamWOptions options)
    : params_(std::move(params)), options_(options) {
  for (const auto& p : params_) {
    MXTRAIN_CHECK(p->value().dtype() == DType::kF32, "adamw: parameter '", p->name(),
                  "' must hold fp32 master weights, got ", Name(p->value().dtype()));
    m_.push_back(Tensor::Zeros(DType::kF32, p->shape(), MemoryCategory::kGradient));
    v_.push_back(Tensor::Zeros(DType::kF32, p->shape(), MemoryCategory::kGradient));
  }
}

void AdamW::Step(double lr, WeightQuantCache* cache) {
  const int threads = internal::TeamSize(options_.threads, "adamw");
  ++step_;
  const double b1 = options_.beta1, b2 = options_.beta2;
  const double c1 = 1.0 - std::pow(b1, static_cast<double>(step_));
  const double c2 = 1.0 - std::pow(b2, static_cast<double>(step_));
  const float step_size = static_cast<float>(lr / c1);
  const float inv_sqrt_c2 = static_cast<float>(1.0 / std::sqrt(c2));
  const float eps = static_cast<float>(options_.eps);
  const float fb1 = static_cast<float>(b1), fb2 = static_cast<float>(b2);
  // Every element on its own, so any split over threads and vector lanes gives the same
  // bytes (IEEE sqrt and division, no contraction: MXTRAIN_STRICT_FP). One region for all
  // parameters, each thread its share of each (the serial loop was 2.6% of the main job's
  // MXFP8 step on Zen 4, the other thread waiting).
#pragma omp parallel num_threads(threads)
  {
    for (size_t i = 0; i < params_.size(); ++i) {
      Parameter& p = *params_[i];
      const float decay =
          p.shape().rank() >= 2 ? static_cast<float>(1.0 - lr * options_.weight_decay) : 1.0f;
      float* const w = p.value().data<float>();
      float* const g = p.main_grad().data<float>();
      float* const m = m_[i].data<float>();
      float* const v = v_[i].data<float>();
      const internal::ThreadShare share(p.value().NumElements());
#pragma omp simd
      for (int64_t j = share.begin; j < share.end; ++j) {
        m[j] = fb1 * m[j] + (1.0f - fb1) * g[j];
        v[j] = fb2 * v[j] + (1.0f - fb2) * g[j] * g[j];
        const float denom = std::sqrt(v[j]) * inv_sqrt_c2 + eps;
        w[j] = w[j] * decay - step_size * m[j] / denom;
        g[j] = 0.0f;
      }
    }
  }
  for (const auto& p : params_) p->MarkModified();
  if (cache != nullptr) cache->Clear();
}

void AdamW::LoadState(int64_t step, const std::vector<Tensor>& exp_avg,
                      const std::vector<Tensor>& exp_avg_sq) {
  MXTRAIN_CHECK(step >= 0, "adamw: negative step ", step);
  MXTRAIN_CHECK(exp_avg.size() == params_.size() && exp_avg_sq.size() == params_.size(),
                "adamw: state for ", exp_avg.size(), " parameters, the model has ", params_.size());
  for (size_t i = 0; i < params_.size(); ++i) {
    for (const Tensor* t : {&exp_avg[i], &exp_avg_sq[i]}) {
      MXTRAIN_CHECK(t->dtype() == DType::kF32 && t->shape() == params_[i]->shape(),
                    "adamw: state of '", params_[i]->name(), "' has shape ", t->shape().ToString(),
                    ", the parameter ", params_[i]->shape().ToString());
    }
    std::memcpy(m_[i].raw(), exp_avg[i].raw(), m_[i].NumBytes());
    std::memcpy(v_[i].raw(), exp_avg_sq[i].raw(), v_[i].NumBytes());
  }
  step_ = step;
}

}  // namespace mxtrain
