// The scale rules of NUMERICS.md §4, one function each.
#include "mxtrain/format/element.h"

#include <algorithm>

#include "mxtrain/error.h"

namespace mxtrain {

std::string_view Name(ElementFormat format) {
  return format == ElementFormat::kE4M3 ? "e4m3" : "e5m2";
}

std::string_view Name(ScaleRule rule) {
  switch (rule) {
    case ScaleRule::kRceil:
      return "rceil";
    case ScaleRule::kFloor:
      return "floor";
    case ScaleRule::kCeil:
      return "ceil";
    case ScaleRule::kEven:
      return "even";
  }
  return "?";
}

ElementFormat ParseElementFormat(std::string_view name) {
  if (name == "e4m3") return ElementFormat::kE4M3;
  if (name == "e5m2") return ElementFormat::kE5M2;
  Fail("unknown element format '", name, "' (expected e4m3 or e5m2)");
}

ScaleRule ParseScaleRule(std::string_view name) {
  if (name == "rceil") return ScaleRule::kRceil;
  if (name == "floor") return ScaleRule::kFloor;
  if (name == "ceil") return ScaleRule::kCeil;
  if (name == "even") return ScaleRule::kEven;
  Fail("unknown scale rule '", name, "' (expected rceil, floor, ceil or even)");
}

}  // namespace mxtrain
