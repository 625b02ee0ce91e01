// The small model configuration and parameter list the checkpoint fuzz target checks
// against, and make_seeds writes a valid checkpoint for.
#pragma once

#include <vector>

#include "mxtrain/train/model.h"
#include "train/checkpoint.h"

namespace mxtrain::fuzz {

// Small enough that a checkpoint of it is a few hundred bytes.
inline ModelConfig SeedConfig() {
  return ModelConfig{.d_model = 8,
                     .n_layers = 1,
                     .n_heads = 2,
                     .n_experts = 2,
                     .top_k = 1,
                     .d_ff = 8,
                     .context = 4};
}

inline const std::vector<internal::ParamSpec>& SeedParams() {
  static const std::vector<internal::ParamSpec> params = {{"embed", Shape{4, 2}},
                                                          {"norm", Shape{2}}};
  return params;
}

}  // namespace mxtrain::fuzz
