// WriteSafetensors / ReadSafetensors: round trips of every dtype and rank, the header checked
// by an independent parse, files written by hand from the format description, every kind of
// corrupt file (each must throw Error, and under the dev preset's sanitizers never crash),
// and writes that fail without leaving or touching anything.
#include "mxtrain/safetensors.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "io/json_util.h"
#include "mxtrain/error.h"
#include "temp_dir_test.h"
#include "test_util.h"

namespace mxtrain {
namespace {

namespace fs = std::filesystem;

using testing_util::ReadBytes;
using testing_util::WriteBytes;

// A file encoded here, independently of the library: the 8-byte little-endian length of
// `header` (used as given, no padding), the header, then the data.
std::string RawSafetensors(const std::string& header, const std::string& data) {
  std::string out;
  for (int i = 0; i < 8; ++i) out += static_cast<char>((uint64_t{header.size()} >> (8 * i)) & 0xFF);
  return out + header + data;
}

uint64_t LoadLe64(const std::string& bytes) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i)
    v = (v << 8) | static_cast<unsigned char>(bytes[static_cast<size_t>(i)]);
  return v;
}

std::string Bytes(const Tensor& t) {
  return t.NumBytes() == 0 ? std::string()
                           : std::string(static_cast<const char*>(t.raw()), t.NumBytes());
}

Tensor RandomTensor(DType dtype, const Shape& shape, uint64_t seed) {
  Tensor t = Tensor::Empty(dtype, shape);
  std::mt19937_64 rng(seed);
  auto* p = static_cast<unsigned char*>(t.raw());
  for (size_t i = 0; i < t.NumBytes(); ++i) p[i] = static_cast<unsigned char>(rng());
  return t;
}

class SafetensorsTest : public testing_util::TempDirTest {
 protected:
  // ReadSafetensors must throw an Error "<path>: ..." containing `expect`, on one line.
  void ExpectReadError(const std::string& path, const std::string& expect) {
    try {
      ReadSafetensors(path);
      ADD_FAILURE() << "no error reading " << path << " (expected '" << expect << "')";
    } catch (const Error& e) {
      const std::string what = e.what();
      EXPECT_EQ(what.rfind(path + ": ", 0), 0u) << what;
      EXPECT_NE(what.find(expect), std::string::npos) << "expected '" << expect << "': " << what;
      EXPECT_EQ(what.find('\n'), std::string::npos) << what;
    }
  }
  void ExpectRawError(const std::string& bytes, const std::string& expect) {
    const std::string path = Path("bad.safetensors");
    WriteBytes(path, bytes);
    ExpectReadError(path, expect);
  }
  // Reading must either succeed or throw Error: never crash, never throw anything else.
  void ExpectNoCrash(const std::string& bytes) {
    const std::string path = Path("fuzz.safetensors");
    WriteBytes(path, bytes);
    try {
      ReadSafetensors(path);
    } catch (const Error&) {
    }
  }
};

const std::vector<Shape>& RankShapes() {
  static const std::vector<Shape> shapes = {Shape{},          Shape{0},       Shape{5},
                                            Shape{2, 3},      Shape{2, 0, 3}, Shape{3, 1, 2, 2},
                                            Shape{1, 2, 3, 4}};
  return shapes;
}

TEST_F(SafetensorsTest, RoundTripsEveryDtypeAndRank) {
  std::vector<NamedTensor> tensors;
  uint64_t seed = 1;
  for (DType dtype : {DType::kF32, DType::kBF16, DType::kU8}) {
    for (const Shape& shape : RankShapes()) {
      tensors.push_back({StrCat(Name(dtype), "/rank", shape.rank(), "/", shape.ToString()),
                         RandomTensor(dtype, shape, seed++)});
    }
  }
  const std::map<std::string, std::string> metadata = {
      {"format", "pt"}, {"step", "12"}, {"note", "quote \" newline \n caf\xc3\xa9"}, {"", ""}};
  const std::string path = Path("all.safetensors");
  WriteSafetensors(path, tensors, metadata);
  EXPECT_EQ(Listing(dir_), std::vector<std::string>{"all.safetensors"});  // no temporaries

  const SafetensorsFile file = ReadSafetensors(path);
  EXPECT_EQ(file.metadata, metadata);
  ASSERT_EQ(file.tensors.size(), tensors.size());
  for (size_t i = 0; i < tensors.size(); ++i) {
    SCOPED_TRACE(tensors[i].name);
    EXPECT_EQ(file.tensors[i].name, tensors[i].name);
    EXPECT_EQ(file.tensors[i].tensor.dtype(), tensors[i].tensor.dtype());
    EXPECT_EQ(file.tensors[i].tensor.shape(), tensors[i].tensor.shape());
    EXPECT_EQ(file.tensors[i].tensor.rank(), tensors[i].tensor.rank());
    EXPECT_EQ(Bytes(file.tensors[i].tensor), Bytes(tensors[i].tensor));
  }
}

TEST_F(SafetensorsTest, RoundTripsNoTensorsAndNoMetadata) {
  const std::string path = Path("empty.safetensors");
  WriteSafetensors(path, {});
  EXPECT_EQ(ReadBytes(path), RawSafetensors("{}      ", ""));
  const SafetensorsFile file = ReadSafetensors(path);
  EXPECT_TRUE(file.tensors.empty());
  EXPECT_TRUE(file.metadata.empty());
}

// The header's exact text, as mxtrain has always written it (checkpoints of older builds
// compare byte for byte): compact, metadata first and sorted, tensors in the order given,
// each with dtype, shape, data_offsets; escapes for quotes and control bytes, UTF-8 as is.
TEST_F(SafetensorsTest, HeaderTextIsCompactInWriteOrder) {
  const std::string path = Path("exact.safetensors");
  const Tensor b = RandomTensor(DType::kF32, Shape{2}, 1);
  const Tensor a = RandomTensor(DType::kU8, Shape{}, 2);
  WriteSafetensors(path, {{"b", b}, {"a\n\xc3\xa9\"", a}}, {{"k", "v"}, {"a", "\x01"}});
  std::string header = R"({"__metadata__":{"a":"\u0001","k":"v"},"b":{"dtype":"F32","shape":[2],)"
                       R"("data_offsets":[0,8]},"a\n)"
                       "\xc3\xa9"
                       R"(\"":{"dtype":"U8","shape":[],"data_offsets":[8,9]}})";
  header.append((8 - header.size() % 8) % 8, ' ');
  EXPECT_EQ(ReadBytes(path), RawSafetensors(header, Bytes(b) + Bytes(a)));
}

TEST_F(SafetensorsTest, HeaderIsPaddedJsonDescribingTheData) {
  std::vector<NamedTensor> tensors = {
      {"w", RandomTensor(DType::kBF16, Shape{3, 5}, 7)},
      {"scalar", RandomTensor(DType::kF32, Shape{}, 8)},
      {"empty", RandomTensor(DType::kU8, Shape{0, 4}, 9)},
      {"scales", RandomTensor(DType::kU8, Shape{7}, 10)},
  };
  for (int extra = 0; extra < 8; ++extra) {  // every header length modulo 8
    SCOPED_TRACE(extra);
    tensors[0].name = "w" + std::string(static_cast<size_t>(extra), 'x');
    const std::string path = Path("h.safetensors");
    WriteSafetensors(path, tensors, {{"k", "v"}});
    const std::string bytes = ReadBytes(path);
    ASSERT_GE(bytes.size(), 8u);
    const uint64_t n = LoadLe64(bytes);
    EXPECT_EQ(n % 8, 0u);
    ASSERT_LE(8 + n, bytes.size());
    const std::string text = bytes.substr(8, n);
    EXPECT_EQ(text.front(), '{');
    EXPECT_NE(text.back(), '\0');
    const internal::Json header = internal::ParseJson(text);
    ASSERT_TRUE(header.is_object());
    EXPECT_EQ(header.size(), tensors.size() + 1);
    EXPECT_EQ(header.begin().key(), "__metadata__");
    EXPECT_EQ(header.at("__metadata__"), internal::ParseJson(R"({"k": "v"})"));
    const std::string buffer = bytes.substr(8 + n);
    uint64_t offset = 0;
    const char* dtypes[] = {"BF16", "F32", "U8", "U8"};
    for (size_t i = 0; i < tensors.size(); ++i) {
      const internal::Json& entry = header.at(tensors[i].name);
      EXPECT_EQ(entry.size(), 3u);
      EXPECT_EQ(entry.at("dtype").get<std::string>(), dtypes[i]);
      std::vector<int64_t> shape;
      for (const internal::Json& d : entry.at("shape")) shape.push_back(d.get<int64_t>());
      EXPECT_EQ(Shape(shape), tensors[i].tensor.shape());
      const internal::Json& offsets = entry.at("data_offsets");
      ASSERT_EQ(offsets.size(), 2u);
      EXPECT_EQ(offsets.at(0).get<int64_t>(), static_cast<int64_t>(offset));
      offset += tensors[i].tensor.NumBytes();
      EXPECT_EQ(offsets.at(1).get<int64_t>(), static_cast<int64_t>(offset));
      EXPECT_EQ(buffer.substr(offsets.at(0).get<int64_t>(), tensors[i].tensor.NumBytes()),
                Bytes(tensors[i].tensor));
    }
    EXPECT_EQ(buffer.size(), offset);
  }
}

// The example of the reference implementation's docs and tests (safetensors/src/lib.rs,
// tensor.rs): a length byte '<' (60), the header, and 16 zero bytes of a 2x2 I32 tensor.
// mxtrain holds no I32, so the test also loads it with the dtype changed to F32 (same
// length) and with a nonzero element, 0x40100000 = 2.25f.
const char kSpecExample[] =
    "<\x00\x00\x00\x00\x00\x00\x00{\"test\":{\"dtype\":\"I32\",\"shape\":[2,2],\"data_offsets\":[0,"
    "16]}}\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00";

TEST_F(SafetensorsTest, LoadsTheSpecExample) {
  const std::string spec(kSpecExample, sizeof(kSpecExample) - 1);
  ASSERT_EQ(spec.size(), 8u + 60 + 16);
  std::string bytes = spec;
  bytes.replace(bytes.find("I32"), 3, "F32");
  bytes[8 + 60 + 6] = '\x10';
  bytes[8 + 60 + 7] = '@';
  const std::string path = Path("spec.safetensors");
  WriteBytes(path, bytes);
  const SafetensorsFile file = ReadSafetensors(path);
  ASSERT_EQ(file.tensors.size(), 1u);
  EXPECT_EQ(file.tensors[0].name, "test");
  EXPECT_EQ(file.tensors[0].tensor.dtype(), DType::kF32);
  EXPECT_EQ(file.tensors[0].tensor.shape(), (Shape{2, 2}));
  const float* v = file.tensors[0].tensor.data<float>();
  EXPECT_EQ(v[0], 0.0f);
  EXPECT_EQ(v[1], 2.25f);
  EXPECT_EQ(v[2], 0.0f);
  EXPECT_EQ(v[3], 0.0f);
  EXPECT_TRUE(file.metadata.empty());
  // The original example is I32, which mxtrain does not hold: rejected, not reinterpreted.
  ExpectRawError(spec, "unsupported dtype \"I32\"");
}

TEST_F(SafetensorsTest, LoadsHandWrittenVariants) {
  // Metadata last, keys not in data order, an empty tensor, a scalar, pretty-printed JSON
  // and trailing whitespace padding (what other writers produce).
  const std::string header =
      "{\n  \"b\": {\"data_offsets\": [4, 6], \"shape\": [2], \"dtype\": \"U8\"},\n"
      "  \"a\": {\"dtype\": \"F32\", \"shape\": [], \"data_offsets\": [0, 4]},\n"
      "  \"z\": {\"dtype\": \"BF16\", \"shape\": [0, 3], \"data_offsets\": [6, 6]},\n"
      "  \"c\": {\"dtype\": \"BF16\", \"shape\": [1, 1, 1, 1], \"data_offsets\": [6, 8]},\n"
      "  \"__metadata__\": {\"format\": \"pt\"}\n}   \n\t ";
  const float one = 1.0f;
  std::string data(reinterpret_cast<const char*>(&one), 4);
  data += "\x07\x09";
  data += "\x80\x3f";  // bf16 1.0
  const std::string path = Path("hand.safetensors");
  WriteBytes(path, RawSafetensors(header, data));
  const SafetensorsFile file = ReadSafetensors(path);
  ASSERT_EQ(file.tensors.size(), 4u);
  EXPECT_EQ(file.tensors[0].name, "a");  // data order
  EXPECT_EQ(file.tensors[0].tensor.shape(), Shape{});
  EXPECT_EQ(file.tensors[0].tensor.NumElements(), 1);
  EXPECT_EQ(*file.tensors[0].tensor.data<float>(), 1.0f);
  EXPECT_EQ(file.tensors[1].name, "b");
  EXPECT_EQ(Bytes(file.tensors[1].tensor), "\x07\x09");
  EXPECT_EQ(file.tensors[2].name, "z");  // the empty one sorts before c at the same offset
  EXPECT_EQ(file.tensors[2].tensor.shape(), (Shape{0, 3}));
  EXPECT_EQ(file.tensors[3].name, "c");
  EXPECT_EQ(file.tensors[3].tensor.data<uint16_t>()[0], 0x3F80);
  EXPECT_EQ(file.metadata, (std::map<std::string, std::string>{{"format", "pt"}}));
}

TEST_F(SafetensorsTest, RejectsCorruptFiles) {
  const std::string f32x2 = std::string(8, '\x01');
  const auto one = [&](const std::string& entry, const std::string& data) {
    return RawSafetensors("{\"t\": " + entry + "}", data);
  };
  ExpectRawError("", "is truncated: 0 bytes");
  ExpectRawError(std::string("\x10\0\0", 3), "is truncated: 3 bytes");
  ExpectRawError(RawSafetensors("{}", "").substr(0, 9), "runs past the end of the file");
  ExpectRawError(std::string("\xff\0\0\0\0\0\0\0{}", 10), "runs past the end of the file");
  ExpectRawError(std::string("\0\0\0\0\0\0\0\x80{}", 10), "exceeds the limit");
  ExpectRawError(RawSafetensors("", ""), "does not start with '{'");
  ExpectRawError(RawSafetensors(" {}", ""), "does not start with '{'");
  ExpectRawError(RawSafetensors("[]", ""), "does not start with '{'");
  ExpectRawError(RawSafetensors("{\"t\": ", ""), "the header is not valid JSON");
  ExpectRawError(RawSafetensors(std::string("{}\0\0\0\0\0\0", 8), ""),
                 "the header is not valid JSON");
  ExpectRawError(RawSafetensors("{\"t\xff\": {}}", ""), "not valid JSON");
  ExpectRawError(
      RawSafetensors("{\"a\": " + std::string(1000, '[') + std::string(1000, ']') + "}", ""),
      "not valid JSON");
  const std::string ok = R"({"dtype": "F32", "shape": [2], "data_offsets": [0, 8]})";
  ExpectRawError(RawSafetensors("{\"t\": " + ok + ", \"t\": " + ok + "}", f32x2),
                 "duplicate key \"t\"");
  // Offsets: truncated data, extra data, overlap, hole, not starting at 0, reversed.
  ExpectRawError(one(ok, f32x2.substr(0, 7)), "cover 8 bytes of data but the file holds 7");
  ExpectRawError(one(ok, f32x2 + "x"), "bytes after the last tensor");
  ExpectRawError(RawSafetensors(R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
                                    "b": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]}})",
                                std::string(12, 'x')),
                 "(overlap)");
  ExpectRawError(RawSafetensors(R"({"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]},
                                    "b": {"dtype": "F32", "shape": [1], "data_offsets": [8, 12]}})",
                                std::string(12, 'x')),
                 "(a hole)");
  ExpectRawError(one(R"({"dtype": "F32", "shape": [1], "data_offsets": [4, 8]})", f32x2),
                 "(a hole)");
  ExpectRawError(one(R"({"dtype": "F32", "shape": [1], "data_offsets": [8, 4]})", f32x2),
                 "end before they begin");
  ExpectRawError(one(R"({"dtype": "F32", "shape": [2], "data_offsets": [0, 1e300]})", f32x2),
                 "not a non-negative integer");
  // Entries of tensor "t" over 8 data bytes, and what the error must say.
  const struct {
    const char* entry;
    const char* expect;
  } kBadEntries[] = {
      {R"({"dtype": "F64", "shape": [1], "data_offsets": [0, 8]})", "unsupported dtype \"F64\""},
      {R"({"dtype": "f32", "shape": [2], "data_offsets": [0, 8]})", "unsupported dtype \"f32\""},
      {R"({"dtype": 4, "shape": [2], "data_offsets": [0, 8]})", "dtype that is not a string"},
      {R"({"dtype": "F32", "shape": [3], "data_offsets": [0, 8]})",
       "needs 12 bytes, but its data_offsets [0, 8] span 8"},
      {R"({"dtype": "BF16", "shape": [], "data_offsets": [0, 8]})", "needs 2 bytes"},
      {R"({"dtype": "U8", "shape": [-8], "data_offsets": [0, 8]})",
       "shape entry is not a non-negative integer"},
      {R"({"dtype": "U8", "shape": [2.5], "data_offsets": [0, 8]})",
       "shape entry is not a non-negative integer"},
      {R"({"dtype": "U8", "shape": ["8"], "data_offsets": [0, 8]})",
       "shape entry is not a non-negative integer"},
      {R"({"dtype": "F32", "shape": [4294967296, 4294967296], "data_offsets": [0, 8]})",
       "shape that is too large"},
      {R"({"dtype": "F32", "shape": 2, "data_offsets": [0, 8]})", "shape that is not an array"},
      {R"({"dtype": "F32", "shape": [2], "data_offsets": [0, 8, 8]})",
       "data_offsets that are not an array [begin, end]"},
      {R"({"dtype": "F32", "shape": [2], "data_offsets": {}})",
       "data_offsets that are not an array"},
      {R"({"shape": [2], "data_offsets": [0, 8]})", "has no \"dtype\""},
      {R"({"dtype": "F32", "data_offsets": [0, 8]})", "has no \"shape\""},
      {R"({"dtype": "F32", "shape": [2]})", "has no \"data_offsets\""},
      {R"({"dtype": "F32", "shape": [2], "data_offsets": [0, 8], "x": 1})", "unexpected key \"x\""},
      {"[1]", "tensor \"t\" is not an object but a JSON array"},
  };
  for (const auto& bad : kBadEntries) ExpectRawError(one(bad.entry, f32x2), bad.expect);
  ExpectRawError(RawSafetensors(R"({"__metadata__": []})", ""),
                 "not an object of strings but a JSON array");
  ExpectRawError(RawSafetensors(R"({"__metadata__": {"step": 3}})", ""),
                 "metadata \"step\" is not a string but a JSON number");
  // A name with a newline stays on one line in the message.
  ExpectRawError(RawSafetensors("{\"a\\nb\": 1}", ""), "tensor \"a?b\" is not an object");
}

TEST_F(SafetensorsTest, TruncatedAndMutatedFilesNeverCrash) {
  const std::string path = Path("good.safetensors");
  WriteSafetensors(path,
                   {{"a", RandomTensor(DType::kF32, Shape{3, 2}, 1)},
                    {"b", RandomTensor(DType::kBF16, Shape{}, 2)},
                    {"c", RandomTensor(DType::kU8, Shape{0}, 3)}},
                   {{"k", "v"}});
  const std::string good = ReadBytes(path);
  for (size_t len = 0; len < good.size(); ++len) {
    SCOPED_TRACE(len);
    const std::string cut = Path("cut.safetensors");
    WriteBytes(cut, good.substr(0, len));
    EXPECT_THROW(ReadSafetensors(cut), Error);
  }
  std::mt19937_64 rng(12345);
  const size_t header_end = 8 + LoadLe64(good);
  for (int trial = 0; trial < 3000; ++trial) {
    std::string bad = good;
    const int flips = 1 + static_cast<int>(rng() % 3);
    for (int f = 0; f < flips; ++f) {
      // Mostly the length field and the header, where the parsing is.
      const size_t at = rng() % (trial % 4 == 0 ? bad.size() : header_end);
      bad[at] = trial % 2 ? static_cast<char>(rng()) : "{}[]\":,0123456789-e. \\"[rng() % 22];
    }
    ExpectNoCrash(bad);
  }
}

TEST_F(SafetensorsTest, ReadErrorsNameThePath) {
  ExpectReadError(Path("missing.safetensors"), "cannot open: No such file or directory");
  ExpectReadError(dir_, "Is a directory");
}

TEST_F(SafetensorsTest, FailedWritesLeaveNothingAndKeepExistingFiles) {
  const Tensor t = RandomTensor(DType::kF32, Shape{4}, 5);
  const std::string path = Path("keep.safetensors");
  WriteSafetensors(path, {{"old", t}});
  const std::string before = ReadBytes(path);

  // Invalid arguments: checked before anything is created.
  EXPECT_THROW(WriteSafetensors(path, {{"a", t}, {"a", t}}), Error);
  EXPECT_THROW(WriteSafetensors(path, {{"", t}}), Error);
  EXPECT_THROW(WriteSafetensors(path, {{"__metadata__", t}}), Error);
  EXPECT_THROW(WriteSafetensors(path, {{"a", Tensor()}}), Error);
  EXPECT_THROW(WriteSafetensors(path, {{"bad\xff", t}}), Error);
  EXPECT_THROW(WriteSafetensors(path, {{"a", t}}, {{"k", "\xc3"}}), Error);
  EXPECT_THROW(WriteSafetensors("", {{"a", t}}), Error);
  EXPECT_EQ(ReadBytes(path), before);
  EXPECT_EQ(Listing(dir_), std::vector<std::string>{"keep.safetensors"});

  // A directory that does not exist.
  try {
    WriteSafetensors(Path("nodir/x.safetensors"), {{"a", t}});
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("cannot write '" + Path("nodir/x.safetensors") +
                                         "': No such file or directory"),
              std::string::npos)
        << e.what();
  }
  // A path that is a directory: rename could not replace it, so nothing is written.
  fs::create_directory(Path("sub"));
  try {
    WriteSafetensors(Path("sub"), {{"a", t}});
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("Is a directory"), std::string::npos) << e.what();
  }
  EXPECT_TRUE(fs::is_directory(Path("sub")));
  EXPECT_EQ(Listing(dir_), (std::vector<std::string>{"keep.safetensors", "sub"}));
  EXPECT_EQ(ReadBytes(path), before);

  // An unwritable directory (root may write anywhere, so only as another user).
  if (::geteuid() != 0) {
    const std::string ro = Path("ro");
    fs::create_directory(ro);
    WriteSafetensors(ro + "/keep.safetensors", {{"old", t}});
    const std::string ro_before = ReadBytes(ro + "/keep.safetensors");
    fs::permissions(ro, fs::perms::owner_read | fs::perms::owner_exec);
    EXPECT_THROW(WriteSafetensors(ro + "/keep.safetensors", {{"new", t}}), Error);
    fs::permissions(ro, fs::perms::owner_all);
    EXPECT_EQ(ReadBytes(ro + "/keep.safetensors"), ro_before);
    EXPECT_EQ(Listing(ro), std::vector<std::string>{"keep.safetensors"});
  }

  // A successful write replaces the file whole.
  WriteSafetensors(path, {{"new", RandomTensor(DType::kU8, Shape{2, 2}, 6)}});
  const SafetensorsFile file = ReadSafetensors(path);
  ASSERT_EQ(file.tensors.size(), 1u);
  EXPECT_EQ(file.tensors[0].name, "new");
  EXPECT_EQ(Listing(dir_), (std::vector<std::string>{"keep.safetensors", "sub"}));
}

TEST_F(SafetensorsTest, WritesAViewOfALargerTensor) {
  const Tensor whole = RandomTensor(DType::kBF16, Shape{6, 4}, 11);
  const Tensor rows = whole.Slice(2, 5);
  const std::string path = Path("view.safetensors");
  WriteSafetensors(path, {{"rows", rows}});
  const SafetensorsFile file = ReadSafetensors(path);
  ASSERT_EQ(file.tensors.size(), 1u);
  EXPECT_EQ(file.tensors[0].tensor.shape(), (Shape{3, 4}));
  EXPECT_EQ(Bytes(file.tensors[0].tensor), Bytes(rows));
}

}  // namespace
}  // namespace mxtrain
