// The strict JSON parser and writer of json.h: recursive descent over the text, with the
// RFC 8259 grammar checked character by character and numbers converted by from_chars.
#include "mxtrain/json.h"

#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <unordered_set>

#include "mxtrain/error.h"

namespace mxtrain {
namespace {

constexpr double kMaxExactInt = 9007199254740992.0;  // 2^53

// Length of the valid UTF-8 sequence starting at s[i], or 0 when it is not one (overlong
// forms, surrogates and code points past U+10FFFF are invalid, as RFC 3629 says).
size_t Utf8Length(std::string_view s, size_t i) {
  const auto b = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
  const unsigned char c = b(i);
  if (c < 0x80) return 1;
  size_t n;
  uint32_t cp;
  if ((c & 0xE0) == 0xC0) {
    n = 2, cp = c & 0x1F;
  } else if ((c & 0xF0) == 0xE0) {
    n = 3, cp = c & 0x0F;
  } else if ((c & 0xF8) == 0xF0) {
    n = 4, cp = c & 0x07;
  } else {
    return 0;
  }
  if (i + n > s.size()) return 0;
  for (size_t k = 1; k < n; ++k) {
    if ((b(i + k) & 0xC0) != 0x80) return 0;
    cp = (cp << 6) | (b(i + k) & 0x3F);
  }
  static constexpr uint32_t kMin[] = {0, 0, 0x80, 0x800, 0x10000};
  if (cp < kMin[n] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;
  return n;
}

void AppendUtf8(uint32_t cp, std::string* out) {
  if (cp < 0x80) {
    *out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    *out += static_cast<char>(0xC0 | (cp >> 6));
    *out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    *out += static_cast<char>(0xE0 | (cp >> 12));
    *out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    *out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    *out += static_cast<char>(0xF0 | (cp >> 18));
    *out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    *out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    *out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

void DumpString(std::string_view s, std::string* out, bool lenient = false);

// A key quoted and escaped for an error message.
std::string Quoted(std::string_view s) {
  std::string out;
  DumpString(s, &out, true);
  return out;
}

class Parser {
 public:
  explicit Parser(std::string_view text) : text_(text) {}

  Json ParseDocument() {
    SkipSpace();
    Json v = ParseValue(0);
    SkipSpace();
    if (pos_ != text_.size()) Invalid("unexpected text after the value");
    return v;
  }

 private:
  [[noreturn]] void Invalid(const std::string& what) const {
    Fail("invalid JSON at offset ", pos_, ": ", what);
  }
  bool AtEnd() const { return pos_ >= text_.size(); }
  char Peek() const { return AtEnd() ? '\0' : text_[pos_]; }
  void SkipSpace() {
    while (!AtEnd() && (Peek() == ' ' || Peek() == '\n' || Peek() == '\t' || Peek() == '\r')) {
      ++pos_;
    }
  }
  void Expect(char c) {
    if (Peek() != c || AtEnd()) Invalid(std::string("expected '") + c + "'");
    ++pos_;
  }
  void ExpectWord(std::string_view word) {
    if (text_.substr(pos_, word.size()) != word) Invalid("unexpected character");
    pos_ += word.size();
  }

  Json ParseValue(int depth) {
    if (AtEnd()) Invalid("unexpected end of text, expected a value");
    switch (Peek()) {
      case '{':
        return ParseObject(depth + 1);
      case '[':
        return ParseArray(depth + 1);
      case '"':
        return Json(ParseString());
      case 't':
        ExpectWord("true");
        return Json(true);
      case 'f':
        ExpectWord("false");
        return Json(false);
      case 'n':
        ExpectWord("null");
        return Json();
      default:
        if (Peek() == '-' || (Peek() >= '0' && Peek() <= '9')) return Json(ParseNumber());
        Invalid("unexpected character, expected a value");
    }
  }

  void CheckDepth(int depth) const {
    if (depth > Json::kMaxDepth) Invalid(StrCat("nesting deeper than ", Json::kMaxDepth));
  }

  // The elements of "[...]" or members of "{...}" between the brackets: `item` parses one,
  // commas separate them, nothing trails.
  template <typename ParseItem>
  void ParseSequence(char close, const char* expected, ParseItem item) {
    ++pos_;  // '[' or '{'
    SkipSpace();
    if (Peek() == close) {
      ++pos_;
      return;
    }
    while (true) {
      SkipSpace();
      item();
      SkipSpace();
      if (Peek() == ',') {
        ++pos_;
      } else if (Peek() == close) {
        ++pos_;
        return;
      } else {
        Invalid(expected);
      }
    }
  }

  Json ParseObject(int depth) {
    CheckDepth(depth);
    Json::Object members;
    std::unordered_set<std::string> keys;
    ParseSequence('}', "expected ',' or '}'", [&] {
      if (Peek() != '"') Invalid("expected a string key");
      const size_t key_pos = pos_;
      std::string key = ParseString();
      if (!keys.insert(key).second) {
        pos_ = key_pos;
        Invalid("duplicate key " + Quoted(key));
      }
      SkipSpace();
      Expect(':');
      SkipSpace();
      Json value = ParseValue(depth);
      members.emplace_back(std::move(key), std::move(value));
    });
    return Json(std::move(members));
  }

  Json ParseArray(int depth) {
    CheckDepth(depth);
    Json::Array elements;
    ParseSequence(']', "expected ',' or ']'", [&] { elements.push_back(ParseValue(depth)); });
    return Json(std::move(elements));
  }

  uint32_t ParseHex4() {
    uint32_t v = 0;
    for (int i = 0; i < 4; ++i) {
      const char c = Peek();
      int d;
      if (c >= '0' && c <= '9') {
        d = c - '0';
      } else if (c >= 'a' && c <= 'f') {
        d = c - 'a' + 10;
      } else if (c >= 'A' && c <= 'F') {
        d = c - 'A' + 10;
      } else {
        Invalid("\\u escape needs 4 hex digits");
      }
      v = v * 16 + static_cast<uint32_t>(d);
      ++pos_;
    }
    return v;
  }

  std::string ParseString() {
    ++pos_;  // '"'
    std::string out;
    while (true) {
      if (AtEnd()) Invalid("unterminated string");
      const auto c = static_cast<unsigned char>(text_[pos_]);
      if (c == '"') {
        ++pos_;
        return out;
      }
      if (c < 0x20) Invalid("control character in a string (it must be escaped)");
      if (c >= 0x80) {
        const size_t n = Utf8Length(text_, pos_);
        if (n == 0) Invalid("invalid UTF-8 in a string");
        out.append(text_.substr(pos_, n));
        pos_ += n;
        continue;
      }
      if (c != '\\') {
        out += static_cast<char>(c);
        ++pos_;
        continue;
      }
      ++pos_;
      if (AtEnd()) Invalid("unterminated string");
      const char e = text_[pos_++];
      switch (e) {
        case '"':
          out += '"';
          break;
        case '\\':
          out += '\\';
          break;
        case '/':
          out += '/';
          break;
        case 'b':
          out += '\b';
          break;
        case 'f':
          out += '\f';
          break;
        case 'n':
          out += '\n';
          break;
        case 'r':
          out += '\r';
          break;
        case 't':
          out += '\t';
          break;
        case 'u': {
          uint32_t cp = ParseHex4();
          if (cp >= 0xDC00 && cp <= 0xDFFF) Invalid("\\u escape is a lone low surrogate");
          if (cp >= 0xD800 && cp <= 0xDBFF) {
            if (text_.substr(pos_, 2) != "\\u") Invalid("\\u escape is a lone high surrogate");
            pos_ += 2;
            const uint32_t low = ParseHex4();
            if (low < 0xDC00 || low > 0xDFFF) Invalid("\\u escape is a lone high surrogate");
            cp = 0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00);
          }
          AppendUtf8(cp, &out);
          break;
        }
        default:
          --pos_;
          Invalid("unknown escape sequence");
      }
    }
  }

  double ParseNumber() {
    const size_t start = pos_;
    const auto digits = [&] {
      const size_t from = pos_;
      while (Peek() >= '0' && Peek() <= '9' && !AtEnd()) ++pos_;
      return pos_ - from;
    };
    if (Peek() == '-') ++pos_;
    if (Peek() == '0') {
      ++pos_;
      if (Peek() >= '0' && Peek() <= '9') Invalid("leading zero in a number");
    } else if (digits() == 0) {
      Invalid("expected a digit");
    }
    if (Peek() == '.') {
      ++pos_;
      if (digits() == 0) Invalid("expected a digit after '.'");
    }
    if (Peek() == 'e' || Peek() == 'E') {
      ++pos_;
      if (Peek() == '+' || Peek() == '-') ++pos_;
      if (digits() == 0) Invalid("expected a digit in the exponent");
    }
    double v = 0.0;
    const std::string_view number = text_.substr(start, pos_ - start);
    const auto [end, ec] = std::from_chars(number.data(), number.data() + number.size(), v);
    if (ec == std::errc::result_out_of_range) {
      // from_chars gives up on subnormal and underflowing results too; strtod rounds them
      // (and the grammar is checked above, so strtod sees a plain number).
      const std::string copy(number);
      char* copy_end = nullptr;
      v = std::strtod(copy.c_str(), &copy_end);
      if (std::isinf(v)) {
        pos_ = start;
        Invalid("number out of range of a double");
      }
      if (copy_end != copy.c_str() + copy.size()) v = number[0] == '-' ? -0.0 : 0.0;
      return v;
    }
    if (ec != std::errc() || end != number.data() + number.size()) {
      pos_ = start;
      Invalid("malformed number");
    }
    return v;
  }

  std::string_view text_;
  size_t pos_ = 0;
};

// With `lenient`, bytes that are not UTF-8 become '?' instead of an Error (for messages).
void DumpString(std::string_view s, std::string* out, bool lenient) {
  *out += '"';
  for (size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c >= 0x80) {
      const size_t n = Utf8Length(s, i);
      if (n == 0 && lenient) {
        *out += '?';
        ++i;
        continue;
      }
      if (n == 0) Fail("cannot write a JSON string that is not valid UTF-8 (byte ", i, ")");
      out->append(s.substr(i, n));
      i += n;
      continue;
    }
    switch (c) {
      case '"':
        *out += "\\\"";
        break;
      case '\\':
        *out += "\\\\";
        break;
      case '\b':
        *out += "\\b";
        break;
      case '\f':
        *out += "\\f";
        break;
      case '\n':
        *out += "\\n";
        break;
      case '\r':
        *out += "\\r";
        break;
      case '\t':
        *out += "\\t";
        break;
      default:
        if (c < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof(buf), "\\u%04x", c);
          *out += buf;
        } else {
          *out += static_cast<char>(c);
        }
    }
    ++i;
  }
  *out += '"';
}

void DumpNumber(double v, std::string* out) {
  if (!std::isfinite(v)) Fail("cannot write ", v, " as a JSON number (JSON has no NaN or Inf)");
  char buf[32];
  if (v == std::trunc(v) && std::fabs(v) <= kMaxExactInt) {
    // -0.0 is written "-0", which reads back as -0.0.
    std::snprintf(buf, sizeof(buf), "%s%lld", std::signbit(v) && v == 0 ? "-" : "",
                  static_cast<long long>(v));
    *out += buf;
    return;
  }
  const auto [end, ec] = std::to_chars(buf, buf + sizeof(buf), v);
  *out += std::string_view(buf, static_cast<size_t>(end - buf));
}

void Newline(int indent, int depth, std::string* out) {
  if (indent < 0) return;
  *out += '\n';
  out->append(static_cast<size_t>(indent) * static_cast<size_t>(depth), ' ');
}

void DumpValue(const Json& v, int indent, int depth, std::string* out) {
  switch (v.type()) {
    case Json::Type::kNull:
      *out += "null";
      return;
    case Json::Type::kBool:
      *out += v.AsBool() ? "true" : "false";
      return;
    case Json::Type::kNumber:
      DumpNumber(v.AsNumber(), out);
      return;
    case Json::Type::kString:
      DumpString(v.AsString(), out);
      return;
    case Json::Type::kArray: {
      const Json::Array& a = v.AsArray();
      *out += '[';
      for (size_t i = 0; i < a.size(); ++i) {
        if (i) *out += ',';
        Newline(indent, depth + 1, out);
        DumpValue(a[i], indent, depth + 1, out);
      }
      if (!a.empty()) Newline(indent, depth, out);
      *out += ']';
      return;
    }
    case Json::Type::kObject: {
      const Json::Object& o = v.AsObject();
      *out += '{';
      for (size_t i = 0; i < o.size(); ++i) {
        if (i) *out += ',';
        Newline(indent, depth + 1, out);
        DumpString(o[i].first, out);
        *out += indent < 0 ? ":" : ": ";
        DumpValue(o[i].second, indent, depth + 1, out);
      }
      if (!o.empty()) Newline(indent, depth, out);
      *out += '}';
      return;
    }
  }
}

// "an array", "a string", ... for messages.
std::string WithArticle(Json::Type type) {
  const std::string name(Name(type));
  if (type == Json::Type::kNull) return name;
  return (name[0] == 'a' || name[0] == 'o' ? "an " : "a ") + name;
}

}  // namespace

std::string_view Name(Json::Type type) {
  switch (type) {
    case Json::Type::kNull:
      return "null";
    case Json::Type::kBool:
      return "bool";
    case Json::Type::kNumber:
      return "number";
    case Json::Type::kString:
      return "string";
    case Json::Type::kArray:
      return "array";
    case Json::Type::kObject:
      return "object";
  }
  return "?";
}

Json Json::Parse(std::string_view text) { return Parser(text).ParseDocument(); }

std::string Json::Dump(int indent) const {
  std::string out;
  DumpValue(*this, indent, 0, &out);
  return out;
}

#define MXTRAIN_JSON_EXPECT(want)                                                    \
  MXTRAIN_CHECK(type_ == Type::want, "JSON value is ", WithArticle(type_), ", not ", \
                WithArticle(Type::want))

bool Json::AsBool() const {
  MXTRAIN_JSON_EXPECT(kBool);
  return bool_;
}
double Json::AsNumber() const {
  MXTRAIN_JSON_EXPECT(kNumber);
  return number_;
}
int64_t Json::AsInt() const {
  MXTRAIN_JSON_EXPECT(kNumber);
  MXTRAIN_CHECK(number_ == std::trunc(number_) && std::fabs(number_) <= kMaxExactInt,
                "JSON number ", number_, " is not an integer in [-2^53, 2^53]");
  return static_cast<int64_t>(number_);
}
const std::string& Json::AsString() const {
  MXTRAIN_JSON_EXPECT(kString);
  return string_;
}
const Json::Array& Json::AsArray() const {
  MXTRAIN_JSON_EXPECT(kArray);
  return array_;
}
Json::Array& Json::AsArray() {
  MXTRAIN_JSON_EXPECT(kArray);
  return array_;
}
const Json::Object& Json::AsObject() const {
  MXTRAIN_JSON_EXPECT(kObject);
  return object_;
}
Json::Object& Json::AsObject() {
  MXTRAIN_JSON_EXPECT(kObject);
  return object_;
}

#undef MXTRAIN_JSON_EXPECT

const Json* Json::Find(std::string_view key) const {
  for (const Member& m : AsObject()) {
    if (m.first == key) return &m.second;
  }
  return nullptr;
}

const Json& Json::At(std::string_view key) const {
  const Json* v = Find(key);
  if (v == nullptr) Fail("JSON object has no key ", Quoted(key));
  return *v;
}

const Json& Json::At(size_t index) const {
  const Array& a = AsArray();
  MXTRAIN_CHECK(index < a.size(), "JSON array index ", index, " is out of range (size ", a.size(),
                ")");
  return a[index];
}

Json& Json::Set(std::string key, Json value) {
  if (is_null()) *this = MakeObject();
  for (Member& m : AsObject()) {
    if (m.first == key) {
      m.second = std::move(value);
      return m.second;
    }
  }
  object_.emplace_back(std::move(key), std::move(value));
  return object_.back().second;
}

Json& Json::Push(Json value) {
  if (is_null()) *this = MakeArray();
  AsArray().push_back(std::move(value));
  return array_.back();
}

size_t Json::size() const {
  if (type_ == Type::kArray) return array_.size();
  if (type_ == Type::kObject) return object_.size();
  Fail("JSON value is ", WithArticle(type_), ", which has no size");
}

bool Json::operator==(const Json& other) const {
  if (type_ != other.type_) return false;
  switch (type_) {
    case Type::kNull:
      return true;
    case Type::kBool:
      return bool_ == other.bool_;
    case Type::kNumber:
      return number_ == other.number_;
    case Type::kString:
      return string_ == other.string_;
    case Type::kArray:
      return array_ == other.array_;
    case Type::kObject:
      return object_ == other.object_;
  }
  return false;
}

}  // namespace mxtrain
