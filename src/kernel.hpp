// src/kernel.hpp — argument validation and the scalar reference rotation behind Rope::apply.
#pragma once

#include <cstdint>

#include "angles.hpp"
#include "ropekit/apply.hpp"
#include "ropekit/pair_map.hpp"
#include "ropekit/plan.hpp"
#include "ropekit/table.hpp"

namespace ropekit::detail {

struct CallShape {
  std::int64_t tokens = 0;        // 0: nothing to rotate
  std::int64_t max_position = -1;  // over all streams
};

// Throws ropekit::Error naming the first bad view, stride, shape or position.
CallShape validate_call(const RotateArgs& args, const PairMap& map);

// Rotates a validated call. Angles come from `table` when it is non-null (every position must be
// inside it), else from `angles`.
void rotate_reference(const RotateArgs& args, const PairMap& map, const Plan& plan,
                      const Table* table, const AngleEvaluator* angles);

}  // namespace ropekit::detail
