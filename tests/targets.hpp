// tests/targets.hpp — run a test once per SIMD target: TEST_P(PerTarget-derived fixture, ...) runs with
// dispatch restricted to each target ropekit::simd_targets() lists (compiled in and supported by this
// CPU), e.g. ".../AVX2". Select targets with the gtest filter: --gtest_filter='*/AVX2'.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

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

inline int env_factor(const char* name) {
  const char* env = std::getenv(name);
  return env != nullptr && *env != '\0' ? std::max(1, std::atoi(env)) : 1;
}

// ROPEKIT_CASE_SHRINK=f (unset: 1): the per-target attention tests divide their queries and keys by f — every row,
// window, bias, head mix and dtype at a fraction of the work. Set by the test command's emulated Arm part and its
// sanitizer tier (scripts/test-arm64.sh, the dev test preset); the release tier and `scripts/test-arm64.sh --full`
// run everything whole.
inline int shrink_factor() { return env_factor("ROPEKIT_CASE_SHRINK"); }

// ROPEKIT_CASE_SAMPLE=f (unset: 1): the targets of one run share a per-target case table instead of each running all
// of it. With n targets selected for the running test (the gtest filter's; for a test against the reference, less
// those whose kernels are the reference) and s = min(f, n), case i runs on the targets whose place j among them has
// j ≡ h(i) (mod s), h a multiplicative hash (so that no target gets only one dtype or layout of the table's nested
// loops): every case runs on at least one target, each target runs about one case in s. Set with ROPEKIT_CASE_SHRINK.
struct CaseSample {
  int share = 1;  // s
  int place = 0;  // j
  bool runs(std::uint32_t case_index) const {
    const std::uint32_t h = (case_index * 2654435761u) >> 8;
    return static_cast<int>(h % static_cast<std::uint32_t>(share)) == place % share;
  }
};

inline CaseSample case_sample(bool against_reference) {
  const int f = env_factor("ROPEKIT_CASE_SAMPLE");
  const ::testing::TestInfo* current = ::testing::UnitTest::GetInstance()->current_test_info();
  if (f == 1 || current == nullptr) return {};
  const std::string name = current->name();  // "<test>/<target>"
  const std::string test = name.substr(0, name.find('/') + 1);
  std::vector<std::string> selected;
  const ::testing::UnitTest& unit = *::testing::UnitTest::GetInstance();
  for (int i = 0; i < unit.total_test_suite_count(); ++i) {
    const ::testing::TestSuite& suite = *unit.GetTestSuite(i);
    if (std::string(suite.name()) != current->test_suite_name()) continue;
    for (int t = 0; t < suite.total_test_count(); ++t) {
      const ::testing::TestInfo& info = *suite.GetTestInfo(t);
      const std::string other = info.name();
      if (!info.should_run() || other.rfind(test, 0) != 0) continue;
      if (!against_reference || !kernels_are_the_reference(other.substr(test.size()))) selected.push_back(other);
    }
  }
  const auto at = std::find(selected.begin(), selected.end(), name);
  CaseSample out;
  out.share = std::max(1, std::min<int>(f, static_cast<int>(selected.size())));
  out.place = at == selected.end() ? 0 : static_cast<int>(at - selected.begin());
  return out;
}

// n tokens divided by shrink_factor(), rounded up, never below `floor` (a boundary the test must still cross).
inline std::int64_t shrunk_tokens(std::int64_t n, std::int64_t floor = 1) {
  return std::max(floor, (n + shrink_factor() - 1) / shrink_factor());
}

}  // namespace targets

#define ROPEKIT_PER_TARGET(Suite) \
  INSTANTIATE_TEST_SUITE_P(Targets, Suite, ::testing::ValuesIn(ropekit::simd_targets()), targets::target_name)
