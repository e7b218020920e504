// src/attention/attention_internal.hpp — what attention.cpp shares with the KV cache and linear
// attention: argument resolution (all validation, the rotations prepared once) and the run of a
// resolved call on the per-target driver.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "ropekit/attention.hpp"

namespace ropekit::detail {

// What the rope rotates on load: q and k (fused attention), q only (keys come from a cache, stored
// rotated), or nothing (the caller rotates features of its own: linear attention, which validates
// the positions when it prepares them).
enum class RopeLoads { QueriesAndKeys, Queries, None };

struct ResolvedAttention {
  int head_dim = 0, v_head_dim = 0;
  float scale = 1.0f;               // softmax scale × softmax_scale_mult
  Positions q_mask, k_mask;         // data null when neither mask nor bias needs positions
  std::vector<int> t5_lut;          // T5 bucket of relative position r at [r + t5_range]
  std::int64_t t5_range = 0;
  std::optional<RotateCall> q_rotation, k_rotation;  // prepared (validated once) for the loads
};

// Validates everything (ropekit::Error naming the field). rope: the rope of the call, or null.
ResolvedAttention resolve_attention(const Rope* rope, const AttentionArgs& args,
                                    const AttentionOptions& options, RopeLoads loads);
void run_attention(const AttentionArgs& args, const AttentionOptions& options, const ResolvedAttention& resolved);

}  // namespace ropekit::detail
