// Internal: checkpoints of a training run in the safetensors format (safetensors.h):
// every parameter ("param/<name>"), AdamW's moments ("adam.m/<name>", "adam.v/<name>"),
// and in the metadata the step, the model configuration, the run's settings and its
// metrics so far (so that a resumed run reports every step).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "mxtrain/tensor.h"
#include "mxtrain/train/model.h"
#include "mxtrain/train/optim.h"

namespace mxtrain::internal {

struct CheckpointState {
  int64_t step = 0;
  std::vector<Tensor> params, exp_avg, exp_avg_sq;  // in model.parameters() order
  std::map<std::string, std::string> metadata;
};

// Writes atomically (temporary file, then rename); throws Error.
void WriteCheckpoint(const std::string& path, const Model& model, const AdamW& optimizer,
                     const std::map<std::string, std::string>& metadata);
// One parameter as a checkpoint must hold it.
struct ParamSpec {
  std::string name;
  Shape shape;
};

// Reads and checks against a model's configuration and parameters: the same configuration
// (named in the error when not), every tensor present with the parameter's shape, a step.
// Throws Error. Needs no Model, so that the fuzz target (fuzz/) links no layers.
CheckpointState ReadCheckpoint(const std::string& path, const ModelConfig& config,
                               const std::vector<ParamSpec>& params);

// ReadCheckpoint against the model itself.
inline CheckpointState ReadCheckpoint(const std::string& path, const Model& model) {
  std::vector<ParamSpec> params;
  for (const auto& p : model.parameters()) params.push_back({p->name(), p->shape()});
  return ReadCheckpoint(path, model.config(), params);
}

}  // namespace mxtrain::internal
