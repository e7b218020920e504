// ropekit/cpu.hpp — how apply() runs on the CPU: threads and SIMD instruction sets.
//
// apply() dispatches once per call to the best SIMD target this CPU supports (Highway dynamic
// dispatch) and splits the (token, head) rows over threads. Neither choice changes a single bit of
// the result: every target with SIMD kernels matches the scalar reference exactly, and rows are
// computed alike whatever the split (tests/simd_test.cpp).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace ropekit {

// Threads apply() uses when RotateArgs::threads is 0. Initially the number of hardware threads.
// Small calls use fewer: a thread gets at least ~256 KiB of reads + writes.
int default_threads();
// Throws ropekit::Error unless threads >= 1. Safe to call while other threads call apply().
void set_default_threads(int threads);
// How many of `threads` (>= 1) a call moving `bytes` (read + written) really uses: waking a thread
// costs more than it saves below ~256 KiB per thread.
int threads_for_bytes(int threads, std::int64_t bytes);

// The SIMD target apply() dispatches to now, e.g. "AVX3" (AVX-512) or "AVX2"; targets without a
// fused multiply-add ("SSE4", "EMU128") run the scalar reference kernel.
std::string simd_target();
// Targets compiled into ropekit that this CPU supports, best first.
std::vector<std::string> simd_targets();
// Restricts dispatch to one of simd_targets() — for tests and benchmarks that compare targets;
// "" restores the best. Throws ropekit::Error naming an unknown or unsupported target. Not safe
// while other threads call apply().
void set_simd_target(std::string_view name);

}  // namespace ropekit
