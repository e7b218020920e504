// ropekit/cpu.hpp — how apply() runs on the CPU: threads and SIMD instruction sets.
//
// apply() dispatches once per call to the best SIMD target this CPU supports (Highway dynamic
// dispatch) and splits the (token, head) rows over threads. Neither choice changes a single bit of
// the result: every target with SIMD kernels matches the scalar reference exactly, and rows are
// computed alike whatever the split (tests/targets_test.cpp, on every target).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace ropekit {

// None of these change a result (no numerics): they choose how the work is split and which SIMD
// target's kernels run it. All are safe to call while other threads run calls.

// Threads apply() uses when RotateArgs::threads is 0. Initially the number of hardware threads.
// Small calls use fewer: a thread gets at least ~256 KiB of reads + writes.
int default_threads();
// Throws ropekit::Error unless threads >= 1.
void set_default_threads(int threads);
// How many of `threads` (>= 1) a call moving `bytes` (read + written) really uses: waking a thread
// costs more than it saves below ~256 KiB per thread.
int threads_for_bytes(int threads, std::int64_t bytes);

// The SIMD target calls run on now, e.g. "AVX3" (AVX-512) or "AVX2"; targets without a fused
// multiply-add ("SSE4", "SSSE3", "EMU128"/"SCALAR") rotate with the scalar reference kernel.
// "AVX3_BF16" (listed first where the CPU has AVX512_BF16: Intel Cooper Lake and Sapphire Rapids on,
// AMD Zen 4 on) is the best AVX-512 target narrowing to bf16 with vcvtneps2bf16 / vcvtne2ps2bf16 — the same bits
// (vectors holding a subnormal, which the instruction flushes, narrow in software). A call reads the
// target once, when it is prepared, and runs that target's code throughout.
std::string simd_target();
// Targets compiled into ropekit that this CPU supports, best first. A pure query.
std::vector<std::string> simd_targets();
// Restricts the calls prepared from now on to one of simd_targets() — for tests and benchmarks that
// compare targets; "" restores the best. Throws ropekit::Error naming an unknown or unsupported
// target. Calls already prepared keep the target they were prepared with.
void set_simd_target(std::string_view name);

// The CPU this process runs on, as benchmarks must name it (kernel speed differs by vendor and core: issue 42) and
// as the dispatch reads it: the CPUID vendor string ("GenuineIntel", "AuthenticAMD"), the display family and model
// (extended fields folded in: Zen 4 is family 25, model 17 on the EPYC hosts here), and the brand string. Elsewhere
// than x86: vendor and name from /proc/cpuinfo where it says, family and model 0.
struct CpuIdentity {
  std::string vendor;
  int family = 0;
  int model = 0;
  std::string name;
};
const CpuIdentity& cpu_identity();

}  // namespace ropekit
