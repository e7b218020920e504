// ropekit's SIMD target choice (see dispatch.hpp).
#include "cpu/dispatch.hpp"

#include <hwy/highway.h>
#include <hwy/targets.h>

#include <atomic>

namespace ropekit::cpu {
namespace {

std::atomic<std::int64_t> g_selected{0};  // 0: the best available
// The dispatch index of the selected target (of the best until select_target runs; a call reads it
// once, so it costs one relaxed load instead of recomputing Highway's mapping).
std::atomic<std::size_t>& selected_index() {
  static std::atomic<std::size_t> index{dispatch_index(available_targets().front())};
  return index;
}

}  // namespace

const std::vector<std::int64_t>& available_targets() {
  // The CPU does not change while the process runs; ropekit never mocks Highway's target set.
  static const std::vector<std::int64_t> targets = hwy::SupportedAndGeneratedTargets();
  return targets;
}

std::int64_t current_target() {
  const std::int64_t selected = g_selected.load(std::memory_order_relaxed);
  return selected != 0 ? selected : available_targets().front();
}

void select_target(std::int64_t target) {
  g_selected.store(target, std::memory_order_relaxed);
  selected_index().store(dispatch_index(current_target()), std::memory_order_relaxed);
}

std::size_t current_index() { return selected_index().load(std::memory_order_relaxed); }

std::size_t dispatch_index(std::int64_t target) {
  // Highway's own mapping from a target bit to a table index, on a private ChosenTarget (the global
  // one stays untouched).
  hwy::ChosenTarget chosen;
  chosen.Update(target);
  return chosen.GetIndex();
}

}  // namespace ropekit::cpu
