// ParseJson's checks beyond nlohmann's grammar, and its errors as mxtrain::Error.
#include "io/json_util.h"

#include <set>
#include <vector>

#include "io/file_util.h"
#include "mxtrain/error.h"

namespace mxtrain::internal {
namespace {

// nlohmann's messages start "[json.exception.parse_error.101] ", an id that means nothing
// to a user, and quote the token read last, which may be a megabyte-long string: cut.
std::string Message(const char* what) {
  constexpr size_t kMaxChars = 200;
  std::string_view s(what);
  if (s.rfind("[json.exception.", 0) == 0 && s.find("] ") != std::string_view::npos) {
    s.remove_prefix(s.find("] ") + 2);
  }
  return Printable(s.size() > kMaxChars ? std::string(s.substr(0, kMaxChars)) + "..."
                                        : std::string(s));
}

}  // namespace

Json ParseJson(std::string_view text) {
  // nlohmann's lexer reads a NUL byte as the end of the input, so "{}\0garbage" would
  // parse; JSON allows NUL nowhere (in a string it must be escaped as \u0000).
  if (const size_t nul = text.find('\0'); nul != std::string_view::npos) {
    Fail("invalid JSON: a NUL byte at offset ", nul);
  }
  // nlohmann skips a UTF-8 byte order mark; RFC 8259 §8.1 says a parser may, mxtrain's
  // files never hold one, and the old reader refused it.
  if (text.rfind("\xEF\xBB\xBF", 0) == 0) Fail("invalid JSON: a byte order mark at offset 0");
  std::vector<std::set<std::string>> keys;  // of each open object
  const Json::parser_callback_t check = [&](int depth, Json::parse_event_t event, Json& parsed) {
    switch (event) {
      case Json::parse_event_t::object_start:
      case Json::parse_event_t::array_start:
        if (depth >= kMaxJsonDepth) Fail("invalid JSON: nesting deeper than ", kMaxJsonDepth);
        if (event == Json::parse_event_t::object_start) keys.emplace_back();
        break;
      case Json::parse_event_t::object_end:
        keys.pop_back();
        break;
      case Json::parse_event_t::key:
        if (!keys.back().insert(parsed.get<std::string>()).second) {
          Fail("invalid JSON: duplicate key ", QuotedForMessage(parsed.get<std::string>()));
        }
        break;
      default:
        break;
    }
    return true;
  };
  try {
    return Json::parse(text.begin(), text.end(), check, /*allow_exceptions=*/true,
                       /*ignore_comments=*/false);
  } catch (const Json::exception& e) {
    Fail("invalid JSON: ", Message(e.what()));
  }
}

std::string DumpJson(const Json& v, int indent) {
  try {
    return v.dump(indent);
  } catch (const Json::exception& e) {
    Fail("cannot write a JSON string that is not valid UTF-8 (", Message(e.what()), ")");
  }
}

std::string QuotedForMessage(std::string_view s) {
  return Json(Printable(s)).dump(-1, ' ', false, Json::error_handler_t::replace);
}

}  // namespace mxtrain::internal
