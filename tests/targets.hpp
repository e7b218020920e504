// tests/targets.hpp — run a test once per SIMD target: TEST_P(PerTarget-derived fixture, ...) runs with
// dispatch restricted to each target ropekit::simd_targets() lists (compiled in and supported by this
// CPU), e.g. ".../AVX2". Select targets with the gtest filter: --gtest_filter='*/AVX2'.
#pragma once

#include <gtest/gtest.h>

#include <string>

#include "ropekit/cpu.hpp"

namespace targets {

class PerTarget : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override { ropekit::set_simd_target(GetParam()); }
  void TearDown() override { ropekit::set_simd_target(""); }
};

inline std::string target_name(const ::testing::TestParamInfo<std::string>& info) { return info.param; }

}  // namespace targets

#define ROPEKIT_PER_TARGET(Suite) \
  INSTANTIATE_TEST_SUITE_P(Targets, Suite, ::testing::ValuesIn(ropekit::simd_targets()), targets::target_name)
