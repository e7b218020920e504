// src/rope/views.hpp — the checks every entry point that takes Heads or Positions runs (Rope's calls,
// attention, the KV cache): each throws ropekit::Error naming `name` and the field.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>

#include "ropekit/spec.hpp"
#include "ropekit/tensor.hpp"

namespace ropekit::detail {

bool valid_dtype(DType dtype);
// Element offset one past the last element the view touches; throws on negative sizes or strides
// and on int64 overflow.
std::int64_t view_extent(const Heads& view, std::string_view name, int head_dim);
// Checks dtype, sizes, strides and data; returns view_extent (a call passes it on to byte_range).
std::int64_t check_view(const Heads& view, std::string_view name, int head_dim);
// A written view's rows must not overlap each other.
void require_no_self_overlap(const Heads& view, std::string_view name, int head_dim);
// The memory a view touches: its extent, and — when its tokens lie at one stride (batch 1, seq 1,
// or batch_stride = seq · seq_stride) — that stride and each token's footprint (its head rows), so
// that views interleaved token by token in one buffer (q, k, v slices of a fused qkv projection) are
// seen to be disjoint although their extents overlap.
// No default member initializers: an array of them is filled as the views are found, and zeroing it
// first cost a decode call's preparation more than the checks (built with braces, the fields left out
// are zero).
struct ByteRange {
  std::uintptr_t begin, end;
  std::string_view name;
  std::int64_t token_stride;  // bytes; 0: the tokens do not lie at one stride (extent only)
  std::int64_t tokens;
  std::int64_t footprint;  // bytes from a token's first element to one past its last
};
ByteRange byte_range(const Heads& view, std::string_view name, int head_dim);
// The same with the view's extent known (check_view's result).
ByteRange byte_range(const Heads& view, std::string_view name, int head_dim, std::int64_t extent);
// True when two ranges may share memory: their extents overlap, unless both are token-strided alike
// and their footprints within one token stride are disjoint (exact for that case, conservative else).
bool may_overlap_strided(const ByteRange& a, const ByteRange& b);  // the second half of may_overlap
inline bool may_overlap(const ByteRange& a, const ByteRange& b) {
  return a.begin < b.end && b.begin < a.end && may_overlap_strided(a, b);
}
// Throws if any two ranges may share memory.
void require_disjoint(std::span<const ByteRange> ranges);
// Throws if the two may share memory (require_disjoint's message).
[[noreturn]] void throw_shared_memory(const ByteRange& a, const ByteRange& b);
inline void require_disjoint(const ByteRange& a, const ByteRange& b) {
  if (may_overlap(a, b)) [[unlikely]]
    throw_shared_memory(a, b);
}
// Checks type, axes, count and pointer, not the values: what the host checks of positions the device reads
// (PositionsAt::Device, validate.hpp), and the first half of check_positions_all.
void check_positions_layout(const Positions& positions, std::string_view name, std::int64_t tokens, int axes);
// ropekit::Error naming `name` and the address when p is not a multiple of `align` bytes: the device backend reads
// each element with one access of its width, which a GPU faults on when misaligned. Null passes.
void check_device_alignment(std::string_view name, const void* p, std::size_t align);
// Checks type, axes, count and every position in [0, 2^47); returns the largest position.
std::int64_t check_positions_all(const Positions& positions, std::string_view name, std::int64_t tokens, int axes);
// The same; a decode step's one valid position without a call (the call's frame was a large part of
// set_positions' cost (docs/performance-log.md: the code comments' figures)). Anything else, errors included, takes
// check_positions_all.
inline std::int64_t check_positions(const Positions& positions, std::string_view name, std::int64_t tokens, int axes) {
  if (tokens == 1 && axes == 1 && positions.count == 1 && positions.axes == 1 && positions.data != nullptr &&
      (positions.type == IndexType::I32 || positions.type == IndexType::I64)) {
    const std::int64_t p = positions.at(0, 0);
    if (p >= 0 && p < kPositionLimit) return p;
  }
  return check_positions_all(positions, name, tokens, axes);
}

}  // namespace ropekit::detail
