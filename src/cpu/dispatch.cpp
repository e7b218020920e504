// ropekit's SIMD target choice (see dispatch.hpp).
#include "cpu/dispatch.hpp"

#include <hwy/highway.h>
#include <hwy/targets.h>

#if HWY_ARCH_X86
#include <cpuid.h>
#endif

#include <atomic>

namespace ropekit::cpu {
namespace {

// CPUID.(EAX=7, ECX=1):EAX bit 5. Only asked where Highway found an AVX-512 target usable, so the
// OS already saves the zmm state.
bool cpu_has_avx512_bf16() {
#if HWY_ARCH_X86
  unsigned a = 0, b = 0, c = 0, d = 0;
  return __get_cpuid_count(7, 1, &a, &b, &c, &d) != 0 && (a & (1u << 5)) != 0;
#else
  return false;
#endif
}

std::size_t dispatch_index(std::int64_t target) {
  // Highway's own mapping from a target bit to a table index, on a private ChosenTarget (the global
  // one stays untouched).
  hwy::ChosenTarget chosen;
  chosen.Update(target);
  return chosen.GetIndex();
}

std::vector<Target> find_targets() {
  std::vector<Target> targets;
  bool twin = false;
  for (std::int64_t t : hwy::SupportedAndGeneratedTargets()) {
    const std::size_t index = dispatch_index(t);
#if HWY_ARCH_X86
    // The first AVX-512 target (Highway lists the best first) gets a native-bf16 twin before it.
    if (!twin && (t == HWY_AVX3 || t == HWY_AVX3_DL) && cpu_has_avx512_bf16()) {
      targets.push_back({{index, true}, "AVX3_BF16"});
      twin = true;
    }
#endif
    targets.push_back({{index, false}, hwy::TargetName(t)});
  }
  return targets;
}

// The position of the selected target in available_targets() (0, the best, until select_target runs).
std::atomic<int> g_selected{0};

}  // namespace

const std::vector<Target>& available_targets() {
  // The CPU does not change while the process runs; ropekit never mocks Highway's target set.
  static const std::vector<Target> targets = find_targets();
  return targets;
}

const Target& current_target() {
  return available_targets()[static_cast<std::size_t>(g_selected.load(std::memory_order_relaxed))];
}

void select_target(int index) { g_selected.store(index < 0 ? 0 : index, std::memory_order_relaxed); }

Selection current_selection() { return current_target().selection; }

}  // namespace ropekit::cpu
