// Recipe: how a Linear or GroupedLinear runs (DESIGN.md "A training step, as data").
//
//   precision   mxfp8 (MX GEMMs on quantized operands), or bf16 / fp32 (the same ops on
//               high-precision GEMMs: the baseline)
//   formats     element format per role: e4m3 everywhere, or hybrid (E5M2 gradients, E4M3
//               inputs and weights), as TransformerEngine's Format.E4M3 / HYBRID
//   scale       the E8M0 scale rule (NUMERICS.md §4), rceil by default
//   policies    per role (input, weight), what the forward keeps for the backward:
//               quantized: quantize dual-axis now and save the columnwise copy;
//               deferred:  quantize rowwise now, keep a reference to the high-precision
//                          tensor and quantize it columnwise in the backward (MindSpeed's
//                          --mxfp8-defer-backward-quant; TE's save_original_input)
//   reuse       quantize each weight at most once per layout per optimizer step
//               (WeightQuantCache; MindSpeed's --fp8-reuse-quantized-weight)
//
// Every option is checked when the recipe is made, as MindSpeed's validate_args does: an
// MXFP8 option (format, scale rule, policy, reuse) given with MXFP8 off is an Error.
// Outputs and gradients do not depend on the policies or on reuse, bit for bit.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "mxtrain/format/element.h"
#include "mxtrain/tensor.h"

namespace mxtrain {

enum class Precision : uint8_t { kFp32, kBf16, kMxfp8 };
enum class RecipeFormats : uint8_t { kE4M3, kHybrid };
enum class SavePolicy : uint8_t { kQuantized, kDeferred };

std::string_view Name(Precision p);      // "fp32" | "bf16" | "mxfp8"
std::string_view Name(RecipeFormats f);  // "e4m3" | "hybrid"
std::string_view Name(SavePolicy p);     // "quantized" | "deferred"
Precision ParsePrecision(std::string_view name);
RecipeFormats ParseRecipeFormats(std::string_view name);
SavePolicy ParseSavePolicy(std::string_view name);

// What a user asks for; unset MXFP8 options take their defaults (e4m3, rceil, quantized)
// when precision is mxfp8, and must stay unset (and reuse false) otherwise.
struct RecipeOptions {
  Precision precision = Precision::kMxfp8;
  std::optional<RecipeFormats> formats;
  std::optional<ScaleRule> scale;
  std::optional<SavePolicy> input_policy;
  std::optional<SavePolicy> weight_policy;
  bool reuse_quantized_weights = false;
};

class Recipe {
 public:
  // MXFP8, e4m3, rceil, both policies quantized, no reuse.
  Recipe() = default;
  // Validates (see above); throws Error naming the option.
  static Recipe Make(const RecipeOptions& options);

  Precision precision() const { return precision_; }
  bool mxfp8() const { return precision_ == Precision::kMxfp8; }
  // The high-precision GEMMs' compute type with MXFP8 off (kBF16 or kF32).
  DType compute_dtype() const {
    return precision_ == Precision::kFp32 ? DType::kF32 : DType::kBF16;
  }
  RecipeFormats formats() const { return formats_; }
  ElementFormat input_format() const { return ElementFormat::kE4M3; }
  ElementFormat weight_format() const { return ElementFormat::kE4M3; }
  ElementFormat grad_format() const {
    return formats_ == RecipeFormats::kHybrid ? ElementFormat::kE5M2 : ElementFormat::kE4M3;
  }
  ScaleRule scale() const { return scale_; }
  SavePolicy input_policy() const { return input_policy_; }
  SavePolicy weight_policy() const { return weight_policy_; }
  bool reuse_quantized_weights() const { return reuse_; }
  // "mxfp8 e4m3 rceil input=quantized weight=deferred reuse", or "bf16".
  std::string ToString() const;

 private:
  Precision precision_ = Precision::kMxfp8;
  RecipeFormats formats_ = RecipeFormats::kE4M3;
  ScaleRule scale_ = ScaleRule::kRceil;
  SavePolicy input_policy_ = SavePolicy::kQuantized;
  SavePolicy weight_policy_ = SavePolicy::kQuantized;
  bool reuse_ = false;
};

}  // namespace mxtrain
