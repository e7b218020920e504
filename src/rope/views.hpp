// src/rope/views.hpp — the checks every entry point that takes Heads or Positions runs (Rope's calls,
// attention, the KV cache): each throws ropekit::Error naming `name` and the field.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>

#include "ropekit/tensor.hpp"

namespace ropekit::detail {

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

}  // namespace ropekit::detail
