// JSON for the files mxtrain reads and writes itself (safetensors headers, summary.json),
// through nlohmann/json, plus the strictness those readers need on top of it.
//
// nlohmann's parser already accepts exactly RFC 8259 (no comments, trailing commas, NaN,
// leading zeros, control characters or invalid UTF-8 in strings, lone surrogates) and
// rejects numbers past the double range; ParseJson adds what it lets through: duplicate
// keys (a file that says two things is an error), nesting deeper than kMaxJsonDepth, and
// NUL bytes (nlohmann stops reading at one, so "{}\0garbage" would pass) and a leading
// byte order mark (which nlohmann skips).
// Every failure is one mxtrain::Error line. Internal: nlohmann stays out of the public
// headers.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

namespace mxtrain::internal {

// Objects keep their members in the order parsed or added: the safetensors header lists
// tensors in the writer's order, summary.json its fields in the order documented.
using Json = nlohmann::ordered_json;

// Deeper nesting is an Error: nlohmann parses iteratively, but dump and readers recurse.
inline constexpr int kMaxJsonDepth = 512;

// One JSON text (surrounding whitespace allowed); Error "invalid JSON: <problem>".
Json ParseJson(std::string_view text);

// The text of v: compact with indent < 0, else one member or element per line. Error for a
// string that is not valid UTF-8 (the output would not be JSON).
std::string DumpJson(const Json& v, int indent = -1);

// s as a JSON string for a message, on one line: control bytes become '?', bytes that are
// not UTF-8 become U+FFFD.
std::string QuotedForMessage(std::string_view s);

}  // namespace mxtrain::internal
