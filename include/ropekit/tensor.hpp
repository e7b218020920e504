// ropekit/tensor.hpp — views of q/k heads and of positions, with explicit strides.
//
// A Heads view is a [batch, seq, heads, head_dim] array whose head_dim lanes are contiguous;
// batch, seq and head strides are free (in elements, not bytes), so every common layout is one
// view:
//   BSHD (HF after view, vLLM):  batch_stride = S·H·D, seq_stride = H·D, head_stride = D
//   BHSD (HF after transpose):   batch_stride = H·S·D, seq_stride = D,   head_stride = S·D
//   packed tokens (THD, varlen): batch = 1, seq = T, seq_stride = H·D, head_stride = D
//   a slice of each head (DeepSeek's rope part after the nope part): lanes(view, first, count) — data
//   points at the slice, head_dim = its width, the strides stay those of the full tensor.
// A view carries its width (head_dim: the lanes of each head it shows; bshd and bhsd set it), so the
// calls that take it need not be told again: attention reads q's and v's widths, and every call checks
// that the lanes it reads (a rope's head_dim) fit in the view. 0 means unstated (a view built by hand,
// or by the C API): the call's own width is then assumed.
// Token t = (b, s) reads position positions[b·seq + s]. Views are checked (ropekit::Error) for
// negative extents or strides, rows that overlap each other, and int64 overflow; ropekit cannot
// check that a raw pointer really holds the elements a view describes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "ropekit/dtype.hpp"

namespace ropekit {

struct Heads {
  void* data = nullptr;
  DType dtype = DType::F32;
  std::int64_t batch = 1;
  std::int64_t seq = 0;
  std::int64_t heads = 0;
  std::int64_t batch_stride = 0;  // elements
  std::int64_t seq_stride = 0;
  std::int64_t head_stride = 0;
  int head_dim = 0;  // lanes of each head this view shows; 0: unstated

  // A view with no elements (the default) is absent: that tensor is not rotated.
  bool empty() const { return batch == 0 || seq == 0 || heads == 0; }
  std::int64_t tokens() const { return batch * seq; }
  // The first of the head_dim elements of head `head` of token (b, s). Exact int64 arithmetic, no
  // check: valid for indices inside a view its call has checked.
  void* row(std::int64_t b, std::int64_t s, std::int64_t head) const {
    return static_cast<std::byte*>(data) +
           (b * batch_stride + s * seq_stride + head * head_stride) * element_size(dtype);
  }
};

// Contiguous layouts (head_dim is the full row width of each head). Exact int64 stride arithmetic;
// nothing is checked here — the call that receives the view checks it (ranges, overflow, overlap).
Heads bshd(void* data, DType dtype, std::int64_t batch, std::int64_t seq, std::int64_t heads, std::int64_t head_dim);
Heads bhsd(void* data, DType dtype, std::int64_t batch, std::int64_t seq, std::int64_t heads, std::int64_t head_dim);
// Lanes [first, first + count) of each head of `view` (MLA's rope part of a q/k head): the same rows
// and strides, data moved to lane `first`, head_dim = count. Errors (ropekit::Error): first < 0,
// count <= 0, or first + count beyond view.head_dim when the view states it.
Heads lanes(const Heads& view, int first, int count);

enum class IndexType : std::uint8_t { I32 = 1, I64 = 2 };
// Bytes per index, as dtype.hpp's element_size gives them per storage type.
constexpr std::int64_t element_size(IndexType type) { return type == IndexType::I32 ? 4 : 8; }

// One position per token (axes = 1) or, for M-RoPE, three streams t, h, w (axes = 3), or one stream per
// axis of an axial (vision) RoPE, stored one after the other: stream a of token t is at data[a·count + t]. Any order,
// duplicates allowed (packed batches, speculative decoding); every position must be in [0, kPositionLimit) = [0, 2^47)
// (ropekit/spec.hpp), which the receiving call checks. Positions are integers: exact, never rounded.
struct Positions {
  const void* data = nullptr;
  IndexType type = IndexType::I64;
  std::int64_t count = 0;  // tokens
  int axes = 1;

  std::int64_t at(int axis, std::int64_t token) const {
    const std::int64_t i = axis * count + token;
    return type == IndexType::I32 ? static_cast<const std::int32_t*>(data)[i]
                                  : static_cast<const std::int64_t*>(data)[i];
  }
};

inline Positions positions(std::span<const std::int32_t> p) {
  return {p.data(), IndexType::I32, static_cast<std::int64_t>(p.size()), 1};
}
inline Positions positions(std::span<const std::int64_t> p) {
  return {p.data(), IndexType::I64, static_cast<std::int64_t>(p.size()), 1};
}
// M-RoPE: p holds 3·count values, the t stream, then h, then w. Throws ropekit::Error naming the
// count when p.size() is not a multiple of 3.
Positions mrope_positions(std::span<const std::int64_t> p);
Positions mrope_positions(std::span<const std::int32_t> p);
// Axial (vision) RoPE: p holds axes·count values, stream a (axis a of Spec::axial) after stream a − 1. Throws
// ropekit::Error naming the count when axes is outside [1, kMaxAxialAxes] or p.size() is not a multiple of it.
Positions axial_positions(std::span<const std::int64_t> p, int axes);
Positions axial_positions(std::span<const std::int32_t> p, int axes);

}  // namespace ropekit
