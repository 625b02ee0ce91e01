// Checkpoints over the safetensors reader and writer (checkpoint.h).
#include "train/checkpoint.h"

#include <filesystem>

#include "mxtrain/error.h"
#include "mxtrain/safetensors.h"

namespace mxtrain::internal {

void WriteCheckpoint(const std::string& path, const Model& model, const AdamW& optimizer,
                     const std::map<std::string, std::string>& metadata) {
  std::vector<NamedTensor> tensors;
  const auto& params = model.parameters();
  for (size_t i = 0; i < params.size(); ++i) {
    tensors.push_back({"param/" + params[i]->name(), params[i]->value()});
    tensors.push_back({"adam.m/" + params[i]->name(), optimizer.exp_avg()[i]});
    tensors.push_back({"adam.v/" + params[i]->name(), optimizer.exp_avg_sq()[i]});
  }
  std::map<std::string, std::string> meta = metadata;
  for (const auto& [k, v] : model.config().ToMetadata()) meta[k] = v;
  meta["format"] = "mxtrain-checkpoint-1";
  meta["train.step"] = std::to_string(optimizer.step());
  WriteSafetensors(path, tensors, meta);
}

CheckpointState ReadCheckpoint(const std::string& path, const ModelConfig& config,
                               const std::vector<ParamSpec>& params) {
  std::error_code ec;
  MXTRAIN_CHECK(std::filesystem::is_regular_file(path, ec), "checkpoint '", path,
                "' does not exist");
  SafetensorsFile f = ReadSafetensors(path);
  auto fmt = f.metadata.find("format");
  MXTRAIN_CHECK(fmt != f.metadata.end() && fmt->second == "mxtrain-checkpoint-1", "checkpoint '",
                path, "' is not an mxtrain training checkpoint");
  const ModelConfig saved = ModelConfig::FromMetadata(f.metadata);
  MXTRAIN_CHECK(saved == config, "checkpoint '", path, "' holds a model with ", saved.ToString(),
                ", this run's model has ", config.ToString());
  std::map<std::string, Tensor> by_name;
  for (NamedTensor& t : f.tensors) by_name[t.name] = std::move(t.tensor);
  CheckpointState s;
  auto take = [&](const std::string& name, const Shape& shape) {
    auto it = by_name.find(name);
    MXTRAIN_CHECK(it != by_name.end(), "checkpoint '", path, "' lacks tensor '", name, "'");
    MXTRAIN_CHECK(it->second.dtype() == DType::kF32 && it->second.shape() == shape, "checkpoint '",
                  path, "': tensor '", name, "' is ", Name(it->second.dtype()), " ",
                  it->second.shape().ToString(), ", expected f32 ", shape.ToString());
    return it->second;
  };
  for (const ParamSpec& p : params) {
    s.params.push_back(take("param/" + p.name, p.shape));
    s.exp_avg.push_back(take("adam.m/" + p.name, p.shape));
    s.exp_avg_sq.push_back(take("adam.v/" + p.name, p.shape));
  }
  auto step = f.metadata.find("train.step");
  MXTRAIN_CHECK(step != f.metadata.end(), "checkpoint '", path, "' lacks its step");
  try {
    s.step = std::stoll(step->second);
  } catch (const std::logic_error&) {
    Fail("checkpoint '", path, "' has a bad step '", step->second, "'");
  }
  s.metadata = std::move(f.metadata);
  return s;
}

}  // namespace mxtrain::internal
