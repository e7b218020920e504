// src/cpu/rotate.hpp — the CPU rotation engine behind Rope::apply: Highway SIMD kernels compiled for
// every target (src/cpu/rotate-inl.h), dispatched once per call, run on threads over token × head
// rows.
//
// Contract (checked by tests/simd_test.cpp on every target this CPU supports): on targets with a
// fused multiply-add and correctly rounded fp16 conversion (x86 AVX2 and AVX-512) the kernels give
// the same bits as the scalar reference kernel (detail::rotate_reference), for any thread count.
// Other targets (SSSE3/SSE4/EMU128, no FMA: a second rounding would change the numbers) run the
// scalar reference itself.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "rope/angles.hpp"
#include "ropekit/call.hpp"
#include "ropekit/pair_map.hpp"
#include "ropekit/spec.hpp"
#include "ropekit/table.hpp"

namespace ropekit::cpu {

// One validated call, flattened for the kernels. Rows are (token, head) with token-major order;
// heads [0, q.heads) are q's, the rest k's.
struct RotateJob {
  const RotateArgs* args = nullptr;
  const PairMap* map = nullptr;
  Pairing pairing = Pairing::Half;
  float magnitude = 1.0f;  // cos_sin_scale (or its inverse), as float32 like the reference
  float sin_sign = 1.0f;   // −1 for Inverse and Backward
  const Table* table = nullptr;                 // angles from here when set...
  const detail::AngleEvaluator* angles = nullptr;  // ...else computed per token
  std::int64_t tokens = 0;
  std::int64_t seq = 1;      // token t is (t / seq, t % seq)
  std::int64_t q_heads = 0;  // 0 when q is absent
  std::int64_t k_heads = 0;
  bool stream_stores = false;  // non-temporal stores for out-of-place rows (large calls)
};

// Rotates a validated call on up to `threads` threads (>= 1; see ropekit::threads_for_bytes).
void rotate(const RotateJob& job, int threads);

// The Highway target (HWY_* bit) rotate() dispatches to, and whether it has SIMD kernels.
std::int64_t dispatched_target();
bool dispatched_target_has_simd_kernels();

// Out-of-place calls writing at least this many bytes use non-temporal stores (default: 3/4 of
// the last-level cache, as glibc's memcpy decides; tests lower it to exercise that path).
std::int64_t stream_threshold_bytes();
void set_stream_threshold_bytes(std::int64_t bytes);

}  // namespace ropekit::cpu
