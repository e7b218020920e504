// src/kernel.hpp — argument validation and the scalar reference rotation behind Rope::apply.
#pragma once

#include <cstdint>

#include "angles.hpp"
#include "cpu/rotate.hpp"
#include "ropekit/apply.hpp"
#include "ropekit/pair_map.hpp"
#include "ropekit/plan.hpp"
#include "ropekit/table.hpp"

namespace ropekit::detail {

struct CallShape {
  std::int64_t tokens = 0;        // 0: nothing to rotate
  std::int64_t max_position = -1;  // over all streams
  std::int64_t bytes_written = 0;  // by out-of-place views
};

// Throws ropekit::Error naming the first bad view, stride, shape or position.
CallShape validate_call(const RotateArgs& args, const PairMap& map);

// The kernels' view of a validated call. Angles come from `table` when it is non-null (every
// position must be inside it), else from `angles`.
cpu::RotateJob make_job(const RotateArgs& args, const PairMap& map, const Plan& plan,
                        const CallShape& shape, const Table* table, const AngleEvaluator* angles);

// The scalar reference kernel: the specification the SIMD kernels are tested against (float32
// arithmetic with std::fma, one rounding to storage). Single-threaded.
void rotate_reference(const cpu::RotateJob& job);

}  // namespace ropekit::detail
