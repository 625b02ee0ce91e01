// Value-parameterized fixtures that run a test once per SIMD target or GEMM path of this
// machine, as Highway's HWY_TARGET_INSTANTIATE_TEST_SUITE_P_T does: one failing target does
// not hide the others, and --gtest_filter picks one ('*/AVX2', '*/amx_bf16'). The instances
// are listed when the test binary starts, so under MXTRAIN_MAX_SIMD_TARGET or
// MXTRAIN_MAX_GEMM_PATH (the cpu_caps label) only what the cap leaves is run.
//
//   class FastPathsPerTarget : public testing_util::SimdTargetTest {};
//   TEST_P(FastPathsPerTarget, ShapeSweep) { ... }   // runs on target GetParam()
//   MXTRAIN_INSTANTIATE_PER_SIMD_TARGET(FastPathsPerTarget);
//   // => Available/FastPathsPerTarget.ShapeSweep/AVX3_DL, .../AVX2, ..., .../SCALAR
#pragma once

#include <gtest/gtest.h>

#include <cctype>
#include <string>

#include "mxtrain/gemm.h"
#include "mxtrain/simd.h"
#include "mxtrain/testing.h"

namespace mxtrain::testing_util {

// The instance name of a target or path: gtest allows letters, digits and '_' only, so
// "amx-bf16" becomes "amx_bf16" ("AVX3_DL" stays).
inline std::string InstanceName(const ::testing::TestParamInfo<std::string>& info) {
  std::string name = info.param;
  for (char& c : name) {
    if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
  }
  return name;
}

// A test that runs with the SIMD target GetParam() forced (testing.h), and the best
// target again afterwards.
class SimdTargetTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    ForceSimdTarget(GetParam());
    ASSERT_EQ(CurrentSimdTarget(), GetParam());
  }
  void TearDown() override { ResetSimdTarget(); }
};

// A test that runs with the MX GEMM path GetParam() forced (testing.h), and the best path
// again afterwards.
class GemmPathTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    ForceGemmPath(GetParam());
    ASSERT_EQ(CurrentGemmPath(), GetParam());
  }
  void TearDown() override { ForceGemmPath(""); }
};

}  // namespace mxtrain::testing_util

// One instance of every TEST_P of `suite` per target of AvailableSimdTargets() (simd.h).
#define MXTRAIN_INSTANTIATE_PER_SIMD_TARGET(suite)                                 \
  INSTANTIATE_TEST_SUITE_P(Available, suite,                                       \
                           ::testing::ValuesIn(::mxtrain::AvailableSimdTargets()), \
                           ::mxtrain::testing_util::InstanceName)

// One instance of every TEST_P of `suite` per path of TestableGemmPaths() (testing.h): the
// paths of AvailableGemmPaths() (gemm.h) and the emulated AMX path where it runs.
#define MXTRAIN_INSTANTIATE_PER_GEMM_PATH(suite)                                                  \
  INSTANTIATE_TEST_SUITE_P(Available, suite, ::testing::ValuesIn(::mxtrain::TestableGemmPaths()), \
                           ::mxtrain::testing_util::InstanceName)
