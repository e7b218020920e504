// src/analysis/verify_checks.hpp — the checks behind ropekit::verify, each run over an explicit set of
// operations (VerifyOps). verify() passes ropekit's own (library_ops); the tests pass broken ones —
// an angle error, a magnitude applied twice, a shift that loses precision — and expect each check to
// FAIL, so that no check can pass by construction and no bound can be loosened unnoticed.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "ropekit/analysis.hpp"
#include "ropekit/attention.hpp"
#include "ropekit/rope.hpp"

namespace ropekit::detail {

struct VerifyOps {
  // x holds one head (head_dim float32 values) per position; returns them rotated (out of place).
  std::function<std::vector<float>(const std::vector<float>& x, const std::vector<std::int64_t>& positions,
                                   Direction direction, bool on_the_fly)>
      rotate;
  // Appends keys k (one head per position, float32) to a KV cache at `positions`, applies the K-shifts
  // `deltas` (each to every slot), and returns the cached keys.
  std::function<std::vector<float>(const std::vector<float>& k, const std::vector<std::int64_t>& positions,
                                   const std::vector<std::int64_t>& deltas)>
      shifted_keys;
  // Causal attention of args (float32, positions set); fused: RoPE in the tile loads; unfused: apply()
  // into copies, then attention on them.
  std::function<std::vector<float>(const AttentionArgs& args)> fused_attention;
  std::function<std::vector<float>(const AttentionArgs& args)> unfused_attention;
};

// ropekit's own operations on `rope` (which must outlive them).
VerifyOps library_ops(const Rope& rope);

Check check_relative_position(const Rope& rope, const VerifyOps& ops);
Check check_table_accuracy(const Rope& rope, const VerifyOps& ops);
Check check_on_the_fly_equals_table(const Rope& rope, const VerifyOps& ops);
Check check_inverse_roundtrip(const Rope& rope, const VerifyOps& ops);
Check check_magnitude_once(const Rope& rope, const VerifyOps& ops);
Check check_k_shift(const Rope& rope, const VerifyOps& ops);
Check check_fused_attention(const Rope& rope, const VerifyOps& ops);

}  // namespace ropekit::detail
