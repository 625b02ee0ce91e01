// Json: a small, strict JSON value (RFC 8259) for the files mxtrain reads and writes itself:
// safetensors headers, summary.json of `mxtrain train`, and the tests that read them back.
//
// A value is null, a bool, a number (a double), a string (UTF-8), an array, or an object
// whose members keep the order in which they were parsed or added. Parse accepts exactly
// RFC 8259: no comments, no trailing commas, no NaN/Infinity, no leading zeros, no control
// characters or invalid UTF-8 in strings, no lone surrogates in \u escapes; and, stricter
// than the RFC, no duplicate keys in an object (a file that says two things is an error).
// Every error is an Error naming the byte offset.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

namespace mxtrain {

class Json {
 public:
  enum class Type : uint8_t { kNull, kBool, kNumber, kString, kArray, kObject };
  using Array = std::vector<Json>;
  using Member = std::pair<std::string, Json>;
  using Object = std::vector<Member>;

  Json() = default;  // null
  Json(std::nullptr_t) {}
  Json(bool b) : type_(Type::kBool), bool_(b) {}
  // Any arithmetic type but bool becomes a number (exact for integers up to 2^53).
  template <typename T>
  requires(std::is_arithmetic_v<T> && !std::is_same_v<T, bool>) Json(T v)
      : type_(Type::kNumber), number_(static_cast<double>(v)) {}
  Json(const char* s) : type_(Type::kString), string_(s) {}
  Json(std::string_view s) : type_(Type::kString), string_(s) {}
  Json(std::string s) : type_(Type::kString), string_(std::move(s)) {}
  Json(Array a) : type_(Type::kArray), array_(std::move(a)) {}
  Json(Object o) : type_(Type::kObject), object_(std::move(o)) {}

  // An empty array / object (Json{} is null, and Json(Array{}) reads less clearly).
  static Json MakeArray() { return Json(Array{}); }
  static Json MakeObject() { return Json(Object{}); }

  // Parses one JSON text (surrounding whitespace allowed). Throws Error "invalid JSON at
  // offset N: <problem>". Nesting deeper than kMaxDepth is an error, not a stack overflow.
  static Json Parse(std::string_view text);
  static constexpr int kMaxDepth = 512;

  // The JSON text: compact with indent < 0, else one member or element per line indented by
  // `indent` spaces per level. Numbers are written exactly (integers up to 2^53 without an
  // exponent, others as the shortest text that reads back to the same double). Throws Error
  // for a non-finite number (JSON has none) and for a string that is not valid UTF-8.
  std::string Dump(int indent = -1) const;

  Type type() const { return type_; }
  bool is_null() const { return type_ == Type::kNull; }
  bool is_bool() const { return type_ == Type::kBool; }
  bool is_number() const { return type_ == Type::kNumber; }
  bool is_string() const { return type_ == Type::kString; }
  bool is_array() const { return type_ == Type::kArray; }
  bool is_object() const { return type_ == Type::kObject; }

  // The value as the given type; Error when it holds another type.
  bool AsBool() const;
  double AsNumber() const;
  // A number that is an integer in [-2^53, 2^53], where doubles hold every integer.
  int64_t AsInt() const;
  const std::string& AsString() const;
  const Array& AsArray() const;
  Array& AsArray();
  const Object& AsObject() const;
  Object& AsObject();

  // Object member by key: nullptr when absent (Error when not an object).
  const Json* Find(std::string_view key) const;
  // Object member by key; Error when absent.
  const Json& At(std::string_view key) const;
  // Array element; Error when out of range.
  const Json& At(size_t index) const;
  // Sets an object member: replaces the value of an existing key, else appends. A null
  // value becomes an empty object first.
  Json& Set(std::string key, Json value);
  // Appends to an array. A null value becomes an empty array first.
  Json& Push(Json value);
  // Elements of an array or members of an object; Error for other types.
  size_t size() const;

  // Deep equality; objects compare their members in order.
  bool operator==(const Json& other) const;

 private:
  Type type_ = Type::kNull;
  bool bool_ = false;
  double number_ = 0.0;
  std::string string_;
  Array array_;
  Object object_;
};

// Type name for messages: "null", "bool", "number", "string", "array", "object".
std::string_view Name(Json::Type type);

}  // namespace mxtrain
