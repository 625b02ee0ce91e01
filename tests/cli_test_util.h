// Shared by the CLI end-to-end tests: runs the built mxtrain binary in a fresh temporary
// directory, and writes inputs and parses outputs with a minimal .npy codec of its own (not
// the library's), so the CLI is checked against an independent encoding.
#pragma once

#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/wait.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "mxtrain/mx_tensor.h"
#include "mxtrain/tensor.h"
#include "test_util.h"

#ifndef MXTRAIN_CLI_PATH
#error "MXTRAIN_CLI_PATH must name the built mxtrain binary"
#endif

namespace mxtrain::testing_util {

namespace fs = std::filesystem;

std::string ShapeTuple(const std::vector<int64_t>& dims) {
  std::string s = "(";
  for (int64_t d : dims) s += std::to_string(d) + ",";
  return s + ")";
}

// Version 1.0, header ended by one '\n' and not padded (valid, and not what the library
// writes, so the reader cannot lean on its own writer's layout).
std::string EncodeNpy(const std::string& descr, const std::vector<int64_t>& dims,
                      const std::string& data, bool fortran = false) {
  const std::string header = "{'descr':'" + descr +
                             "','fortran_order':" + (fortran ? "True" : "False") +
                             ",'shape':" + ShapeTuple(dims) + "}\n";
  std::string out("\x93NUMPY\x01\x00", 8);
  out += static_cast<char>(header.size() & 0xFF);
  out += static_cast<char>(header.size() >> 8);
  return out + header + data;
}

std::string TensorBytes(const Tensor& t) {
  return std::string(static_cast<const char*>(t.raw()), t.NumBytes());
}

struct RawNpy {
  std::string header;  // the dictionary text with its padding
  std::string descr;
  std::vector<int64_t> dims;
  std::string data;
};

// Just enough of a parser for what the CLI writes: version 1.0, one quoted descr, a shape.
RawNpy DecodeNpy(const std::string& path) {
  const std::string bytes = ReadBytes(path);
  RawNpy r;
  if (bytes.size() < 10 || bytes.compare(0, 8, std::string("\x93NUMPY\x01\x00", 8)) != 0) {
    ADD_FAILURE() << path << " is not a version 1.0 .npy file";
    return r;
  }
  const size_t len = static_cast<unsigned char>(bytes[8]) |
                     static_cast<size_t>(static_cast<unsigned char>(bytes[9])) << 8;
  r.header = bytes.substr(10, len);
  r.data = bytes.substr(10 + len);
  const size_t d = r.header.find("'descr': '") + 10;
  r.descr = r.header.substr(d, r.header.find('\'', d) - d);
  const size_t s = r.header.find("'shape': (") + 10;
  std::string shape = r.header.substr(s, r.header.find(')', s) - s);
  for (size_t pos = 0; pos < shape.size();) {
    const size_t comma = std::min(shape.find(',', pos), shape.size());
    if (comma > pos) r.dims.push_back(std::stoll(shape.substr(pos, comma - pos)));
    pos = comma + 1;
  }
  return r;
}

// The file must hold exactly this tensor: dtype string, shape and bytes.
void ExpectNpyEquals(const std::string& path, const Tensor& expected) {
  SCOPED_TRACE(path);
  const RawNpy r = DecodeNpy(path);
  const char* descr = expected.dtype() == DType::kU8    ? "|u1"
                      : expected.dtype() == DType::kF32 ? "<f4"
                                                        : "<u2";
  EXPECT_EQ(r.descr, descr);
  EXPECT_EQ(r.dims, expected.shape().dims());
  EXPECT_TRUE(r.data == TensorBytes(expected)) << "data bytes differ";
}

void ExpectMxFiles(const std::string& prefix, const MxTensor& expected) {
  ExpectNpyEquals(prefix + ".data.npy", expected.data());
  ExpectNpyEquals(prefix + ".scale.npy", expected.scales());
}

struct RunResult {
  int code = -1;
  std::string out, err;
};

std::string Quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

class CliFixture : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string pattern = (fs::temp_directory_path() / "mxtrain_cli_XXXXXX").string();
    ASSERT_NE(mkdtemp(pattern.data()), nullptr);
    base_ = pattern;
    for (const char* sub : {"/in", "/out", "/io"}) fs::create_directory(base_ + sub);
  }
  void TearDown() override { fs::remove_all(base_); }

  std::string In(const std::string& name) const { return base_ + "/in/" + name; }
  std::string Out(const std::string& name) const { return base_ + "/out/" + name; }

  RunResult Run(const std::vector<std::string>& args) const { return RunWithEnv("", args); }

  // With environment assignments ("NAME=value NAME2=value2", shell words) for this command.
  RunResult RunWithEnv(const std::string& env, const std::vector<std::string>& args) const {
    std::string cmd = env.empty() ? Quote(MXTRAIN_CLI_PATH) : env + " " + Quote(MXTRAIN_CLI_PATH);
    // Appended piecewise: `" " + Quote(a)` trips GCC 12's false -Wrestrict (bug 105651).
    for (const std::string& a : args) {
      cmd += ' ';
      cmd += Quote(a);
    }
    return RunShell(cmd);
  }

  // A whole shell command line (quoted by the caller), its output captured like Run's.
  RunResult RunShell(const std::string& cmd) const {
    const std::string full = cmd + " >" + base_ + "/io/stdout 2>" + base_ + "/io/stderr";
    const int status = std::system(full.c_str());
    RunResult r;
    r.code = WIFEXITED(status) ? WEXITSTATUS(status) : 1000 + status;
    r.out = ReadBytes(base_ + "/io/stdout");
    r.err = ReadBytes(base_ + "/io/stderr");
    return r;
  }

  std::vector<std::string> OutListing() const {
    std::vector<std::string> names;
    for (const auto& e : fs::directory_iterator(base_ + "/out"))
      names.push_back(e.path().filename());
    std::sort(names.begin(), names.end());
    return names;
  }

  // Success: code 0, quiet stderr, one summary line, which is returned.
  std::string ExpectOk(const std::vector<std::string>& args) const {
    std::string joined;
    for (const std::string& a : args) joined += " " + a;
    SCOPED_TRACE("mxtrain" + joined);
    const RunResult r = Run(args);
    EXPECT_EQ(r.code, 0) << r.err;
    EXPECT_EQ(r.err, "");
    EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 1) << r.out;
    return r.out;
  }

  // Bad input: exit 2, one line "mxtrain: error: ..." containing `expect`, empty stdout,
  // and the output directory as it was (`listing`: empty unless the test put something
  // there).
  void ExpectBadInput(const std::vector<std::string>& args, const std::string& expect,
                      const std::vector<std::string>& listing = {}) const {
    std::string joined;
    for (const std::string& a : args) joined += " " + a;
    SCOPED_TRACE("mxtrain" + joined);
    const RunResult r = Run(args);
    EXPECT_EQ(r.code, 2);
    EXPECT_EQ(r.err.rfind("mxtrain: error: ", 0), 0u) << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
    EXPECT_TRUE(!r.err.empty() && r.err.back() == '\n');
    EXPECT_NE(r.err.find(expect), std::string::npos) << r.err;
    EXPECT_EQ(r.out, "");
    EXPECT_EQ(OutListing(), listing);
  }

  std::string WriteInput(const std::string& name, const Tensor& t) const {
    const std::string descr = t.dtype() == DType::kF32    ? "<f4"
                              : t.dtype() == DType::kBF16 ? "<u2"
                                                          : "|u1";
    WriteBytes(In(name), EncodeNpy(descr, t.shape().dims(), TensorBytes(t)));
    return In(name);
  }

  std::string base_;
};

}  // namespace mxtrain::testing_util
