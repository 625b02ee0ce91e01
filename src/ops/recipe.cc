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
  switch (p) {
    case SavePolicy::kQuantized:
      return "quantized";
    case SavePolicy::kDeferred:
      return "deferred";
    case SavePolicy::kAuto:
      return "auto";
  }
  return "?";
}

std::string_view Name(TrainingGemm g) {
  switch (g) {
    case TrainingGemm::kFprop:
      return "fprop";
    case TrainingGemm::kDgrad:
      return "dgrad";
    case TrainingGemm::kWgrad:
      return "wgrad";
  }
  return "?";
}

std::string Name(GemmSet s) {
  std::string out;
  for (TrainingGemm g : kTrainingGemms) {
    if (!s.contains(g)) continue;
    if (!out.empty()) out += ",";
    out += Name(g);
  }
  return out;
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
  for (SavePolicy p : {SavePolicy::kQuantized, SavePolicy::kDeferred, SavePolicy::kAuto}) {
    if (name == Name(p)) return p;
  }
  Fail("unknown save policy '", name, "' (expected quantized, deferred or auto)");
}

GemmSet ParseGemmSet(std::string_view names) {
  GemmSet set;
  if (names.empty() || names == "none") return set;
  for (std::string_view name : SplitList(names, "GEMM list")) {
    bool found = false;
    for (TrainingGemm g : kTrainingGemms) {
      if (name != Name(g)) continue;
      MXTRAIN_CHECK(!set.contains(g), "GEMM '", name, "' named twice in '", names, "'");
      set = set.With(g);
      found = true;
    }
    MXTRAIN_CHECK(found, "unknown GEMM '", name, "' in '", names,
                  "' (expected a comma-separated list of fprop, dgrad, wgrad)");
  }
  return set;
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
                        : o.hp_gemms                ? "high-precision GEMMs (hp_gemms)"
                        : o.hp_precision            ? "an hp_precision"
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
  r.hp_gemms_ = o.hp_gemms.value_or(GemmSet());
  const GemmSet hp = r.hp_gemms_;
  MXTRAIN_CHECK(!hp.all(),
                "all three GEMMs in high precision (hp_gemms fprop,dgrad,wgrad) is not MXFP8 "
                "training: use precision bf16 or fp32");
  if (o.hp_precision) {
    MXTRAIN_CHECK(!hp.empty(), "an hp_precision needs hp_gemms (the GEMMs it applies to)");
    MXTRAIN_CHECK(*o.hp_precision == Precision::kBf16 || *o.hp_precision == Precision::kFp32,
                  "hp_precision must be bf16 or fp32, got ", Name(*o.hp_precision));
    r.hp_precision_ = *o.hp_precision;
  }
  // A role whose columnwise copy only an HP GEMM would read is saved in high precision.
  MXTRAIN_CHECK(!(hp.contains(TrainingGemm::kWgrad) && o.input_policy), "an input save policy (",
                Name(*o.input_policy),
                ") contradicts a high-precision wgrad, which saves the input in high precision");
  MXTRAIN_CHECK(!(hp.contains(TrainingGemm::kDgrad) && o.weight_policy), "a weight save policy (",
                Name(*o.weight_policy),
                ") contradicts a high-precision dgrad, which reads the weight in high precision");
  MXTRAIN_CHECK(
      !(hp.contains(TrainingGemm::kFprop) && hp.contains(TrainingGemm::kDgrad) && r.reuse_),
      "reusing quantized weights with fprop and dgrad in high precision: the weight "
      "is never quantized");
  return r;
}

std::string Recipe::ToString() const {
  if (!mxfp8()) return std::string(Name(precision_));
  return StrCat("mxfp8 ", Name(formats_), " ", Name(scale_), " input=", Name(input_policy_),
                " weight=", Name(weight_policy_), reuse_ ? " reuse" : "",
                hp_gemms_.empty() ? std::string()
                                  : StrCat(" hp=", Name(hp_gemms_), ":", Name(hp_precision_)));
}

}  // namespace mxtrain
