// ParseJson, DumpJson and QuotedForMessage (io/json_util.h): what nlohmann/json accepts and
// rejects on mxtrain's behalf, the checks mxtrain adds (duplicate keys, bounded nesting),
// one-line errors, and the exact text the writers rely on (safetensors headers,
// summary.json).
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "io/json_util.h"
#include "mxtrain/error.h"

namespace mxtrain::internal {
namespace {

// ParseJson must throw an Error on one line containing "invalid JSON" and `expect`.
void ExpectParseError(std::string_view text, const std::string& expect = "") {
  try {
    ParseJson(text);
    ADD_FAILURE() << "no error parsing '" << text << "'";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_EQ(what.rfind("invalid JSON: ", 0), 0u) << what;
    EXPECT_NE(what.find(expect), std::string::npos) << "parsing '" << text << "': " << what;
    EXPECT_EQ(what.find('\n'), std::string::npos) << what;
    EXPECT_LE(what.size(), 260u) << what;
  }
}

TEST(JsonTest, ParsesEveryTypeKeepingKeyOrder) {
  const Json v = ParseJson(
      R"( {"z": null, "t": true, "f": false, "i": -12, "d": 2.5e-3, "s": "hi", "a": [1, [2], {}],
           "o": {"k": []}} )");
  ASSERT_TRUE(v.is_object());
  std::vector<std::string> keys;
  for (auto it = v.begin(); it != v.end(); ++it) keys.push_back(it.key());
  EXPECT_EQ(keys, (std::vector<std::string>{"z", "t", "f", "i", "d", "s", "a", "o"}));
  EXPECT_TRUE(v.at("z").is_null());
  EXPECT_EQ(v.at("i").get<int64_t>(), -12);
  EXPECT_EQ(v.at("d").get<double>(), 2.5e-3);
  EXPECT_EQ(v.at("a").at(1).at(0).get<int64_t>(), 2);
  EXPECT_EQ(DumpJson(ParseJson(R"({"z": 1, "a": 2, "m": 3})")), R"({"z":1,"a":2,"m":3})");
}

TEST(JsonTest, DumpsTheTextTheWritersNeed) {
  Json v = Json::object();
  v["name"] = "run 1";
  v["steps"] = 100;
  v["loss"] = 0.25;
  v["none"] = nullptr;
  v["list"] = {1, "two"};
  v["empty"] = Json::array();
  v["steps"] = 200;  // replaces in place, keeps the position
  EXPECT_EQ(DumpJson(v),
            R"({"name":"run 1","steps":200,"loss":0.25,"none":null,"list":[1,"two"],"empty":[]})");
  EXPECT_EQ(DumpJson(v, 2),
            "{\n  \"name\": \"run 1\",\n  \"steps\": 200,\n  \"loss\": 0.25,\n  \"none\": null,\n"
            "  \"list\": [\n    1,\n    \"two\"\n  ],\n  \"empty\": []\n}");
  EXPECT_EQ(DumpJson(Json::object(), 2), "{}");
  EXPECT_EQ(ParseJson(DumpJson(v, 2)), v);
  // Integers as integers; doubles as the shortest text that reads back to the same value.
  EXPECT_EQ(DumpJson(Json(int64_t{1} << 53)), "9007199254740992");
  EXPECT_EQ(DumpJson(Json(uint64_t{18446744073709551615u})), "18446744073709551615");
  for (double d : {0.1, 1.0 / 3.0, -2.5e-8, 6.02214076e23, 1.7976931348623157e308,
                   std::numeric_limits<double>::denorm_min(), 123456789.125, 3.0e-310}) {
    EXPECT_EQ(ParseJson(DumpJson(Json(d))).get<double>(), d) << DumpJson(Json(d));
  }
}

TEST(JsonTest, StringEscapesRoundTrip) {
  std::string all_controls;
  for (int c = 0; c < 0x20; ++c) all_controls += static_cast<char>(c);
  for (const std::string& s :
       {std::string("quote \" backslash \\ slash /"), all_controls, std::string("\x7f del"),
        std::string("caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80"), std::string("")}) {
    const std::string text = DumpJson(Json(s));
    for (char c : text) EXPECT_GE(static_cast<unsigned char>(c), 0x20) << text;
    EXPECT_EQ(ParseJson(text).get<std::string>(), s) << text;
  }
  EXPECT_EQ(DumpJson(Json("a\"b\\c\n\t\b\f\r\x01\x1f")), R"("a\"b\\c\n\t\b\f\r\u0001\u001f")");
  EXPECT_EQ(DumpJson(Json("caf\xc3\xa9/")), "\"caf\xc3\xa9/\"");  // UTF-8 and '/' as is
  EXPECT_EQ(ParseJson(R"("\ud83d\ude00\u0041\/")").get<std::string>(),
            "\xf0\x9f\x98\x80"
            "A/");
  try {
    DumpJson(Json("bad\xff"));  // not UTF-8: the output would not be JSON
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("not valid UTF-8"), std::string::npos) << e.what();
  }
  EXPECT_EQ(QuotedForMessage("a\nb\"\xff"), "\"a?b\\\"\xef\xbf\xbd\"");
}

TEST(JsonTest, RejectsInvalidText) {
  for (const char* text : {"",
                           "   ",
                           "{",
                           "[1,]",
                           "{\"a\":1,}",
                           "[1 2]",
                           "{\"a\" 1}",
                           "{'a':1}",
                           "[1] x",
                           "tru",
                           "NaN",
                           "Infinity",
                           "// c\n1",
                           "/* c */ 1",
                           "01",
                           "-",
                           "1.",
                           ".5",
                           "+1",
                           "1e",
                           "1e+",
                           "\"abc",
                           "\"abc\\",
                           "\"a\nb\"",
                           "\"\\x41\"",
                           "\"\\u12\"",
                           "\"\\u12g4\"",
                           "\"\\ud83d\"",
                           "\"\\ud83d\\u0041\"",
                           "\"\\ude00\"",
                           "\"\xff\"",
                           "\"\xc3\"",
                           "\"\xc0\xaf\"",
                           "\"\xed\xa0\x80\"",
                           "\"\xf4\x90\x80\x80\""}) {
    ExpectParseError(text);
  }
  ExpectParseError(std::string_view("[1,\0]", 5));
  ExpectParseError(std::string_view("{}\0", 3), "NUL byte at offset 2");  // nlohmann stops at NUL
  ExpectParseError(std::string_view("\"a\0\"", 4), "NUL");
  ExpectParseError("\xEF\xBB\xBF{}", "byte order mark");  // nlohmann would skip it
  ExpectParseError("1e400", "number overflow");
  ExpectParseError("-1e400", "number overflow");
  ExpectParseError("{\"a\":1,\"a\":2}", "duplicate key \"a\"");
  ExpectParseError("{\"o\":{\"a\":1,\"b\":{\"a\":2},\"a\":3}}", "duplicate key \"a\"");
  ExpectParseError("\"" + std::string(100000, 'x'));  // the message stays short
}

TEST(JsonTest, NumbersAtTheEdges) {
  EXPECT_EQ(ParseJson("1e308").get<double>(), 1e308);
  EXPECT_EQ(ParseJson("1e-400").get<double>(), 0.0);  // underflow rounds to zero
  EXPECT_EQ(ParseJson("9007199254740993").get<uint64_t>(), 9007199254740993u);
  EXPECT_EQ(ParseJson("-9223372036854775808").get<int64_t>(), std::numeric_limits<int64_t>::min());
  EXPECT_TRUE(ParseJson("123456789012345678901234567890").is_number_float());
  EXPECT_EQ(ParseJson("4.9406564584124654e-324").get<double>(),
            std::numeric_limits<double>::denorm_min());
}

TEST(JsonTest, DeepNestingIsAnErrorNotACrash) {
  const int ok = kMaxJsonDepth;
  EXPECT_NO_THROW(ParseJson(std::string(ok, '[') + std::string(ok, ']')));
  ExpectParseError(std::string(ok + 1, '[') + std::string(ok + 1, ']'), "nesting deeper");
  ExpectParseError(std::string(100000, '['), "nesting deeper");
  std::string objects;
  for (int i = 0; i <= ok; ++i) objects += "{\"a\":";
  ExpectParseError(objects + "1" + std::string(ok + 1, '}'), "nesting deeper");
}

}  // namespace
}  // namespace mxtrain::internal
