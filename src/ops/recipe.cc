#include "mxtrain/recipe.h"

#include "mxtrain/error.h"

namespace mxtrain {

std::string_view Name(Precision p) {
  switch (p) {
    case Precision::kFp32:
      return "fp32";
    case Precision::kBf16:
      return "bf16";
    case Precision::kMxfp8:
      return "mxfp8";
  }
  return "?";
}

std::string_view Name(RecipeFormats f) { return f == RecipeFormats::kE4M3 ? "e4m3" : "hybrid"; }
std::string_view Name(SavePolicy p) {
  return p == SavePolicy::kQuantized ? "quantized" : "deferred";
}

Precision ParsePrecision(std::string_view name) {
  for (Precision p : {Precision::kFp32, Precision::kBf16, Precision::kMxfp8}) {
    if (name == Name(p)) return p;
  }
  Fail("unknown precision '", name, "' (expected fp32, bf16 or mxfp8)");
}

RecipeFormats ParseRecipeFormats(std::string_view name) {
  for (RecipeFormats f : {RecipeFormats::kE4M3, RecipeFormats::kHybrid}) {
    if (name == Name(f)) return f;
  }
  Fail("unknown recipe '", name, "' (expected e4m3 or hybrid)");
}

SavePolicy ParseSavePolicy(std::string_view name) {
  for (SavePolicy p : {SavePolicy::kQuantized, SavePolicy::kDeferred}) {
    if (name == Name(p)) return p;
  }
  Fail("unknown save policy '", name, "' (expected quantized or deferred)");
}

Recipe Recipe::Make(const RecipeOptions& o) {
  Recipe r;
  r.precision_ = o.precision;
  if (!r.mxfp8()) {
    // The seed's validate_args: these only mean something for MXFP8 training.
    const char* given = o.formats                   ? "the element-format recipe"
                        : o.scale                   ? "a scale rule"
                        : o.input_policy            ? "an input save policy"
                        : o.weight_policy           ? "a weight save policy"
                        : o.reuse_quantized_weights ? "reusing quantized weights"
                                                    : nullptr;
    MXTRAIN_CHECK(given == nullptr, given, " is only valid when MXFP8 is enabled (precision is ",
                  Name(o.precision), ")");
    return r;
  }
  r.formats_ = o.formats.value_or(RecipeFormats::kE4M3);
  r.scale_ = o.scale.value_or(ScaleRule::kRceil);
  r.input_policy_ = o.input_policy.value_or(SavePolicy::kQuantized);
  r.weight_policy_ = o.weight_policy.value_or(SavePolicy::kQuantized);
  r.reuse_ = o.reuse_quantized_weights;
  return r;
}

std::string Recipe::ToString() const {
  if (!mxfp8()) return std::string(Name(precision_));
  return StrCat("mxfp8 ", Name(formats_), " ", Name(scale_), " input=", Name(input_policy_),
                " weight=", Name(weight_policy_), reuse_ ? " reuse" : "");
}

}  // namespace mxtrain
