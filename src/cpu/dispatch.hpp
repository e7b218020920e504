// src/cpu/dispatch.hpp — which SIMD target the CPU kernels run on.
//
// ropekit keeps its own choice (ropekit::set_simd_target) instead of changing Highway's global one:
// listing targets is then a pure query, changing the choice is one atomic store, and every call reads
// the choice once, at the top, and runs one target's code throughout (gemma.cpp's "dispatch once").
// Per-target code is compiled by Highway's foreach_target.h and exported with HWY_EXPORT; a call
// picks its entry with the selection's dispatch index.
//
// ropekit's targets are Highway's plus one: "AVX3_BF16", Highway's best AVX-512 target whose bf16
// stores narrow with AVX512_BF16's vcvtneps2bf16 (Highway 1.0 has no target with that extension).
// It is listed first where the CPU has the extension; its results are the other targets' bits
// (rotate-inl.h's BF16Codec says why), so choosing it changes speed only.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "ropekit/cpu.hpp"
#include "ropekit/dtype.hpp"
#include "ropekit/spec.hpp"

namespace ropekit::cpu {

// What a call reads once, at the top: the entry of the target's Highway kernels in a HWY_EXPORT
// dispatch table, and whether its bf16 stores narrow natively.
struct Selection {
  std::size_t index = 0;
  // float → bf16 narrowing by the CPU's instruction: vcvtneps2bf16 (x86 AVX-512 with AVX512_BF16), BFCVT/BFCVTN
  // (AArch64 with FEAT_BF16)
  bool native_bf16 = false;
};

struct Target {
  Selection selection;  // the Highway target's dispatch-table entry, and the bf16 codec
  std::string name;     // as ropekit::simd_targets() lists it
};

// Targets compiled into ropekit that this CPU supports, best first.
const std::vector<Target>& available_targets();
// The position of the target named `name` in available_targets(); -1 when this CPU or build has none of that name.
int target_index(std::string_view name);
// The target calls run on now: the one set_simd_target chose, else the best available.
const Target& current_target();
// Restricts calls to available_targets()[index]; -1 = the best (the first) again.
void select_target(int index);
// The memory policy's one CPU-dependent choice (issue 42): whether large rotations prefetch ahead of their rows in
// software. Yes on the Intel cores it was tuned on; no on AMD families 25 and 26 (Zen 3 / Zen 4, Zen 5), whose
// hardware prefetchers do better alone (docs/performance-log.md: the code comments' figures). A pure function of the
// identity, so that it can be tested for any CPU.
bool software_row_prefetch(const CpuIdentity& cpu);
// software_row_prefetch(cpu_identity()), read once.
bool software_row_prefetch();
// The policy's other CPU-dependent choice (issue 42): a large float32 rotation of half-pairing rows out of place, run
// on one thread, takes the 256-bit (AVX2) kernel on AMD families 25 and 26, where it ran faster than the AVX-512
// kernel, while in place, on two threads, for 16-bit types and for the interleaved pairing neither won throughout
// (docs/performance-log.md: the code comments' figures). A pure function of the identity and the call's shape, testable
// for any CPU.
bool one_thread_256_bit(const CpuIdentity& cpu, DType q, DType k, Pairing pairing, bool out_of_place,
                        std::int64_t bytes_moved);
// A large call for the memory policy: one that moves at least this many bytes (a prefill's rows, past L1/L2; a decode
// step's q and k were just written by their projection and sit in L1/L2).
inline constexpr std::int64_t kLargeCallBytes = std::int64_t{1} << 20;
// Whether calls run on the best target by default (no set_simd_target restricting them): the CPU-dependent kernel
// choices apply only then, so that a restriction to one target runs that target's code throughout.
bool default_target();

// current_target().selection: one relaxed load and an index.
Selection current_selection();
inline std::size_t current_index() { return current_selection().index; }

}  // namespace ropekit::cpu
