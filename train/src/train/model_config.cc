// ModelConfig (model.h): its checks and its form in checkpoint metadata. Apart from the
// model so that the checkpoint reader (and its fuzz target, fuzz/) needs none of the layers.
#include <cmath>
#include <map>
#include <string>

#include "mxtrain/error.h"
#include "mxtrain/train/model.h"

namespace mxtrain {

void ModelConfig::Validate() const {
  MXTRAIN_CHECK(vocab == 256, "model: vocab must be 256 (bytes), got ", vocab);
  for (auto [name, value] : {std::pair<const char*, int64_t>{"d_model", d_model},
                             {"n_layers", n_layers},
                             {"n_heads", n_heads},
                             {"n_experts", n_experts},
                             {"top_k", top_k},
                             {"d_ff", d_ff},
                             {"context", context}}) {
    MXTRAIN_CHECK(value >= 1 && value <= (int64_t{1} << 20), "model: ", name,
                  " must be in [1, 2^20], got ", value);
  }
  MXTRAIN_CHECK(d_model % n_heads == 0, "model: d_model ", d_model,
                " is not a multiple of n_heads ", n_heads);
  MXTRAIN_CHECK(top_k <= n_experts, "model: top_k ", top_k, " exceeds n_experts ", n_experts);
  MXTRAIN_CHECK(std::isfinite(aux_loss_coef) && aux_loss_coef >= 0,
                "model: aux_loss_coef must be finite and >= 0, got ", aux_loss_coef);
}

ModelConfig ModelConfig::Preset(std::string_view name) {
  ModelConfig c;
  if (name == "tiny") return c;
  MXTRAIN_CHECK(name == "small", "unknown model preset '", name, "' (expected tiny or small)");
  c.d_model = 512;
  c.n_heads = 8;
  c.d_ff = 1024;
  c.context = 256;
  return c;
}

std::map<std::string, std::string> ModelConfig::ToMetadata() const {
  return {
      {"model.vocab", std::to_string(vocab)},         {"model.d_model", std::to_string(d_model)},
      {"model.n_layers", std::to_string(n_layers)},   {"model.n_heads", std::to_string(n_heads)},
      {"model.n_experts", std::to_string(n_experts)}, {"model.top_k", std::to_string(top_k)},
      {"model.d_ff", std::to_string(d_ff)},           {"model.context", std::to_string(context)},
      {"model.aux_loss_coef", StrCat(aux_loss_coef)}};
}

ModelConfig ModelConfig::FromMetadata(const std::map<std::string, std::string>& m) {
  auto get = [&](const char* key) -> const std::string& {
    auto it = m.find(key);
    MXTRAIN_CHECK(it != m.end(), "checkpoint metadata lacks '", key, "'");
    return it->second;
  };
  auto integer = [&](const char* key) {
    try {
      return static_cast<int64_t>(std::stoll(get(key)));
    } catch (const std::logic_error&) {
      Fail("checkpoint metadata '", key, "' is not an integer: '", get(key), "'");
    }
  };
  ModelConfig c;
  c.vocab = integer("model.vocab");
  c.d_model = integer("model.d_model");
  c.n_layers = integer("model.n_layers");
  c.n_heads = integer("model.n_heads");
  c.n_experts = integer("model.n_experts");
  c.top_k = integer("model.top_k");
  c.d_ff = integer("model.d_ff");
  c.context = integer("model.context");
  try {
    c.aux_loss_coef = std::stod(get("model.aux_loss_coef"));
  } catch (const std::logic_error&) {
    Fail("checkpoint metadata 'model.aux_loss_coef' is not a number");
  }
  return c;
}

std::string ModelConfig::ToString() const {
  return StrCat("d_model=", d_model, " layers=", n_layers, " heads=", n_heads,
                " experts=", n_experts, " top_k=", top_k, " d_ff=", d_ff, " context=", context);
}

}  // namespace mxtrain
