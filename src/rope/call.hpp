// src/rope/call.hpp — argument validation and the scalar reference rotation behind Rope::apply.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>

#include "rope/angles.hpp"
#include "cpu/rotate.hpp"
#include "ropekit/call.hpp"
#include "ropekit/pair_map.hpp"
#include "ropekit/plan.hpp"
#include "ropekit/table.hpp"

namespace ropekit::detail {

// View checks shared by every entry point that takes Heads or Positions (ropekit::Error naming
// `name` and the field).
bool valid_dtype(DType dtype);
// Element offset one past the last element the view touches; throws on negative sizes or strides
// and on int64 overflow.
std::int64_t view_extent(const Heads& view, std::string_view name, int head_dim);
void check_view(const Heads& view, std::string_view name, int head_dim);
// A written view's rows must not overlap each other.
void require_no_self_overlap(const Heads& view, std::string_view name, int head_dim);
struct ByteRange {
  std::uintptr_t begin = 0, end = 0;
  std::string_view name;
};
ByteRange byte_range(const Heads& view, std::string_view name, int head_dim);
// Throws if any two ranges share memory.
void require_disjoint(std::span<const ByteRange> ranges);
// Checks type, axes, count and every position in [0, 2^47); returns the largest position.
std::int64_t check_positions(const Positions& positions, std::string_view name, std::int64_t tokens,
                             int axes);

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
