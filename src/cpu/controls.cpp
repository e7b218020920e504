// Thread-count and SIMD-target controls (ropekit/cpu.hpp).
#include <hwy/targets.h>

#include <atomic>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <thread>

#include "cpu/rotate.hpp"
#include "ropekit/cpu.hpp"
#include "ropekit/error.hpp"

namespace ropekit {
namespace {

std::atomic<int>& default_thread_count() {
  static std::atomic<int> threads{static_cast<int>(std::max(1u, std::thread::hardware_concurrency()))};
  return threads;
}

// Targets compiled in (HWY_TARGETS) and supported by this CPU, best (lowest bit) first.
std::vector<std::int64_t> available() {
  std::vector<std::int64_t> targets;
  for (std::int64_t t : hwy::SupportedAndGeneratedTargets()) targets.push_back(t);
  return targets;
}

}  // namespace

int default_threads() { return default_thread_count().load(); }

void set_default_threads(int threads) {
  if (threads < 1) throw Error(fmt::format("threads = {}: must be >= 1", threads));
  default_thread_count().store(threads);
}

std::string simd_target() { return hwy::TargetName(cpu::dispatched_target()); }

std::vector<std::string> simd_targets() {
  hwy::SetSupportedTargetsForTest(0);  // list what the CPU really has, not a current restriction
  std::vector<std::string> names;
  for (std::int64_t t : available()) names.emplace_back(hwy::TargetName(t));
  return names;
}

void set_simd_target(std::string_view name) {
  hwy::SetSupportedTargetsForTest(0);
  if (name.empty()) {
    hwy::GetChosenTarget().Update(hwy::SupportedTargets());
    return;
  }
  std::vector<std::string> names;
  for (std::int64_t t : available()) {
    if (name == hwy::TargetName(t)) {
      hwy::SetSupportedTargetsForTest(t);
      hwy::GetChosenTarget().Update(hwy::SupportedTargets());
      return;
    }
    names.emplace_back(hwy::TargetName(t));
  }
  throw Error(fmt::format("simd target = \"{}\": not compiled in or not supported by this CPU (have: {})",
                          name, fmt::join(names, ", ")));
}

}  // namespace ropekit
