// src/rope/call.hpp — one rotation call, validated and flattened into the call shape every backend
// reads (RotateJob). Backends include this header and nothing above the core.
#pragma once

#include <cstdint>

#include "ropekit/call.hpp"
#include "ropekit/pair_map.hpp"
#include "ropekit/plan.hpp"
#include "ropekit/table.hpp"

namespace ropekit::detail {

class AngleEvaluator;

struct CallShape {
  std::int64_t tokens = 0;        // 0: nothing to rotate
  std::int64_t max_position = -1;  // over all streams
  std::int64_t bytes_written = 0;  // by out-of-place views
};

// Throws ropekit::Error naming the first bad view, stride, shape or position.
CallShape validate_call(const RotateArgs& args, const PairMap& map);

// One validated call, flattened for the kernels. Rows are (token, head) with token-major order;
// heads [0, q.heads) are q's, the rest k's.
struct RotateJob {
  const RotateArgs* args = nullptr;
  const PairMap* map = nullptr;
  Pairing pairing = Pairing::Half;
  float magnitude = 1.0f;  // cos_sin_scale (or its inverse), as float32 like the reference
  float sin_sign = 1.0f;   // −1 for Inverse and Backward
  const Table* table = nullptr;          // angles from here when set...
  const AngleEvaluator* angles = nullptr;  // ...else computed per token
  std::int64_t tokens = 0;
  std::int64_t seq = 1;      // token t is (t / seq, t % seq)
  std::int64_t q_heads = 0;  // 0 when q is absent
  std::int64_t k_heads = 0;
  std::int64_t bytes_written = 0;  // by out-of-place views (the backend's non-temporal store choice)
};

// The kernels' view of a validated call. Angles come from `table` when it is non-null (every
// position must be inside it), else from `angles`.
RotateJob make_job(const RotateArgs& args, const PairMap& map, const Plan& plan, const CallShape& shape,
                   const Table* table, const AngleEvaluator* angles);

}  // namespace ropekit::detail
