// Json::Parse on arbitrary text: an Error, or a value whose Dump parses back to the same
// text (Dump may refuse a string that is not UTF-8, with an Error).
#include <cstdlib>
#include <string_view>

#include "mxtrain/error.h"
#include "mxtrain/json.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  mxtrain::Json v;
  try {
    v = mxtrain::Json::Parse(text);
  } catch (const mxtrain::Error&) {
    return 0;
  }
  std::string once;
  try {
    once = v.Dump();
  } catch (const mxtrain::Error&) {
    return 0;
  }
  // What Dump writes, Parse reads back, and writes again the same way.
  if (mxtrain::Json::Parse(once).Dump() != once) std::abort();
  if (mxtrain::Json::Parse(v.Dump(2)).Dump() != once) std::abort();
  return 0;
}
