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
//                          --mxfp8-defer-backward-quant; TE's save_original_input);
//               auto:      per layer, whichever holds less for the backward, counting a
//                          high-precision tensor as free when something else keeps it
//                          alive until the backward (linear.h "The auto policy";
//                          docs/decisions.md "Save policies")
//   hp_gemms    which of the three GEMMs (fprop, dgrad, wgrad) run in high precision
//               (hp_precision: bf16 or fp32 compute) instead of MXFP8, as TE's
//               override_linear_precision and torchao's wgrad_with_hp; a role whose only
//               columnwise reader is a high-precision GEMM is saved in high precision,
//               so its policy must stay unset
//   reuse       quantize each weight at most once per layout per optimizer step
//               (WeightQuantCache; MindSpeed's --fp8-reuse-quantized-weight)
//
// Every option is checked when the recipe is made, as MindSpeed's validate_args does: an
// MXFP8 option (format, scale rule, policy, reuse, hp_gemms) given with MXFP8 off is an
// Error, and so is a contradiction: all three GEMMs in high precision (that is precision
// bf16 or fp32), an input policy with an HP wgrad, a weight policy with an HP dgrad,
// reuse with the weight never quantized (HP fprop and dgrad), hp_precision without
// hp_gemms or other than bf16 / fp32.
// Outputs and gradients do not depend on the policies or on reuse, bit for bit.
#pragma once

#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>

#include "mxtrain/format/element.h"
#include "mxtrain/tensor.h"

namespace mxtrain {

enum class Precision : uint8_t { kFp32, kBf16, kMxfp8 };
enum class RecipeFormats : uint8_t { kE4M3, kHybrid };
enum class SavePolicy : uint8_t { kQuantized, kDeferred, kAuto };
// The three GEMMs of a linear layer's training step.
enum class TrainingGemm : uint8_t { kFprop, kDgrad, kWgrad };
inline constexpr TrainingGemm kTrainingGemms[] = {TrainingGemm::kFprop, TrainingGemm::kDgrad,
                                                  TrainingGemm::kWgrad};

// A set of TrainingGemms.
class GemmSet {
 public:
  constexpr GemmSet() = default;
  constexpr GemmSet(std::initializer_list<TrainingGemm> gemms) {
    for (TrainingGemm g : gemms) bits_ |= Bit(g);
  }
  constexpr bool contains(TrainingGemm g) const { return (bits_ & Bit(g)) != 0; }
  constexpr bool empty() const { return bits_ == 0; }
  constexpr bool all() const { return bits_ == 7; }
  constexpr bool operator==(const GemmSet&) const = default;
  constexpr GemmSet With(TrainingGemm g) const {
    GemmSet s = *this;
    s.bits_ |= Bit(g);
    return s;
  }

 private:
  static constexpr uint8_t Bit(TrainingGemm g) { return uint8_t{1} << static_cast<int>(g); }
  uint8_t bits_ = 0;
};

std::string_view Name(Precision p);      // "fp32" | "bf16" | "mxfp8"
std::string_view Name(RecipeFormats f);  // "e4m3" | "hybrid"
std::string_view Name(SavePolicy p);     // "quantized" | "deferred" | "auto"
std::string_view Name(TrainingGemm g);   // "fprop" | "dgrad" | "wgrad"
std::string Name(GemmSet s);             // "fprop,wgrad"; "" when empty
Precision ParsePrecision(std::string_view name);
RecipeFormats ParseRecipeFormats(std::string_view name);
SavePolicy ParseSavePolicy(std::string_view name);
// "wgrad", "dgrad,wgrad", ...: comma-separated names, each once; "" or "none" is empty.
GemmSet ParseGemmSet(std::string_view names);

// What a user asks for; unset MXFP8 options take their defaults (e4m3, rceil, quantized)
// when precision is mxfp8, and must stay unset (and reuse false) otherwise.
struct RecipeOptions {
  Precision precision = Precision::kMxfp8;
  std::optional<RecipeFormats> formats;
  std::optional<ScaleRule> scale;
  std::optional<SavePolicy> input_policy;
  std::optional<SavePolicy> weight_policy;
  bool reuse_quantized_weights = false;
  // GEMMs run in high precision instead of MXFP8 (MXFP8 only), with hp_precision's
  // compute type (bf16, the default, or fp32).
  std::optional<GemmSet> hp_gemms;
  std::optional<Precision> hp_precision;
};

class Recipe {
 public:
  // MXFP8, e4m3, rceil, both policies quantized, no reuse.
  Recipe() = default;
  // Validates (see above); throws Error naming the option.
  static Recipe Make(const RecipeOptions& options);

  Precision precision() const { return precision_; }
  bool mxfp8() const { return precision_ == Precision::kMxfp8; }
  // The high-precision GEMMs' compute type: with MXFP8 off, the precision's (kBF16 or
  // kF32); with MXFP8, that of the GEMMs in hp_gemms().
  DType compute_dtype() const {
    const Precision p = mxfp8() ? hp_precision_ : precision_;
    return p == Precision::kFp32 ? DType::kF32 : DType::kBF16;
  }
  // With MXFP8: the GEMMs that run in high precision (compute_dtype()); empty otherwise.
  GemmSet hp_gemms() const { return hp_gemms_; }
  // Their compute precision: kBf16 or kFp32.
  Precision hp_precision() const { return hp_precision_; }
  // Whether GEMM g runs MXFP8.
  bool mx(TrainingGemm g) const { return mxfp8() && !hp_gemms_.contains(g); }
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
  // "mxfp8 e4m3 rceil input=quantized weight=deferred reuse hp=wgrad:bf16", or "bf16".
  std::string ToString() const;

 private:
  Precision precision_ = Precision::kMxfp8;
  RecipeFormats formats_ = RecipeFormats::kE4M3;
  ScaleRule scale_ = ScaleRule::kRceil;
  SavePolicy input_policy_ = SavePolicy::kQuantized;
  SavePolicy weight_policy_ = SavePolicy::kQuantized;
  bool reuse_ = false;
  GemmSet hp_gemms_;
  Precision hp_precision_ = Precision::kBf16;
};

}  // namespace mxtrain
