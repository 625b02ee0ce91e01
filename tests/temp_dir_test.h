// A GoogleTest fixture with a fresh temporary directory per test, removed afterwards (with
// write permission restored first, so a test may make parts of it unwritable).
#pragma once

#include <gtest/gtest.h>
#include <stdlib.h>

#include <algorithm>
#include <filesystem>
#include <string>
#include <vector>

namespace mxtrain::testing_util {

class TempDirTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string pattern = (std::filesystem::temp_directory_path() / "mxtrain_test_XXXXXX").string();
    ASSERT_NE(mkdtemp(pattern.data()), nullptr);
    dir_ = pattern;
  }
  void TearDown() override {
    namespace fs = std::filesystem;
    fs::permissions(dir_, fs::perms::owner_all, fs::perm_options::add);
    for (const auto& e : fs::recursive_directory_iterator(dir_)) {
      if (e.is_directory()) fs::permissions(e.path(), fs::perms::owner_all, fs::perm_options::add);
    }
    fs::remove_all(dir_);
  }
  std::string Path(const std::string& name) const { return dir_ + "/" + name; }
  // The sorted names in `dir` (default: the test's directory).
  std::vector<std::string> Listing(const std::string& dir = {}) const {
    std::vector<std::string> names;
    for (const auto& e : std::filesystem::directory_iterator(dir.empty() ? dir_ : dir)) {
      names.push_back(e.path().filename());
    }
    std::sort(names.begin(), names.end());
    return names;
  }

  std::string dir_;
};

}  // namespace mxtrain::testing_util
