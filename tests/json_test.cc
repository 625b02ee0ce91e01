// Json: the RFC 8259 grammar accepted and rejected byte for byte, escapes in both directions,
// numbers that must survive a Dump / Parse round trip exactly, and the accessors' errors.
#include "mxtrain/json.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "mxtrain/error.h"

namespace mxtrain {
namespace {

// Parse must throw an Error containing `expect` (and an offset).
void ExpectParseError(std::string_view text, const std::string& expect) {
  try {
    Json::Parse(text);
    ADD_FAILURE() << "no error parsing '" << text << "' (expected '" << expect << "')";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("invalid JSON at offset"), std::string::npos) << what;
    EXPECT_NE(what.find(expect), std::string::npos) << "parsing '" << text << "': " << what;
    EXPECT_EQ(what.find('\n'), std::string::npos) << what;
  }
}

TEST(JsonTest, ParsesEveryType) {
  const Json v = Json::Parse(
      R"( {"n": null, "t": true, "f": false, "i": -12, "d": 2.5e-3, "s": "hi", "a": [1, [2], {}],
           "o": {"k": []}} )");
  ASSERT_TRUE(v.is_object());
  EXPECT_EQ(v.size(), 8u);
  EXPECT_TRUE(v.At("n").is_null());
  EXPECT_TRUE(v.At("t").AsBool());
  EXPECT_FALSE(v.At("f").AsBool());
  EXPECT_EQ(v.At("i").AsInt(), -12);
  EXPECT_EQ(v.At("d").AsNumber(), 2.5e-3);
  EXPECT_EQ(v.At("s").AsString(), "hi");
  EXPECT_EQ(v.At("a").size(), 3u);
  EXPECT_EQ(v.At("a").At(size_t{1}).At(size_t{0}).AsInt(), 2);
  EXPECT_TRUE(v.At("a").At(size_t{2}).is_object());
  EXPECT_TRUE(v.At("o").At("k").is_array());
  EXPECT_EQ(v.Find("missing"), nullptr);
}

TEST(JsonTest, ObjectsKeepKeyOrder) {
  const Json v = Json::Parse(R"({"z": 1, "a": 2, "m": 3})");
  std::vector<std::string> keys;
  for (const auto& [k, value] : v.AsObject()) keys.push_back(k);
  EXPECT_EQ(keys, (std::vector<std::string>{"z", "a", "m"}));
  EXPECT_EQ(v.Dump(), R"({"z":1,"a":2,"m":3})");
}

TEST(JsonTest, BuildAndDump) {
  Json v;
  v.Set("name", "run 1");
  v.Set("steps", 100);
  v.Set("loss", 0.25);
  v.Set("ok", true);
  v.Set("none", nullptr);
  Json& list = v.Set("list", Json::MakeArray());
  list.Push(1);
  list.Push("two");
  v.Set("steps", 200);  // replaces in place, keeps the position
  EXPECT_EQ(v.Dump(),
            R"({"name":"run 1","steps":200,"loss":0.25,"ok":true,"none":null,"list":[1,"two"]})");
  EXPECT_EQ(v.Dump(2),
            "{\n  \"name\": \"run 1\",\n  \"steps\": 200,\n  \"loss\": 0.25,\n  \"ok\": true,\n"
            "  \"none\": null,\n  \"list\": [\n    1,\n    \"two\"\n  ]\n}");
  EXPECT_EQ(Json::MakeArray().Dump(2), "[]");
  EXPECT_EQ(Json::MakeObject().Dump(2), "{}");
  EXPECT_EQ(Json::Parse(v.Dump(2)), v);
  EXPECT_EQ(Json::Parse(v.Dump()), v);
}

TEST(JsonTest, StringEscapesRoundTrip) {
  const std::string all_controls = [] {
    std::string s;
    for (int c = 0; c < 0x20; ++c) s += static_cast<char>(c);
    return s;
  }();
  for (const std::string& s :
       {std::string("quote \" backslash \\ slash /"), all_controls, std::string("\x7f del"),
        std::string("caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80"), std::string("")}) {
    const std::string text = Json(s).Dump();
    for (char c : text) EXPECT_GE(static_cast<unsigned char>(c), 0x20) << text;
    EXPECT_EQ(Json::Parse(text).AsString(), s) << text;
  }
  EXPECT_EQ(Json("a\"b\\c\n\t\b\f\r\x01").Dump(), R"("a\"b\\c\n\t\b\f\r\u0001")");
  EXPECT_EQ(Json("\x1f").Dump(), R"("\u001f")");
  EXPECT_EQ(Json("caf\xc3\xa9").Dump(), "\"caf\xc3\xa9\"");  // UTF-8 passes through
}

TEST(JsonTest, ParsesEscapes) {
  EXPECT_EQ(Json::Parse(R"("\"\\\/\b\f\n\r\t")").AsString(), "\"\\/\b\f\n\r\t");
  EXPECT_EQ(Json::Parse(R"("\u0041\u00e9\u20AC")").AsString(), "A\xc3\xa9\xe2\x82\xac");
  EXPECT_EQ(Json::Parse(R"("\u0000")").AsString(), std::string(1, '\0'));
  // U+1F600 as a surrogate pair.
  EXPECT_EQ(Json::Parse(R"("\ud83d\ude00")").AsString(), "\xf0\x9f\x98\x80");
  EXPECT_EQ(Json::Parse(R"("\uDBFF\uDFFF")").AsString(), "\xf4\x8f\xbf\xbf");  // U+10FFFF
}

TEST(JsonTest, Numbers) {
  EXPECT_EQ(Json::Parse("0").AsNumber(), 0.0);
  EXPECT_TRUE(std::signbit(Json::Parse("-0").AsNumber()));
  EXPECT_EQ(Json::Parse("-0.5E+2").AsNumber(), -50.0);
  EXPECT_EQ(Json::Parse("1e308").AsNumber(), 1e308);
  EXPECT_EQ(Json::Parse("9007199254740992").AsInt(), int64_t{1} << 53);
  EXPECT_EQ(Json::Parse("4.9406564584124654e-324").AsNumber(),
            std::numeric_limits<double>::denorm_min());
  EXPECT_EQ(Json::Parse("1e-400").AsNumber(), 0.0);  // underflow rounds to zero
  EXPECT_EQ(Json(3).Dump(), "3");
  EXPECT_EQ(Json(-7.0).Dump(), "-7");
  EXPECT_EQ(Json(-0.0).Dump(), "-0");
  EXPECT_EQ(Json(int64_t{1} << 53).Dump(), "9007199254740992");
  EXPECT_EQ(Json(0.1).Dump(), "0.1");
  EXPECT_EQ(Json(1e300).Dump(), "1e+300");
  // Doubles round-trip exactly through their shortest text.
  for (double d : {0.1, 1.0 / 3.0, -2.5e-8, 6.02214076e23, 1.7976931348623157e308,
                   std::numeric_limits<double>::denorm_min(), 123456789.125, 1e21, 3.0e-310}) {
    const std::string text = Json(d).Dump();
    EXPECT_EQ(Json::Parse(text).AsNumber(), d) << text;
  }
  EXPECT_THROW(Json(NAN).Dump(), Error);
  EXPECT_THROW(Json(INFINITY).Dump(), Error);
  EXPECT_THROW(Json(2.5).AsInt(), Error);
  EXPECT_THROW(Json(1e17).AsInt(), Error);
}

TEST(JsonTest, RejectsInvalidText) {
  ExpectParseError("", "unexpected end");
  ExpectParseError("   ", "unexpected end");
  ExpectParseError("{", "expected a string key");
  ExpectParseError("[1,]", "unexpected character");
  ExpectParseError("{\"a\":1,}", "expected a string key");
  ExpectParseError("[1 2]", "expected ',' or ']'");
  ExpectParseError("{\"a\" 1}", "expected ':'");
  ExpectParseError("{\"a\":1 \"b\":2}", "expected ',' or '}'");
  ExpectParseError("{'a':1}", "expected a string key");
  ExpectParseError("[1] x", "unexpected text after the value");
  ExpectParseError("tru", "unexpected character");
  ExpectParseError("nul", "unexpected character");
  ExpectParseError("NaN", "unexpected character");
  ExpectParseError("Infinity", "unexpected character");
  ExpectParseError("// c\n1", "unexpected character");
  ExpectParseError("01", "leading zero");
  ExpectParseError("-", "expected a digit");
  ExpectParseError("1.", "expected a digit after '.'");
  ExpectParseError(".5", "unexpected character");
  ExpectParseError("+1", "unexpected character");
  ExpectParseError("1e", "expected a digit in the exponent");
  ExpectParseError("1e+", "expected a digit in the exponent");
  ExpectParseError("1e400", "out of range");
  ExpectParseError("-1e400", "out of range");
  ExpectParseError("\"abc", "unterminated string");
  ExpectParseError("\"abc\\", "unterminated string");
  ExpectParseError("\"a\nb\"", "control character");
  ExpectParseError("\"\\x41\"", "unknown escape");
  ExpectParseError("\"\\u12\"", "4 hex digits");
  ExpectParseError("\"\\u12g4\"", "4 hex digits");
  ExpectParseError("\"\\ud83d\"", "lone high surrogate");
  ExpectParseError("\"\\ud83d\\u0041\"", "lone high surrogate");
  ExpectParseError("\"\\ude00\"", "lone low surrogate");
  ExpectParseError("\"\xff\"", "invalid UTF-8");
  ExpectParseError("\"\xc3\"", "invalid UTF-8");              // truncated sequence
  ExpectParseError("\"\xc0\xaf\"", "invalid UTF-8");          // overlong '/'
  ExpectParseError("\"\xed\xa0\x80\"", "invalid UTF-8");      // an encoded surrogate
  ExpectParseError("\"\xf4\x90\x80\x80\"", "invalid UTF-8");  // past U+10FFFF
  ExpectParseError(std::string_view("[1,\0]", 5), "unexpected character");
  ExpectParseError("{\"a\":1,\"a\":2}", "duplicate key \"a\"");
}

TEST(JsonTest, ErrorsNameTheOffset) {
  try {
    Json::Parse("[1, 2, x]");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("offset 7"), std::string::npos) << e.what();
  }
}

TEST(JsonTest, DeepNestingIsAnErrorNotACrash) {
  const int ok = Json::kMaxDepth;
  EXPECT_NO_THROW(Json::Parse(std::string(ok, '[') + std::string(ok, ']')));
  ExpectParseError(std::string(ok + 1, '[') + std::string(ok + 1, ']'), "nesting deeper");
  ExpectParseError(std::string(100000, '['), "nesting deeper");
  ExpectParseError(std::string(100000, '{'), "expected a string key");
}

TEST(JsonTest, AccessorErrors) {
  const Json v = Json::Parse(R"({"a": [1], "s": "x"})");
  EXPECT_THROW(v.At("b"), Error);
  EXPECT_THROW(v.At("a").At(size_t{1}), Error);
  EXPECT_THROW(v.At("s").AsNumber(), Error);
  EXPECT_THROW(v.At("s").size(), Error);
  EXPECT_THROW(v.AsArray(), Error);
  EXPECT_THROW(Json(1).Find("a"), Error);
  try {
    v.At("s").AsBool();
    FAIL();
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "JSON value is a string, not a bool");
  }
  try {
    v.At("a").AsObject();
    FAIL();
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "JSON value is an array, not an object");
  }
  EXPECT_THROW(Json("\xff").Dump(), Error);  // not UTF-8: the output would not be JSON
}

TEST(JsonTest, Equality) {
  EXPECT_EQ(Json::Parse("[1, {\"a\": null}]"), Json::Parse("[1.0,{\"a\":null}]"));
  EXPECT_FALSE(Json::Parse("{\"a\":1,\"b\":2}") == Json::Parse("{\"b\":2,\"a\":1}"));
  EXPECT_FALSE(Json(1) == Json("1"));
  EXPECT_FALSE(Json(true) == Json(1));
}

}  // namespace
}  // namespace mxtrain
