// ParseJson (io/json_util.h: nlohmann/json plus mxtrain's checks), the parser of every
// safetensors header and of summary.json, on arbitrary text: an Error, or a value whose
// DumpJson parses back to the same text (DumpJson may refuse a string that is not UTF-8,
// with an Error). Anything else escaping (a nlohmann exception, a crash) is a finding.
#include <cstdlib>
#include <string_view>

#include "io/json_util.h"
#include "mxtrain/error.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using mxtrain::internal::DumpJson;
  using mxtrain::internal::ParseJson;
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  mxtrain::internal::Json v;
  try {
    v = ParseJson(text);
  } catch (const mxtrain::Error&) {
    return 0;
  }
  std::string once;
  try {
    once = DumpJson(v);
  } catch (const mxtrain::Error&) {
    return 0;
  }
  // What DumpJson writes, ParseJson reads back, and writes again the same way.
  if (DumpJson(ParseJson(once)) != once) std::abort();
  if (DumpJson(ParseJson(DumpJson(v, 2))) != once) std::abort();
  return 0;
}
