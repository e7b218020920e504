// Thread-count and SIMD-target controls (ropekit/cpu.hpp).
#include <hwy/targets.h>

#include <algorithm>
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

// The target set_simd_target() restricted dispatch to (0: none).
std::atomic<std::int64_t> g_forced_target{0};

void restrict_dispatch(std::int64_t target) {
  hwy::SetSupportedTargetsForTest(target);  // 0 lifts the restriction
  hwy::GetChosenTarget().Update(hwy::SupportedTargets());
  g_forced_target.store(target);
}

// Targets compiled in (HWY_TARGETS) and supported by this CPU, best (lowest bit) first — what the
// CPU really has, whatever set_simd_target() restricted dispatch to (the restriction is kept).
std::vector<std::int64_t> available() {
  const std::int64_t forced = g_forced_target.load();
  hwy::SetSupportedTargetsForTest(0);
  const std::vector<std::int64_t> targets = hwy::SupportedAndGeneratedTargets();
  if (forced != 0) restrict_dispatch(forced);
  return targets;
}

}  // namespace

int default_threads() { return default_thread_count().load(); }

void set_default_threads(int threads) {
  if (threads < 1) throw Error(fmt::format("threads = {}: must be >= 1", threads));
  default_thread_count().store(threads);
}

int threads_for_bytes(int threads, std::int64_t bytes) {
  constexpr std::int64_t kMinBytesPerThread = 256 * 1024;
  return static_cast<int>(std::clamp<std::int64_t>(bytes / kMinBytesPerThread, 1, std::max(threads, 1)));
}

std::string simd_target() { return hwy::TargetName(cpu::dispatched_target()); }

std::vector<std::string> simd_targets() {
  std::vector<std::string> names;
  for (std::int64_t t : available()) names.emplace_back(hwy::TargetName(t));
  return names;
}

void set_simd_target(std::string_view name) {
  if (name.empty()) {
    restrict_dispatch(0);
    return;
  }
  std::vector<std::string> names;
  for (std::int64_t t : available()) {
    if (name == hwy::TargetName(t)) {
      restrict_dispatch(t);
      return;
    }
    names.emplace_back(hwy::TargetName(t));
  }
  throw Error(fmt::format("simd target = \"{}\": not compiled in or not supported by this CPU (have: {})",
                          name, fmt::join(names, ", ")));
}

}  // namespace ropekit
