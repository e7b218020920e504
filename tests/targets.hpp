// tests/targets.hpp — run a test once per SIMD target: TEST_P(PerTarget-derived fixture, ...) runs with
// dispatch restricted to each target ropekit::simd_targets() lists (compiled in and supported by this
// CPU), e.g. ".../AVX2". Select targets with the gtest filter: --gtest_filter='*/AVX2'.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "rope/backend.hpp"
#include "ropekit/cpu.hpp"

namespace targets {

class PerTarget : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override { ropekit::set_simd_target(GetParam()); }
  void TearDown() override { ropekit::set_simd_target(""); }
};

// Whether the target's rotation, angle-row and conversion kernels are the scalar reference itself
// (targets without FMA: SSSE3, SSE4, EMU128), so that comparing them with the reference proves nothing.
inline bool kernels_are_the_reference(const std::string& target) {
  return ropekit::cpu::rotates_with_reference(target);
}

// A per-target fixture for tests that compare a target's kernels with the scalar reference: skipped,
// with the reason, on targets whose kernels are the reference (the attention driver, by contrast, is
// per-target code on every target, so its fixtures derive from PerTarget).
class AgainstReference : public PerTarget {
 protected:
  void SetUp() override {
    PerTarget::SetUp();
    if (kernels_are_the_reference(GetParam())) {
      GTEST_SKIP() << GetParam() << " rotates with the scalar reference itself: nothing to compare it with";
    }
  }
};

inline std::string target_name(const ::testing::TestParamInfo<std::string>& info) { return info.param; }

// ROPEKIT_CASE_SHRINK=f (unset: 1): the per-target attention tests divide their queries and keys by f — every row,
// window, bias, head mix and dtype at a fraction of the work. The Arm part of the test command sets 2 at SVE lengths of
// 256 and 512 bits, which qemu emulates 3–4× slower than 128 (scripts/test-arm64.sh).
inline int shrink_factor() {
  const char* env = std::getenv("ROPEKIT_CASE_SHRINK");
  return env != nullptr && *env != '\0' ? std::max(1, std::atoi(env)) : 1;
}
// n tokens divided by shrink_factor(), rounded up, never below `floor` (a boundary the test must still cross).
inline std::int64_t shrunk_tokens(std::int64_t n, std::int64_t floor = 1) {
  return std::max(floor, (n + shrink_factor() - 1) / shrink_factor());
}

}  // namespace targets

#define ROPEKIT_PER_TARGET(Suite) \
  INSTANTIATE_TEST_SUITE_P(Targets, Suite, ::testing::ValuesIn(ropekit::simd_targets()), targets::target_name)
