// ReadNpy / WriteNpyFiles: round trips, the exact bytes NumPy's format prescribes, headers
// written by hand in every accepted variant, each rejected input, and all-or-nothing sets.
#include "mxtrain/npy.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <tuple>
#include <vector>

#include "mxtrain/error.h"
#include "temp_dir_test.h"
#include "test_util.h"

namespace mxtrain {
namespace {

namespace fs = std::filesystem;

using testing_util::ReadBytes;
using testing_util::WriteBytes;

// An .npy file encoded here, independently of the library: magic, version, little-endian
// header length, the header text as given (no padding rules applied), then the data.
std::string RawNpy(const std::string& header, const std::string& data, int major = 1) {
  std::string out = "\x93NUMPY";
  out += static_cast<char>(major);
  out += '\0';
  const size_t len_bytes = major == 1 ? 2 : 4;
  for (size_t i = 0; i < len_bytes; ++i)
    out += static_cast<char>((header.size() >> (8 * i)) & 0xFF);
  return out + header + data;
}

std::string Dict(const std::string& descr, const std::string& shape, bool fortran = false) {
  return "{'descr': '" + descr + "', 'fortran_order': " + (fortran ? "True" : "False") +
         ", 'shape': " + shape + ", }\n";
}

class NpyTest : public testing_util::TempDirTest {
 protected:
  // ReadNpy must throw an Error naming the path and containing `expect`.
  void ExpectReadError(const std::string& path, const std::string& expect) {
    try {
      ReadNpy(path);
      ADD_FAILURE() << "no error reading " << path << " (expected '" << expect << "')";
    } catch (const Error& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find(path), std::string::npos) << what;
      EXPECT_NE(what.find(expect), std::string::npos) << what;
      EXPECT_EQ(what.find('\n'), std::string::npos) << what;
    }
  }
  void ExpectRawError(const std::string& bytes, const std::string& expect) {
    const std::string path = Path("bad.npy");
    WriteBytes(path, bytes);
    ExpectReadError(path, expect);
  }
};

Tensor Iota(DType dtype, Shape shape) {
  Tensor t = Tensor::Empty(dtype, std::move(shape));
  auto* bytes = static_cast<unsigned char*>(t.raw());
  for (size_t i = 0; i < t.NumBytes(); ++i) bytes[i] = static_cast<unsigned char>(i * 37 + 11);
  return t;
}

void ExpectSameTensor(const Tensor& a, const Tensor& b) {
  EXPECT_EQ(a.dtype(), b.dtype());
  EXPECT_EQ(a.shape(), b.shape()) << a.shape().ToString() << " vs " << b.shape().ToString();
  ASSERT_EQ(a.NumBytes(), b.NumBytes());
  EXPECT_EQ(std::memcmp(a.raw(), b.raw(), a.NumBytes()), 0);
}

TEST_F(NpyTest, RoundTripsEveryDTypeAndRank) {
  const std::vector<std::pair<DType, Shape>> cases = {
      {DType::kF32, {3, 5}}, {DType::kBF16, {2, 3, 4}}, {DType::kU8, {7}},
      {DType::kF32, {}},     {DType::kU8, {0, 4}},      {DType::kBF16, {1, 1, 1, 33}},
  };
  for (const auto& [dtype, shape] : cases) {
    SCOPED_TRACE(std::string(Name(dtype)) + " " + shape.ToString());
    const Tensor t = Iota(dtype, shape);
    WriteNpy(Path("t.npy"), t);
    ExpectSameTensor(ReadNpy(Path("t.npy")), t);
  }
  Tensor nan = Tensor::Empty(DType::kF32, {2});
  nan.data<float>()[0] = NAN;
  nan.data<float>()[1] = -0.0f;
  WriteNpy(Path("nan.npy"), nan);
  ExpectSameTensor(ReadNpy(Path("nan.npy")), nan);  // bytes, so NaN payloads and -0 too
}

TEST_F(NpyTest, WritesNumpyVersion1LayoutPaddedTo64) {
  const std::vector<std::tuple<DType, Shape, std::string>> cases = {
      {DType::kF32, {3, 4}, "{'descr': '<f4', 'fortran_order': False, 'shape': (3, 4), }"},
      {DType::kBF16, {5}, "{'descr': '<u2', 'fortran_order': False, 'shape': (5,), }"},
      {DType::kU8, {}, "{'descr': '|u1', 'fortran_order': False, 'shape': (), }"},
  };
  for (const auto& [dtype, shape, dict] : cases) {
    const Tensor t = Iota(dtype, shape);
    WriteNpy(Path("t.npy"), t);
    const std::string bytes = ReadBytes(Path("t.npy"));
    ASSERT_GE(bytes.size(), 10u);
    EXPECT_EQ(bytes.substr(0, 8), std::string("\x93NUMPY\x01\x00", 8));
    const size_t header_len = static_cast<unsigned char>(bytes[8]) |
                              static_cast<size_t>(static_cast<unsigned char>(bytes[9])) << 8;
    const size_t data_offset = 10 + header_len;
    EXPECT_EQ(data_offset % 64, 0u);
    ASSERT_EQ(bytes.size(), data_offset + t.NumBytes());
    const std::string header = bytes.substr(10, header_len);
    EXPECT_EQ(header.substr(0, dict.size()), dict);
    EXPECT_EQ(header.back(), '\n');
    EXPECT_EQ(header.find_first_not_of(' ', dict.size()), header_len - 1);
    EXPECT_EQ(std::memcmp(bytes.data() + data_offset, t.raw(), t.NumBytes()), 0);
  }
}

TEST_F(NpyTest, HeaderLongerThan64KiBUsesVersion2) {
  // 30000 dimensions of 1 need a ~90 KB shape tuple, beyond version 1.0's 2-byte length.
  const Tensor t = Iota(DType::kU8, Shape(std::vector<int64_t>(30000, 1)));
  WriteNpy(Path("long.npy"), t);
  const std::string bytes = ReadBytes(Path("long.npy"));
  EXPECT_EQ(bytes.substr(0, 8), std::string("\x93NUMPY\x02\x00", 8));
  uint32_t header_len = 0;
  for (int i = 3; i >= 0; --i)
    header_len = header_len << 8 | static_cast<unsigned char>(bytes[8 + i]);
  EXPECT_EQ((12 + header_len) % 64, 0u);
  ExpectSameTensor(ReadNpy(Path("long.npy")), t);
}

TEST_F(NpyTest, ReadsHandWrittenHeaderVariants) {
  const std::string data = "\x01\x02\x03\x04\x05\x06";
  struct Case {
    std::string header;
    int major;
    DType dtype;
    Shape shape;
  };
  const std::vector<Case> cases = {
      {Dict("|u1", "(2, 3)"), 2, DType::kU8, {2, 3}},  // version 2.0
      {Dict("<u1", "(6,)"), 3, DType::kU8, {6}},       // version 3.0, '<u1'
      {"{\"descr\": \"<u2\", \"fortran_order\": False, \"shape\": (3,)}", 1, DType::kBF16, {3}},
      {"{'shape':(1L,3L),'fortran_order':False,'descr':'<u2'}\n", 1, DType::kBF16, {1, 3}},
      {"{ 'descr' : '|u1' ,\n 'fortran_order' : False , 'shape' : ( 1 , 2 , 3 , ) , }  \n",
       1,
       DType::kU8,
       {1, 2, 3}},
      {Dict("<f4", "(0, 3)") + std::string(6, ' '), 1, DType::kF32, {0, 3}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.header);
    const size_t bytes = static_cast<size_t>(c.shape.NumElements()) * DTypeSize(c.dtype);
    WriteBytes(Path("v.npy"), RawNpy(c.header, data.substr(0, bytes), c.major));
    const Tensor t = ReadNpy(Path("v.npy"));
    EXPECT_EQ(t.dtype(), c.dtype);
    EXPECT_EQ(t.shape(), c.shape);
    EXPECT_EQ(std::string(static_cast<const char*>(t.raw()), t.NumBytes()), data.substr(0, bytes));
  }
}

TEST_F(NpyTest, RejectsMissingAndNonNpyFiles) {
  ExpectReadError(Path("missing.npy"), "No such file or directory");
  ExpectReadError(dir_, "Is a directory");
  ExpectRawError("", "is not an .npy file");
  ExpectRawError("hello, world\n", "is not an .npy file");
  ExpectRawError(std::string("\x93NUMPZ\x01\x00", 8), "is not an .npy file");
  ExpectRawError(RawNpy(Dict("<f4", "(1,)"), "abcd", 4), "unsupported .npy format version 4.0");
  std::string v11 = RawNpy(Dict("<f4", "(1,)"), "abcd");
  v11[7] = 1;
  ExpectRawError(v11, "unsupported .npy format version 1.1");
  ExpectRawError(std::string("\x93NUMPY\x01\x00\x10", 9), "ends inside the header length");
  ExpectRawError(std::string("\x93NUMPY\x01\x00\x80\x00{'descr'", 17), "exceeds the file");
}

TEST_F(NpyTest, RejectsMalformedHeaders) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"not a dict\n", "malformed .npy header: expected '{'"},
      {"{'descr': '<f4', 'fortran_order': False}\n", "no 'shape' key"},
      {"{'descr': '<f4', 'shape': (1,)}\n", "no 'fortran_order' key"},
      {"{'fortran_order': False, 'shape': (1,)}\n", "no 'descr' key"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (1,), 'x': 1}\n", "unexpected key 'x'"},
      {"{'descr': '<f4', 'descr': '<f4', 'fortran_order': False, 'shape': (1,)}\n", "twice"},
      {"{'descr': '<f4', 'fortran_order': maybe, 'shape': (1,)}\n", "not True or False"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (-1,)}\n", "not a non-negative"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (1)}\n", "shape is not a tuple"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': [1]}\n", "expected '('"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (1,), } x\n", "after the dictionary"},
      {"{'descr': '<f4, 'fortran_order': False, 'shape': (1,)}\n", "malformed"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (99999999999999999999,)}\n", "too large"},
      {"{'descr': '<f4'", "malformed"},
  };
  for (const auto& [header, expect] : cases) {
    SCOPED_TRACE(header);
    ExpectRawError(RawNpy(header, "abcd"), expect);
  }
}

TEST_F(NpyTest, RejectsFortranOrderAndUnsupportedDTypes) {
  ExpectRawError(RawNpy(Dict("<f4", "(2, 2)", true), std::string(16, 'x')), "Fortran order");
  for (const std::string descr : {"<f8", ">f4", "<i4", "<f2", ">u2", "|b1", "<c8", "O"}) {
    ExpectRawError(RawNpy(Dict(descr, "(2,)"), std::string(16, 'x')),
                   "unsupported dtype '" + descr + "'");
  }
  ExpectRawError(
      RawNpy("{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (1,)}\n", "abcd"),
      "structured dtype");
}

TEST_F(NpyTest, RejectsDataOfTheWrongLength) {
  ExpectRawError(RawNpy(Dict("<f4", "(3, 4)"), std::string(20, 'x')),
                 "is truncated: shape [3, 4] of '<f4' needs 48 data bytes, the file has 20");
  ExpectRawError(RawNpy(Dict("<u2", "(3,)"), std::string(9, 'x')), "3 bytes after the data");
  ExpectRawError(RawNpy(Dict("|u1", "(4294967296, 4294967296)"), ""), "too large");
  ExpectRawError(RawNpy(Dict("|u1", "(1000000, 1000000)"), "x"), "truncated");
}

TEST_F(NpyTest, FailedSetLeavesNoFileAndKeepsExistingOnes) {
  WriteBytes(Path("a.npy"), "old");
  const Tensor a = Iota(DType::kF32, {2, 2});
  const Tensor b = Iota(DType::kU8, {3});
  const std::string bad = Path("missing/b.npy");
  try {
    WriteNpyFiles({{Path("a.npy"), &a}, {bad, &b}});
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), "cannot write '" + bad + "': No such file or directory");
  }
  EXPECT_EQ(ReadBytes(Path("a.npy")), "old");
  EXPECT_EQ(Listing(), std::vector<std::string>{"a.npy"});  // no temporary left

  // A directory where a file should go fails before anything is renamed.
  fs::create_directory(Path("dir.npy"));
  EXPECT_THROW(WriteNpyFiles({{Path("a.npy"), &a}, {Path("dir.npy"), &b}}), Error);
  EXPECT_EQ(ReadBytes(Path("a.npy")), "old");
  EXPECT_EQ(Listing(), (std::vector<std::string>{"a.npy", "dir.npy"}));
}

TEST_F(NpyTest, SetWriteReplacesEveryFile) {
  WriteBytes(Path("a.npy"), "old");
  const Tensor a = Iota(DType::kF32, {2, 2});
  const Tensor b = Iota(DType::kBF16, {3, 1});
  WriteNpyFiles({{Path("a.npy"), &a}, {Path("b.npy"), &b}});
  ExpectSameTensor(ReadNpy(Path("a.npy")), a);
  ExpectSameTensor(ReadNpy(Path("b.npy")), b);
  EXPECT_EQ(Listing(), (std::vector<std::string>{"a.npy", "b.npy"}));
}

TEST_F(NpyTest, NewFilesGetTheUmaskPermissions) {
  const mode_t old = umask(022);
  WriteNpy(Path("p.npy"), Iota(DType::kU8, {1}));
  umask(old);
  struct stat st {};
  ASSERT_EQ(stat(Path("p.npy").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0644u);
}

TEST_F(NpyTest, RejectsBadSets) {
  const Tensor a = Iota(DType::kU8, {1});
  EXPECT_THROW(WriteNpyFiles({{Path("a.npy"), &a}, {Path("a.npy"), &a}}), Error);
  const Tensor undefined;
  EXPECT_THROW(WriteNpy(Path("u.npy"), undefined), Error);
  EXPECT_THROW(WriteNpyFiles({{Path("n.npy"), nullptr}}), Error);
  EXPECT_THROW(WriteNpy("", a), Error);
  EXPECT_TRUE(Listing().empty());
}

}  // namespace
}  // namespace mxtrain
