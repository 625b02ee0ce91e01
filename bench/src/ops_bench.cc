#include "mxtrain/bench/ops_bench.h"

#include <omp.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <memory>
#include <sstream>

#include "bench_util.h"
#include "mxtrain/elementwise.h"
#include "mxtrain/error.h"
#include "mxtrain/gemm.h"
#include "mxtrain/grouped_linear.h"
#include "mxtrain/hp_gemm.h"
#include "mxtrain/linear.h"

namespace mxtrain {

using internal::JsonNumber;
using internal::Median;
using internal::RandomTensor;

std::vector<OpsBenchCase> StandardOpsBenchCases(int64_t tokens, int64_t hidden) {
  MXTRAIN_CHECK(tokens >= 8 && hidden >= 16 && hidden % 16 == 0,
                "ops bench: tokens must be >= 8 and hidden a multiple of 16 (>= 16), got ", tokens,
                " and ", hidden);
  // Uneven expert loads as a router leaves them, one expert empty (scaled from the GEMM
  // benchmark's 8192-token split).
  auto experts = [](int64_t t) {
    const std::vector<int64_t> weights{1720, 409, 1392, 0, 1064, 1556, 737, 1314};
    std::vector<int64_t> counts;
    int64_t used = 0;
    for (size_t e = 0; e + 1 < weights.size(); ++e) {
      counts.push_back(weights[e] * t / 8192);
      used += counts.back();
    }
    counts.push_back(t - used);
    return counts;
  };
  std::vector<OpsBenchCase> cases;
  cases.push_back({"smoke_transformer", false, 70, 64, 256, {}});
  cases.push_back({"smoke_moe", true, 100, 64, 48, {37, 0, 45, 18}});
  cases.push_back({"transformer", false, tokens, hidden, 4 * hidden, {}});
  cases.push_back({"moe", true, tokens, hidden, hidden * 11 / 16, experts(tokens)});
  return cases;
}

std::string OpsBenchConfig::Name() const {
  if (precision != Precision::kMxfp8) return std::string(mxtrain::Name(precision));
  return StrCat("mxfp8 input=", mxtrain::Name(input_policy),
                " weight=", mxtrain::Name(weight_policy), reuse ? " reuse" : "");
}

Recipe OpsBenchConfig::MakeRecipe() const {
  RecipeOptions o;
  o.precision = precision;
  if (precision == Precision::kMxfp8) {
    o.input_policy = input_policy;
    o.weight_policy = weight_policy;
    o.reuse_quantized_weights = reuse;
  }
  return Recipe::Make(o);
}

std::vector<OpsBenchConfig> StandardOpsBenchConfigs() {
  std::vector<OpsBenchConfig> configs{{Precision::kBf16}};
  for (bool reuse : {false, true}) {
    for (SavePolicy ip : {SavePolicy::kQuantized, SavePolicy::kDeferred}) {
      for (SavePolicy wp : {SavePolicy::kQuantized, SavePolicy::kDeferred}) {
        configs.push_back({Precision::kMxfp8, ip, wp, reuse});
      }
    }
  }
  for (bool reuse : {false, true}) {
    configs.push_back({Precision::kMxfp8, SavePolicy::kAuto, SavePolicy::kAuto, reuse});
  }
  return configs;
}

namespace {

// One layer's shape in the stack: y [tokens, out] = x [tokens, in] . W^T.
struct LayerShape {
  const char* name;
  int64_t in, out;
};

std::vector<LayerShape> Shapes(const OpsBenchCase& c) {
  if (c.moe) return {{"expert_fc1", c.hidden, c.ffn}, {"expert_fc2", c.ffn, c.hidden}};
  return {{"qkv", c.hidden, 3 * c.hidden},
          {"proj", c.hidden, c.hidden},
          {"fc1", c.hidden, c.ffn},
          {"fc2", c.ffn, c.hidden}};
}

Tensor Bf16Random(Shape shape, uint64_t seed, float scale, int threads) {
  Tensor f = RandomTensor(std::move(shape), seed, threads);
  for (int64_t i = 0; i < f.NumElements(); ++i) f.data<float>()[i] *= scale;
  return CastTo(f, DType::kBF16, MemoryCategory::kActivation, threads);
}

// What every config shares: weights (fp32 masters with their main_grad), the bf16 inputs
// and output gradients of each layer.
struct SharedState {
  std::vector<std::shared_ptr<Parameter>> weights;
  std::vector<Tensor> inputs, output_grads;
  GroupList groups;
};

SharedState MakeShared(const OpsBenchCase& c, int threads) {
  SharedState s;
  const int64_t experts = c.moe ? static_cast<int64_t>(c.group_counts.size()) : 1;
  if (c.moe) s.groups = GroupList::Make(c.group_counts, GroupListType::kCounts, c.tokens);
  uint64_t seed = 1;
  for (const LayerShape& l : Shapes(c)) {
    const Shape ws = c.moe ? Shape{experts, l.out, l.in} : Shape{l.out, l.in};
    Tensor w = RandomTensor(ws, seed++, threads);
    const float scale = 1.0f / std::sqrt(static_cast<float>(l.in));
    for (int64_t i = 0; i < w.NumElements(); ++i) w.data<float>()[i] *= scale;
    s.weights.push_back(
        std::make_shared<Parameter>(std::move(w), StrCat("layer", s.weights.size())));
    s.weights.back()->ZeroMainGrad();
    s.inputs.push_back(Bf16Random({c.tokens, l.in}, seed++, 1.0f, threads));
    s.output_grads.push_back(Bf16Random({c.tokens, l.out}, seed++, 1e-3f, threads));
  }
  return s;
}

// One config's layers over the shared parameters, and its weight cache.
class Stack {
 public:
  Stack(const OpsBenchCase& c, const OpsBenchConfig& config, SharedState& shared, int threads)
      : shared_(shared), threads_(threads) {
    OpOptions o;
    o.accumulate_grad = true;
    o.cache = &cache_;
    o.threads = threads;
    const Recipe recipe = config.MakeRecipe();
    for (const auto& w : shared.weights) {
      if (c.moe) {
        grouped_.push_back(std::make_unique<GroupedLinear>(w, nullptr, recipe, o));
      } else {
        dense_.push_back(std::make_unique<Linear>(w, nullptr, recipe, o));
      }
    }
  }

  // Forward and backward of every micro-batch, then the optimizer step. Fills `layers`
  // with what each layer's context keeps in the first micro-batch and the policies it
  // applied in the last.
  void Step(int micro_batches, std::vector<OpsBenchResult::Layer>& layers) {
    const size_t n = shared_.weights.size();
    layers.resize(n);
    for (int mb = 0; mb < micro_batches; ++mb) {
      std::vector<OpContext> ctx(n);
      for (size_t l = 0; l < n; ++l) {
        // A fresh input per micro-batch, dropped after the forward (as an activation).
        const Tensor& src = shared_.inputs[l];
        Tensor x = Tensor::Empty(src.dtype(), src.shape(), MemoryCategory::kActivation);
        std::memcpy(x.raw(), src.raw(), src.NumBytes());
        Forwarded f =
            dense_.empty() ? grouped_[l]->Forward(x, shared_.groups) : dense_[l]->Forward(x);
        ctx[l] = std::move(f.ctx);
        if (mb == 0) layers[l].saved = ctx[l].saved_memory();
        layers[l].input_policy = ctx[l].input_policy();
        layers[l].weight_policy = ctx[l].weight_policy();
      }
      for (size_t l = n; l-- > 0;) {
        if (dense_.empty()) {
          grouped_[l]->Backward(shared_.output_grads[l], std::move(ctx[l]));
        } else {
          dense_[l]->Backward(shared_.output_grads[l], std::move(ctx[l]));
        }
      }
    }
    // SGD in place: every weight changes, so its version moves and the cache empties.
    for (const auto& w : shared_.weights) {
      float* v = w->value().data<float>();
      float* g = w->main_grad().data<float>();
      const int64_t count = w->value().NumElements();
#pragma omp parallel for num_threads(threads_) schedule(static)
      for (int64_t i = 0; i < count; ++i) {
        v[i] -= 1e-4f * g[i];
        g[i] = 0.0f;
      }
      w->MarkModified();
    }
    cache_.Clear();
  }

 private:
  SharedState& shared_;
  int threads_;
  WeightQuantCache cache_;
  std::vector<std::unique_ptr<Linear>> dense_;
  std::vector<std::unique_ptr<GroupedLinear>> grouped_;
};

int64_t ClosedFormSaved(const OpsBenchCase& c, const OpsBenchConfig& config) {
  const int64_t experts = c.moe ? static_cast<int64_t>(c.group_counts.size()) : 1;
  const int64_t x_scale_rows =
      c.moe ? GroupList::Make(c.group_counts, GroupListType::kCounts, c.tokens).ScaleRows()
            : CeilDiv(c.tokens, 32);
  int64_t bytes = 0;
  for (const LayerShape& l : Shapes(c)) {
    const int64_t w_elems = experts * l.out * l.in;
    if (config.precision != Precision::kMxfp8) {
      bytes += 2 * w_elems;  // the bf16 copy of the fp32 weight (inputs are bf16 already)
      continue;
    }
    // Auto: the input, a fresh bf16 buffer that one layer takes, is quantized; the weight,
    // a parameter, deferred (linear.h "The auto policy").
    if (config.input_policy != SavePolicy::kDeferred) bytes += (c.tokens + x_scale_rows) * l.in;
    if (config.weight_policy == SavePolicy::kQuantized && !config.reuse) {
      bytes += w_elems + experts * CeilDiv(l.out, 32) * l.in;
    }
  }
  return bytes;
}

}  // namespace

std::vector<OpsBenchResult> MeasureOpsBench(const OpsBenchCase& c,
                                            const std::vector<OpsBenchConfig>& configs, int steps) {
  MXTRAIN_CHECK(steps >= 1 && c.micro_batches >= 1, "ops bench: need at least one step");
  const int threads = c.threads > 0 ? c.threads : omp_get_max_threads();
  SharedState shared = MakeShared(c, threads);
  std::vector<std::unique_ptr<Stack>> stacks;
  for (const OpsBenchConfig& config : configs) {
    stacks.push_back(std::make_unique<Stack>(c, config, shared, threads));
  }
  std::vector<OpsBenchResult> results(configs.size());
  std::vector<std::vector<double>> ms(configs.size());
  for (size_t i = 0; i < configs.size(); ++i) {
    results[i].c = c;
    results[i].config = configs[i];
    results[i].threads = threads;
    results[i].gemm =
        configs[i].precision == Precision::kMxfp8 ? CurrentGemmPath() : HpGemmRoute(DType::kBF16);
    results[i].closed_form_saved_bytes = ClosedFormSaved(c, configs[i]);
    for (const LayerShape& l : Shapes(c)) results[i].layers.push_back({l.name, {}, {}, {}});
    // Warm-up: page in buffers, create primitives (and let auto learn).
    stacks[i]->Step(c.micro_batches, results[i].layers);
  }
  for (int round = 0; round < steps; ++round) {
    for (size_t i = 0; i < configs.size(); ++i) {
      ResetMemoryPeaks();
      OpsBenchResult& r = results[i];
      const auto t0 = std::chrono::steady_clock::now();
      stacks[i]->Step(c.micro_batches, r.layers);
      const auto t1 = std::chrono::steady_clock::now();
      ms[i].push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
      const MemoryReport m = ReadMemory();
      r.peak_bytes = std::max(r.peak_bytes, m.total.peak_bytes);
      r.peak_held_for_backward = std::max(r.peak_held_for_backward, m.held_for_backward.peak_bytes);
      for (int k = 0; k < kNumMemoryCategories; ++k) {
        r.peak_by_category[k] = std::max(r.peak_by_category[k], m.by_category[k].peak_bytes);
      }
    }
  }
  for (size_t i = 0; i < configs.size(); ++i) results[i].step_ms = Median(ms[i]);
  return results;
}

std::string ToJson(const std::vector<OpsBenchResult>& results, size_t i) {
  const OpsBenchResult& r = results.at(i);
  const bool mx = r.config.precision == Precision::kMxfp8;
  const auto find = [&](Precision p, SavePolicy policy) -> const OpsBenchResult* {
    for (const OpsBenchResult& o : results) {
      if (o.config.precision != p) continue;
      if (p != Precision::kMxfp8) return &o;
      if (o.config.input_policy == policy && o.config.weight_policy == policy &&
          o.config.reuse == r.config.reuse) {
        return &o;
      }
    }
    return nullptr;
  };
  const OpsBenchResult* bf16 = find(Precision::kBf16, SavePolicy::kQuantized);
  const OpsBenchResult* quantized = mx ? find(Precision::kMxfp8, SavePolicy::kQuantized) : nullptr;
  const OpsBenchResult* deferred = mx ? find(Precision::kMxfp8, SavePolicy::kDeferred) : nullptr;
  const auto policy = [](const std::optional<SavePolicy>& p) {
    return p ? StrCat("\"", Name(*p), "\"") : std::string("null");
  };
  const auto saved = r.peak_by_category[static_cast<int>(MemoryCategory::kSavedForBackward)];
  std::ostringstream os;
  os << "{\"case\": \"" << r.c.name << "\", \"precision\": \"" << Name(r.config.precision)
     << "\", \"input_policy\": ";
  if (r.config.precision == Precision::kMxfp8) {
    os << "\"" << Name(r.config.input_policy) << "\", \"weight_policy\": \""
       << Name(r.config.weight_policy) << "\", \"reuse\": " << (r.config.reuse ? "true" : "false");
  } else {
    os << "null, \"weight_policy\": null, \"reuse\": null";
  }
  os << ", \"tokens\": " << r.c.tokens << ", \"hidden\": " << r.c.hidden << ", \"ffn\": " << r.c.ffn
     << ", \"experts\": " << (r.c.moe ? r.c.group_counts.size() : 0)
     << ", \"micro_batches\": " << r.c.micro_batches << ", \"threads\": " << r.threads
     << ", \"gemm\": \"" << r.gemm
     << "\", \"baseline\": " << (bf16 ? "\"" + bf16->gemm + "\"" : std::string("null"))
     << ", \"step_ms\": " << JsonNumber(r.step_ms) << ", \"peak_bytes\": " << r.peak_bytes
     << ", \"saved_bytes\": " << r.peak_held_for_backward
     << ", \"saved_allocated_bytes\": " << saved
     << ", \"closed_form_saved_bytes\": " << r.closed_form_saved_bytes
     << ", \"peak_by_category\": {";
  for (int k = 0; k < kNumMemoryCategories; ++k) {
    os << (k ? ", " : "") << "\"" << Name(static_cast<MemoryCategory>(k))
       << "\": " << r.peak_by_category[k];
  }
  os << "}, \"layers\": [";
  for (size_t l = 0; l < r.layers.size(); ++l) {
    os << (l ? ", " : "") << "{\"name\": \"" << r.layers[l].name
       << "\", \"allocated_bytes\": " << r.layers[l].saved.allocated_bytes
       << ", \"referenced_bytes\": " << r.layers[l].saved.referenced_bytes
       << ", \"persistent_bytes\": " << r.layers[l].saved.persistent_bytes
       << ", \"input_policy\": " << policy(r.layers[l].input_policy)
       << ", \"weight_policy\": " << policy(r.layers[l].weight_policy) << "}";
  }
  os << "], \"bf16_step_ms\": " << (bf16 ? JsonNumber(bf16->step_ms) : "null")
     << ", \"ratio_to_bf16\": " << (bf16 ? JsonNumber(r.step_ms / bf16->step_ms) : "null")
     << ", \"time_vs_quantized\": "
     << (quantized ? JsonNumber(r.step_ms / quantized->step_ms) : "null")
     << ", \"saved_vs_quantized_bytes\": ";
  if (quantized) {
    os << quantized->peak_by_category[static_cast<int>(MemoryCategory::kSavedForBackward)] - saved;
  } else {
    os << "null";
  }
  const auto fixed = [&](const char* name, const OpsBenchResult* f) {
    os << ", \"" << name << "_step_ms\": " << (f ? JsonNumber(f->step_ms) : "null") << ", \""
       << name << "_saved_bytes\": " << (f ? std::to_string(f->peak_held_for_backward) : "null");
  };
  fixed("quantized", quantized);
  fixed("deferred", deferred);
  os << "}";
  return os.str();
}

}  // namespace mxtrain
