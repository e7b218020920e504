// Thread-count and SIMD-target controls (ropekit/cpu.hpp).
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <algorithm>
#include <atomic>
#include <thread>

#include "cpu/dispatch.hpp"
#include "ropekit/cpu.hpp"
#include "ropekit/error.hpp"

namespace ropekit {
namespace {

std::atomic<int>& default_thread_count() {
  static std::atomic<int> threads{static_cast<int>(std::max(1u, std::thread::hardware_concurrency()))};
  return threads;
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

std::string simd_target() { return cpu::current_target().name; }

std::vector<std::string> simd_targets() {
  std::vector<std::string> names;
  for (const cpu::Target& t : cpu::available_targets()) names.push_back(t.name);
  return names;
}

void set_simd_target(std::string_view name) {
  if (name.empty()) {
    cpu::select_target(-1);
    return;
  }
  if (const int i = cpu::target_index(name); i >= 0) {
    cpu::select_target(i);
    return;
  }
  throw Error(fmt::format("simd target = \"{}\": not compiled in or not supported by this CPU (have: {})", name,
                          fmt::join(simd_targets(), ", ")));
}

}  // namespace ropekit
