// ropekit's SIMD target choice (see dispatch.hpp).
#include "cpu/dispatch.hpp"

#include <hwy/highway.h>
#include <hwy/targets.h>

#if HWY_ARCH_X86
#include <cpuid.h>
#elif HWY_ARCH_ARM_A64
#include <sys/auxv.h>
#endif

#include <atomic>
#include <cstring>
#include <fstream>
#include <string>

#include "rope/backend.hpp"
#include "ropekit/cpu.hpp"

namespace ropekit::cpu {
namespace {

#if HWY_ARCH_X86
// CPUID.(EAX=7, ECX=1):EAX bit 5. Only asked where Highway found an AVX-512 target usable, so the
// OS already saves the zmm state.
bool cpu_has_avx512_bf16() {
  unsigned a = 0, b = 0, c = 0, d = 0;
  return __get_cpuid_count(7, 1, &a, &b, &c, &d) != 0 && (a & (1u << 5)) != 0;
}
#endif

#if HWY_ARCH_ARM_A64
// HWCAP2_BF16 (FEAT_BF16: BFCVT, BFCVTN), as the kernel reports it in the auxiliary vector.
bool cpu_has_arm_bf16() {
  constexpr unsigned long kHwcap2Bf16 = 1ul << 14;
  return (getauxval(AT_HWCAP2) & kHwcap2Bf16) != 0;
}
#endif

// CPUID leaves 0, 1 and 0x80000002-4: vendor, display family and model, brand string.
CpuIdentity read_identity() {
  CpuIdentity id;
#if HWY_ARCH_X86
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (__get_cpuid(0, &a, &b, &c, &d) != 0) {
    char vendor[13] = {};
    std::memcpy(vendor, &b, 4);
    std::memcpy(vendor + 4, &d, 4);
    std::memcpy(vendor + 8, &c, 4);
    id.vendor = vendor;
  }
  if (__get_cpuid(1, &a, &b, &c, &d) != 0) {
    const int family = static_cast<int>((a >> 8) & 0xf), model = static_cast<int>((a >> 4) & 0xf);
    const int ext_family = static_cast<int>((a >> 20) & 0xff), ext_model = static_cast<int>((a >> 16) & 0xf);
    id.family = family == 0xf ? family + ext_family : family;
    id.model = family == 0x6 || family == 0xf ? (ext_model << 4) + model : model;
  }
  unsigned top = 0;
  if (__get_cpuid(0x80000000u, &top, &b, &c, &d) != 0 && top >= 0x80000004u) {
    char brand[49] = {};
    for (unsigned leaf = 0; leaf < 3; ++leaf) {
      __get_cpuid(0x80000002u + leaf, &a, &b, &c, &d);
      std::memcpy(brand + leaf * 16, &a, 4);
      std::memcpy(brand + leaf * 16 + 4, &b, 4);
      std::memcpy(brand + leaf * 16 + 8, &c, 4);
      std::memcpy(brand + leaf * 16 + 12, &d, 4);
    }
    id.name = brand;
    const auto first = id.name.find_first_not_of(' ');
    id.name = first == std::string::npos ? "" : id.name.substr(first, id.name.find_last_not_of(' ') - first + 1);
  }
#else
  std::ifstream info("/proc/cpuinfo");
  std::string line;
  while (std::getline(info, line)) {
    const auto colon = line.find(':');
    if (colon == std::string::npos) continue;
    std::string key = line.substr(0, colon), value = line.substr(colon + 1);
    key.erase(key.find_last_not_of(" \t") + 1);
    value.erase(0, value.find_first_not_of(" \t"));
    if (id.vendor.empty() && (key == "CPU implementer" || key == "vendor_id")) id.vendor = value;
    if (id.name.empty() && (key == "model name" || key == "Model")) id.name = value;
  }
#endif
  return id;
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
#if HWY_ARCH_X86 || HWY_ARCH_ARM_A64
  bool twin = false;
#endif
  for (std::int64_t t : hwy::SupportedAndGeneratedTargets()) {
    const std::size_t index = dispatch_index(t);
#if HWY_ARCH_X86
    // The first AVX-512 target (Highway lists the best first) gets a native-bf16 twin before it.
    if (!twin && (t == HWY_AVX3 || t == HWY_AVX3_DL) && cpu_has_avx512_bf16()) {
      targets.push_back({{index, true}, "AVX3_BF16"});
      twin = true;
    }
#elif HWY_ARCH_ARM_A64
    // The best Arm target (SVE2, SVE, their fixed-width forms, or NEON) gets a twin whose bf16 stores narrow with
    // FEAT_BF16's BFCVT/BFCVTN, where the CPU has it: "NEON_BF16", "SVE2_BF16", ...
    if (!twin && cpu_has_arm_bf16()) {
      targets.push_back({{index, true}, std::string(hwy::TargetName(t)) + "_BF16"});
      twin = true;
    }
#endif
    targets.push_back({{index, false}, hwy::TargetName(t)});
  }
  return targets;
}

// The position of the selected target in available_targets(); -1: the best (the first), by default.
std::atomic<int> g_selected{-1};

}  // namespace

}  // namespace ropekit::cpu

namespace ropekit {

const CpuIdentity& cpu_identity() {
  static const CpuIdentity id = cpu::read_identity();
  return id;
}

}  // namespace ropekit

namespace ropekit::cpu {

const std::vector<Target>& available_targets() {
  // The CPU does not change while the process runs; ropekit never mocks Highway's target set.
  static const std::vector<Target> targets = find_targets();
  return targets;
}

const Target& current_target() {
  const int selected = g_selected.load(std::memory_order_relaxed);
  return available_targets()[static_cast<std::size_t>(selected < 0 ? 0 : selected)];
}

void select_target(int index) { g_selected.store(index < 0 ? -1 : index, std::memory_order_relaxed); }

int target_index(std::string_view name) {
  const std::vector<Target>& targets = available_targets();
  for (std::size_t i = 0; i < targets.size(); ++i)
    if (targets[i].name == name) return static_cast<int>(i);
  return -1;
}

bool default_target() { return g_selected.load(std::memory_order_relaxed) < 0; }

Selection current_selection() { return current_target().selection; }

std::size_t simd_dispatch_index() { return current_index(); }

namespace {
// The AMD families both choices were measured on: 25 (Zen 4, model 17) and 26 (Zen 5, model 2). Each was measured on
// each family separately (docs/performance.md); a family not listed keeps the Intel-tuned defaults until measured.
bool measured_zen(const CpuIdentity& cpu) {
  return cpu.vendor == "AuthenticAMD" && (cpu.family == 25 || cpu.family == 26);
}
}  // namespace

bool software_row_prefetch(const CpuIdentity& cpu) { return !measured_zen(cpu); }

bool one_thread_256_bit(const CpuIdentity& cpu, DType q, DType k, Pairing pairing, bool out_of_place,
                        std::int64_t bytes_moved) {
  // Large only: decode-sized calls (in L1/L2) tied, 0.96–1.03.
  return measured_zen(cpu) && q == DType::F32 && k == DType::F32 && pairing == Pairing::Half && out_of_place &&
         bytes_moved >= kLargeCallBytes;
}

bool software_row_prefetch() {
  static const bool prefetch = software_row_prefetch(cpu_identity());
  return prefetch;
}

}  // namespace ropekit::cpu
