// Views and positions: the layout helpers of ropekit/tensor.hpp and the checks every entry point that
// takes Heads or Positions runs (rope/views.hpp).
#include "rope/views.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <limits>

#include "ropekit/error.hpp"
#include "ropekit/spec.hpp"

namespace ropekit {

std::string_view to_string(DType dtype) {
  switch (dtype) {
    case DType::F32: return "float32";
    case DType::BF16: return "bfloat16";
    case DType::F16: return "float16";
  }
  return "unknown";
}

std::string_view to_string(CacheDType dtype) {
  switch (dtype) {
    case CacheDType::F32: return "f32";
    case CacheDType::BF16: return "bf16";
    case CacheDType::F16: return "f16";
    case CacheDType::F8E4M3: return "f8e4m3";
  }
  return "(invalid CacheDType)";
}

std::string_view to_string(PageLayout layout) {
  switch (layout) {
    case PageLayout::NHD: return "NHD";
    case PageLayout::HND: return "HND";
  }
  return "(invalid PageLayout)";
}

namespace {
// A width that fits the view's int field (a wider head is refused when the view is checked).
int width_of(std::int64_t head_dim) {
  return head_dim > 0 && head_dim <= std::numeric_limits<int>::max() ? static_cast<int>(head_dim) : 0;
}
}  // namespace

Heads bshd(void* data, DType dtype, std::int64_t batch, std::int64_t seq, std::int64_t heads, std::int64_t head_dim) {
  return {data, dtype, batch, seq, heads, seq * heads * head_dim, heads * head_dim, head_dim, width_of(head_dim)};
}

Heads bhsd(void* data, DType dtype, std::int64_t batch, std::int64_t seq, std::int64_t heads, std::int64_t head_dim) {
  return {data, dtype, batch, seq, heads, heads * seq * head_dim, head_dim, seq * head_dim, width_of(head_dim)};
}

Heads lanes(const Heads& view, int first, int count) {
  if (first < 0 || count <= 0) {
    throw Error(fmt::format("lanes: first = {}, count = {}: need first >= 0 and count > 0", first, count));
  }
  if (view.head_dim > 0 && std::int64_t{first} + count > view.head_dim) {
    throw Error(fmt::format("lanes: [{}, {}) is outside the view's {} lanes (view.head_dim)", first,
                            std::int64_t{first} + count, view.head_dim));
  }
  Heads out = view;
  if (out.data != nullptr)
    out.data = static_cast<std::byte*>(out.data) + std::int64_t{first} * element_size(view.dtype);
  out.head_dim = count;
  return out;
}

namespace {

// `axes` streams of equal length, one after the other (`what` names them in the error).
template <class T>
Positions make_streams(std::span<const T> p, int axes, IndexType type, const char* what) {
  if (axes < 1 || axes > kMaxAxialAxes) {
    throw Error(fmt::format("{}: axes = {}: must be in [1, {}]", what, axes, kMaxAxialAxes));
  }
  if (p.size() % static_cast<std::size_t>(axes) != 0) {
    throw Error(fmt::format("{} hold {} values: must be {} streams of equal length", what, p.size(), axes));
  }
  return {p.data(), type, static_cast<std::int64_t>(p.size() / static_cast<std::size_t>(axes)), axes};
}

}  // namespace

Positions mrope_positions(std::span<const std::int64_t> p) {
  return make_streams(p, 3, IndexType::I64, "M-RoPE positions (t, h, w)");
}
Positions mrope_positions(std::span<const std::int32_t> p) {
  return make_streams(p, 3, IndexType::I32, "M-RoPE positions (t, h, w)");
}
Positions axial_positions(std::span<const std::int64_t> p, int axes) {
  return make_streams(p, axes, IndexType::I64, "axial positions");
}
Positions axial_positions(std::span<const std::int32_t> p, int axes) {
  return make_streams(p, axes, IndexType::I32, "axial positions");
}

}  // namespace ropekit

namespace ropekit::detail {

bool valid_dtype(DType d) { return d == DType::F32 || d == DType::BF16 || d == DType::F16; }

namespace {

constexpr std::int64_t kExtentLimit = std::numeric_limits<std::int64_t>::max() / 8;

// view_extent one dimension at a time, naming the field of the first check that fails.
[[gnu::cold]] std::int64_t checked_extent(const Heads& v, std::string_view name, int head_dim) {
  const std::array<std::pair<std::int64_t, std::int64_t>, 3> dims = {
      {{v.batch, v.batch_stride}, {v.seq, v.seq_stride}, {v.heads, v.head_stride}}};
  const std::array<std::string_view, 3> size_names = {"batch", "seq", "heads"};
  const std::array<std::string_view, 3> stride_names = {"batch_stride", "seq_stride", "head_stride"};
  std::int64_t extent = head_dim;
  for (std::size_t i = 0; i < dims.size(); ++i) {
    const auto [size, stride] = dims[i];
    if (size < 0) throw Error(fmt::format("{}.{} = {}: must be >= 0", name, size_names[i], size));
    if (stride < 0) {
      throw Error(fmt::format("{}.{} = {}: must be >= 0", name, stride_names[i], stride));
    }
    if (size > 1 && stride > 0 && (size - 1) > (kExtentLimit - extent) / stride) {
      throw Error(fmt::format("{}.{} = {} with {}.{} = {}: the view's extent overflows", name, size_names[i], size,
                              name, stride_names[i], stride));
    }
    if (size > 1) extent += (size - 1) * stride;
  }
  return extent;
}

}  // namespace

// Element offset one past the last element the view touches; throws on a negative size or stride and
// on overflow. Rope::prepare runs it once per view (check_view returns it, byte_range takes it),
// prepare_append twice for q and k (its own checks, then its rotation's), a decode call in a few hundred
// nanoseconds: the sum is formed in 128 bits without branches per dimension, and only a view that may
// fail goes through the checks that name the field.
std::int64_t view_extent(const Heads& v, std::string_view name, int head_dim) {
  __extension__ typedef unsigned __int128 U;  // GCC and Clang on 64-bit targets
  const auto span = [](std::int64_t size, std::int64_t stride) {
    return size > 1 ? U(static_cast<std::uint64_t>(size - 1)) * static_cast<std::uint64_t>(stride) : U(0);
  };
  const bool negative =
      (v.batch | v.seq | v.heads | v.batch_stride | v.seq_stride | v.head_stride | std::int64_t{head_dim}) < 0;
  // Each product is below 2^126 when nothing is negative: three of them and head_dim fit in 128 bits.
  const U extent = U(static_cast<std::uint64_t>(head_dim)) + span(v.batch, v.batch_stride) + span(v.seq, v.seq_stride) +
                   span(v.heads, v.head_stride);
  if (negative || extent > U(kExtentLimit)) [[unlikely]]
    return checked_extent(v, name, head_dim);
  return static_cast<std::int64_t>(extent);
}

// Rows of a written view must not overlap each other, or one rotation would clobber another's
// input. Sufficient test: sorted by stride, each stride spans everything inside it.
void require_no_self_overlap(const Heads& v, std::string_view name, int head_dim) {
  using Dim = std::pair<std::int64_t, std::int64_t>;
  Dim dims[3] = {{v.head_stride, v.heads}, {v.seq_stride, v.seq}, {v.batch_stride, v.batch}};
  // Three elements: a sorting network (std::sort's call costs more than the test on a decode call).
  if (dims[1] < dims[0]) std::swap(dims[0], dims[1]);
  if (dims[2] < dims[1]) std::swap(dims[1], dims[2]);
  if (dims[1] < dims[0]) std::swap(dims[0], dims[1]);
  std::int64_t inner = head_dim;
  for (const auto& [stride, size] : dims) {
    if (size <= 1) continue;
    if (stride < inner) {
      throw Error(
          fmt::format("{} has stride {} over {} rows that span {} elements each: rows "
                      "overlap (head_dim = {})",
                      name, stride, size, inner, head_dim));
    }
    inner = stride * (size - 1) + inner;
  }
}

std::int64_t check_view(const Heads& v, std::string_view name, int head_dim) {
  if (!valid_dtype(v.dtype)) {
    throw Error(fmt::format("{}.dtype = {}: not a DType", name, static_cast<int>(v.dtype)));
  }
  // A view that states its width must hold the lanes the call reads (a slice of wider rows is
  // lanes(view, first, count), whose width is the slice's).
  if (v.head_dim < 0 || (v.head_dim > 0 && head_dim > v.head_dim)) [[unlikely]] {
    throw Error(fmt::format("{}.head_dim = {}: the call reads {} lanes of each head", name, v.head_dim, head_dim));
  }
  const std::int64_t extent = view_extent(v, name, head_dim);
  if (!v.empty() && v.data == nullptr) {
    throw Error(fmt::format("{}.data is null but the view has {}x{}x{} heads", name, v.batch, v.seq, v.heads));
  }
  return extent;
}

ByteRange byte_range(const Heads& v, std::string_view name, int head_dim) {
  return byte_range(v, name, head_dim, view_extent(v, name, head_dim));
}

ByteRange byte_range(const Heads& v, std::string_view name, int head_dim, std::int64_t extent) {
  const auto begin = reinterpret_cast<std::uintptr_t>(v.data);
  const std::int64_t es = element_size(v.dtype);
  const auto bytes = static_cast<std::uintptr_t>(extent * es);
  ByteRange r{begin, begin + bytes, name};
  if (v.empty()) return r;
  // Tokens at one stride: token t = (b, s) at t · stride.
  const bool linear = v.batch == 1 || v.seq == 1 || v.batch_stride == v.seq * v.seq_stride;
  const std::int64_t stride = v.seq > 1 ? v.seq_stride : v.batch_stride;
  if (linear && stride > 0) {
    r.token_stride = stride * es;
    r.tokens = v.batch * v.seq;
    r.footprint = ((v.heads - 1) * v.head_stride + head_dim) * es;
  }
  return r;
}

bool may_overlap_strided(const ByteRange& a, const ByteRange& b) {
  if (a.token_stride == 0 || a.token_stride != b.token_stride || a.tokens != b.tokens) return true;
  // Token t of a covers [t·S, t·S + fa) from a.begin, of b [δ + t·S, δ + t·S + fb): with both
  // footprints inside one window of S bytes and apart from each other, no token of one meets any
  // token of the other.
  const auto delta = static_cast<std::int64_t>(b.begin - a.begin);  // two's complement: may be negative
  const std::int64_t lo = std::min<std::int64_t>(0, delta), hi = std::max(a.footprint, delta + b.footprint);
  const bool apart = delta >= a.footprint || delta + b.footprint <= 0;
  return !(apart && hi - lo <= a.token_stride);
}

void throw_shared_memory(const ByteRange& a, const ByteRange& b) {
  throw Error(
      fmt::format("{} and {} share memory: inputs and outputs must be separate buffers (to rotate in "
                  "place, leave the output view empty)",
                  a.name, b.name));
}

void require_disjoint(std::span<const ByteRange> ranges) {
  for (std::size_t i = 0; i < ranges.size(); ++i) {
    for (std::size_t j = i + 1; j < ranges.size(); ++j) require_disjoint(ranges[i], ranges[j]);
  }
}

void check_positions_layout(const Positions& pos, std::string_view name, std::int64_t tokens, int axes) {
  if (pos.type != IndexType::I32 && pos.type != IndexType::I64) {
    throw Error(fmt::format("{}.type = {}: not an IndexType", name, static_cast<int>(pos.type)));
  }
  if (pos.axes != axes) {
    throw Error(fmt::format("{}.axes = {}: this spec needs {} ({})", name, pos.axes, axes,
                            axes == 1   ? "one position per token"
                            : axes == 3 ? "M-RoPE t, h, w streams (text tokens use t = h = w), or 3 axial axes"
                                        : "one stream per axis of the spec's axial RoPE"));
  }
  if (pos.count != tokens) {
    throw Error(
        fmt::format("{}.count = {}: must equal the number of tokens, batch x seq = {}", name, pos.count, tokens));
  }
  if (pos.data == nullptr) throw Error(fmt::format("{}.data is null", name));
}

void check_device_alignment(std::string_view name, const void* p, std::size_t align) {
  if (p != nullptr && reinterpret_cast<std::uintptr_t>(p) % align != 0) {
    throw Error(
        fmt::format("{} = {}: a device pointer must be aligned to its element size ({} bytes)", name, p, align));
  }
}

std::int64_t check_positions_all(const Positions& pos, std::string_view name, std::int64_t tokens, int axes) {
  check_positions_layout(pos, name, tokens, axes);
  std::int64_t max_position = -1;
  for (int a = 0; a < pos.axes; ++a) {
    for (std::int64_t t = 0; t < pos.count; ++t) {
      const std::int64_t p = pos.at(a, t);
      if (p < 0 || p >= kPositionLimit) {
        throw Error(fmt::format("{}[{}{}] = {}: must be in [0, 2^47)", name,
                                pos.axes > 1 ? fmt::format("{}, ", a) : std::string(), t, p));
      }
      max_position = std::max(max_position, p);
    }
  }
  return max_position;
}

}  // namespace ropekit::detail
