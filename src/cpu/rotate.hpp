// src/cpu/rotate.hpp — the CPU rotation engine behind Rope::apply: Highway SIMD kernels compiled for
// every target (src/cpu/rotate-inl.h), dispatched once per call, run on threads over token × head
// rows.
//
// Contract (checked by tests/simd_test.cpp on every target this CPU supports): on targets with a
// fused multiply-add and correctly rounded fp16 conversion (x86 AVX2 and AVX-512) the kernels give
// the same bits as the scalar reference kernel (rope/reference.hpp), for any thread count.
// Other targets (SSSE3/SSE4/EMU128, no FMA: a second rounding would change the numbers) run the
// scalar reference itself.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "rope/call.hpp"

namespace ropekit::cpu {

// Rotates a validated call on up to `threads` threads (>= 1; see ropekit::threads_for_bytes).
void rotate(const detail::RotateJob& job, int threads);

// The Highway target (HWY_* bit) rotate() dispatches to, and whether it has SIMD kernels.
std::int64_t dispatched_target();
bool dispatched_target_has_simd_kernels();

// Out-of-place calls writing at least this many bytes use non-temporal stores (default: 3/4 of
// the last-level cache, as glibc's memcpy decides; tests lower it to exercise that path).
bool uses_stream_stores(const detail::RotateJob& job);
std::int64_t stream_threshold_bytes();
void set_stream_threshold_bytes(std::int64_t bytes);

}  // namespace ropekit::cpu
