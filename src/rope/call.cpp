// Validation of one rotation call and the scalar reference kernel. The kernel is the
// specification the SIMD kernels are tested against: float32 arithmetic, one rounding to storage.
#include <algorithm>
#include <array>
#include <cmath>
#include <fmt/format.h>
#include <limits>
#include <vector>

#include "rope/call.hpp"
#include "ropekit/error.hpp"

namespace ropekit::detail {
namespace {

constexpr std::int64_t kMaxPosition = (std::int64_t{1} << 47) - 1;

}  // namespace

bool valid_dtype(DType d) { return d == DType::F32 || d == DType::BF16 || d == DType::F16; }

// Element offset one past the last element the view touches; throws on overflow.
std::int64_t view_extent(const Heads& v, std::string_view name, int head_dim) {
  const std::array<std::pair<std::int64_t, std::int64_t>, 3> dims = {
      {{v.batch, v.batch_stride}, {v.seq, v.seq_stride}, {v.heads, v.head_stride}}};
  const std::array<std::string_view, 3> size_names = {"batch", "seq", "heads"};
  const std::array<std::string_view, 3> stride_names = {"batch_stride", "seq_stride", "head_stride"};
  constexpr std::int64_t kLimit = std::numeric_limits<std::int64_t>::max() / 8;
  std::int64_t extent = head_dim;
  for (std::size_t i = 0; i < dims.size(); ++i) {
    const auto [size, stride] = dims[i];
    if (size < 0) throw Error(fmt::format("{}.{} = {}: must be >= 0", name, size_names[i], size));
    if (stride < 0) {
      throw Error(fmt::format("{}.{} = {}: must be >= 0", name, stride_names[i], stride));
    }
    if (size > 1 && stride > 0 && (size - 1) > (kLimit - extent) / stride) {
      throw Error(fmt::format("{}.{} = {} with {}.{} = {}: the view's extent overflows", name,
                              size_names[i], size, name, stride_names[i], stride));
    }
    if (size > 1) extent += (size - 1) * stride;
  }
  return extent;
}

// Rows of a written view must not overlap each other, or one rotation would clobber another's
// input. Sufficient test: sorted by stride, each stride spans everything inside it.
void require_no_self_overlap(const Heads& v, std::string_view name, int head_dim) {
  std::array<std::pair<std::int64_t, std::int64_t>, 3> dims = {
      {{v.head_stride, v.heads}, {v.seq_stride, v.seq}, {v.batch_stride, v.batch}}};
  std::sort(dims.begin(), dims.end());
  std::int64_t inner = head_dim;
  for (const auto& [stride, size] : dims) {
    if (size <= 1) continue;
    if (stride < inner) {
      throw Error(fmt::format("{} has stride {} over {} rows that span {} elements each: rows "
                              "overlap (head_dim = {})",
                              name, stride, size, inner, head_dim));
    }
    inner = stride * (size - 1) + inner;
  }
}

void check_view(const Heads& v, std::string_view name, int head_dim) {
  if (!valid_dtype(v.dtype)) {
    throw Error(fmt::format("{}.dtype = {}: not a DType", name, static_cast<int>(v.dtype)));
  }
  view_extent(v, name, head_dim);
  if (!v.empty() && v.data == nullptr) {
    throw Error(fmt::format("{}.data is null but the view has {}x{}x{} heads", name, v.batch, v.seq,
                            v.heads));
  }
}

ByteRange byte_range(const Heads& v, std::string_view name, int head_dim) {
  const auto begin = reinterpret_cast<std::uintptr_t>(v.data);
  const auto bytes = static_cast<std::uintptr_t>(view_extent(v, name, head_dim) *
                                                 element_size(v.dtype));
  return {begin, begin + bytes, name};
}

void require_disjoint(std::span<const ByteRange> ranges) {
  for (std::size_t i = 0; i < ranges.size(); ++i) {
    for (std::size_t j = i + 1; j < ranges.size(); ++j) {
      if (ranges[i].begin < ranges[j].end && ranges[j].begin < ranges[i].end) {
        throw Error(fmt::format("{} and {} share memory: inputs and outputs must be separate "
                                "buffers (to rotate in place, leave the output view empty)",
                                ranges[i].name, ranges[j].name));
      }
    }
  }
}

std::int64_t check_positions(const Positions& pos, std::string_view name, std::int64_t tokens, int axes) {
  if (pos.type != IndexType::I32 && pos.type != IndexType::I64) {
    throw Error(fmt::format("{}.type = {}: not an IndexType", name, static_cast<int>(pos.type)));
  }
  if (pos.axes != axes) {
    throw Error(fmt::format("{}.axes = {}: this spec needs {} ({})", name, pos.axes, axes,
                            axes == 3 ? "M-RoPE t, h, w streams; text tokens use t = h = w"
                                      : "one position per token"));
  }
  if (pos.count != tokens) {
    throw Error(fmt::format("{}.count = {}: must equal the number of tokens, batch x seq = {}", name,
                            pos.count, tokens));
  }
  if (pos.data == nullptr) throw Error(fmt::format("{}.data is null", name));
  std::int64_t max_position = -1;
  for (int a = 0; a < pos.axes; ++a) {
    for (std::int64_t t = 0; t < pos.count; ++t) {
      const std::int64_t p = pos.at(a, t);
      if (p < 0 || p > kMaxPosition) {
        throw Error(fmt::format("{}[{}{}] = {}: must be in [0, 2^47)", name,
                                pos.axes > 1 ? fmt::format("{}, ", a) : std::string(), t, p));
      }
      max_position = std::max(max_position, p);
    }
  }
  return max_position;
}

namespace {

void check_output(const Heads& in, const Heads& out, std::string_view in_name,
                  std::string_view out_name, int head_dim) {
  check_view(out, out_name, head_dim);
  if (in.empty()) {
    throw Error(fmt::format("{}.data is set but {} is empty: nothing to write", out_name, in_name));
  }
  if (out.batch != in.batch || out.seq != in.seq || out.heads != in.heads) {
    throw Error(fmt::format("{} shape [{}, {}, {}] differs from {} shape [{}, {}, {}]", out_name,
                            out.batch, out.seq, out.heads, in_name, in.batch, in.seq, in.heads));
  }
  if (out.dtype != in.dtype) {
    throw Error(fmt::format("{}.dtype = {} differs from {}.dtype = {}", out_name,
                            to_string(out.dtype), in_name, to_string(in.dtype)));
  }
}

}  // namespace

CallShape validate_call(const RotateArgs& args, const PairMap& map) {
  const int d = map.head_dim;
  if (args.threads < 0) throw Error(fmt::format("threads = {}: must be >= 0 (0: the default)", args.threads));
  if (args.direction != Direction::Forward && args.direction != Direction::Inverse &&
      args.direction != Direction::Backward) {
    throw Error(fmt::format("direction = {}: not a Direction", static_cast<int>(args.direction)));
  }
  check_view(args.q, "q", d);
  check_view(args.k, "k", d);
  const bool q_out = args.q_out.data != nullptr;
  const bool k_out = args.k_out.data != nullptr;
  if (q_out) check_output(args.q, args.q_out, "q", "q_out", d);
  if (k_out) check_output(args.k, args.k_out, "k", "k_out", d);
  if (!args.q.empty() && !args.k.empty() &&
      (args.q.batch != args.k.batch || args.q.seq != args.k.seq)) {
    throw Error(fmt::format("k has batch {} x seq {} but q has batch {} x seq {}: q and k must hold "
                            "the same tokens",
                            args.k.batch, args.k.seq, args.q.batch, args.q.seq));
  }

  // Every view that is written must not overlap itself, and no two views may share memory (an
  // in-place q that overlaps k would be rotated twice).
  // (A fixed array, not a vector: a decode call is a microsecond, an allocation is not free.)
  std::array<ByteRange, 4> ranges;
  std::size_t num_ranges = 0;
  if (!args.q.empty()) {
    if (!q_out) require_no_self_overlap(args.q, "q", d);
    ranges[num_ranges++] = byte_range(args.q, "q", d);
  }
  if (!args.k.empty()) {
    if (!k_out) require_no_self_overlap(args.k, "k", d);
    ranges[num_ranges++] = byte_range(args.k, "k", d);
  }
  if (q_out) {
    require_no_self_overlap(args.q_out, "q_out", d);
    ranges[num_ranges++] = byte_range(args.q_out, "q_out", d);
  }
  if (k_out) {
    require_no_self_overlap(args.k_out, "k_out", d);
    ranges[num_ranges++] = byte_range(args.k_out, "k_out", d);
  }
  require_disjoint(std::span<const ByteRange>(ranges.data(), num_ranges));

  CallShape shape;
  shape.tokens = !args.q.empty() ? args.q.tokens() : (!args.k.empty() ? args.k.tokens() : 0);
  const auto written = [d](const Heads& v) { return v.tokens() * v.heads * d * element_size(v.dtype); };
  if (q_out) shape.bytes_written += written(args.q_out);
  if (k_out) shape.bytes_written += written(args.k_out);
  if (shape.tokens == 0) return shape;

  shape.max_position = check_positions(args.positions, "positions", shape.tokens, map.num_axes);
  return shape;
}

namespace {

struct F32Codec {
  using T = float;
  static float load(T v) { return v; }
  static T store(float v) { return v; }
};
struct BF16Codec {
  using T = std::uint16_t;
  static float load(T v) { return bf16_to_float(v); }
  static T store(float v) { return float_to_bf16(v); }
};
struct F16Codec {
  using T = std::uint16_t;
  static float load(T v) { return f16_to_float(v); }
  static T store(float v) { return float_to_f16(v); }
};

template <class Codec>
void rotate_heads(const Heads& in, const Heads& out, std::int64_t b, std::int64_t s,
                  const PairMap& map, const float* c, const float* sn) {
  using T = typename Codec::T;
  const bool in_place = out.data == nullptr;
  for (std::int64_t h = 0; h < in.heads; ++h) {
    const T* src = static_cast<const T*>(in.data) + b * in.batch_stride + s * in.seq_stride +
                   h * in.head_stride;
    T* dst = in_place ? const_cast<T*>(src)
                      : static_cast<T*>(out.data) + b * out.batch_stride + s * out.seq_stride +
                            h * out.head_stride;
    if (!in_place) std::copy(src + map.rotary_dim, src + map.head_dim, dst + map.rotary_dim);
    for (int j = 0; j < map.num_pairs(); ++j) {
      const float xa = Codec::load(src[map.lane_a[j]]);
      const float xb = Codec::load(src[map.lane_b[j]]);
      dst[map.lane_a[j]] = Codec::store(std::fma(xa, c[j], -(xb * sn[j])));
      dst[map.lane_b[j]] = Codec::store(std::fma(xb, c[j], xa * sn[j]));
    }
  }
}

void rotate_heads(const Heads& in, const Heads& out, std::int64_t b, std::int64_t s,
                  const PairMap& map, const float* c, const float* sn) {
  if (in.empty()) return;
  switch (in.dtype) {
    case DType::F32: return rotate_heads<F32Codec>(in, out, b, s, map, c, sn);
    case DType::BF16: return rotate_heads<BF16Codec>(in, out, b, s, map, c, sn);
    case DType::F16: return rotate_heads<F16Codec>(in, out, b, s, map, c, sn);
  }
}

}  // namespace

cpu::RotateJob make_job(const RotateArgs& args, const PairMap& map, const Plan& plan,
                        const CallShape& shape, const Table* table, const AngleEvaluator* angles) {
  cpu::RotateJob job;
  job.args = &args;
  job.map = &map;
  job.pairing = map.pairing;
  // Magnitude and sign of the sine per direction (see ropekit/call.hpp). Formed in float32 like HF's
  // cos·attention_scaling, so Forward with HfCompat angles reproduces HF's coefficients.
  const double m = args.direction == Direction::Inverse ? 1.0 / plan.cos_sin_scale : plan.cos_sin_scale;
  job.magnitude = static_cast<float>(m);
  job.sin_sign = args.direction == Direction::Forward ? 1.0f : -1.0f;
  job.table = table;
  job.angles = angles;
  job.tokens = shape.tokens;
  const Heads& any = !args.q.empty() ? args.q : args.k;
  job.seq = any.seq;
  job.q_heads = args.q.empty() ? 0 : args.q.heads;
  job.k_heads = args.k.empty() ? 0 : args.k.heads;
  job.stream_stores = shape.bytes_written > 0 && shape.bytes_written >= cpu::stream_threshold_bytes();
  return job;
}

void rotate_reference(const cpu::RotateJob& job) {
  const RotateArgs& args = *job.args;
  const PairMap& map = *job.map;
  const int pairs = map.num_pairs();
  const Heads& any = !args.q.empty() ? args.q : args.k;

  std::vector<float> row_cos(static_cast<std::size_t>(map.num_axes) * pairs);
  std::vector<float> row_sin(row_cos.size());
  std::vector<float> c(pairs), sn(pairs);
  std::array<const float*, 3> axis_cos{}, axis_sin{};

  for (std::int64_t b = 0; b < any.batch; ++b) {
    for (std::int64_t s = 0; s < any.seq; ++s) {
      const std::int64_t token = b * any.seq + s;
      for (int a = 0; a < map.num_axes; ++a) {
        const std::int64_t p = args.positions.at(a, token);
        if (job.table != nullptr) {
          axis_cos[a] = job.table->cos_row(p);
          axis_sin[a] = job.table->sin_row(p);
        } else {
          job.angles->row(p, row_cos.data() + a * pairs, row_sin.data() + a * pairs);
          axis_cos[a] = row_cos.data() + a * pairs;
          axis_sin[a] = row_sin.data() + a * pairs;
        }
      }
      for (int j = 0; j < pairs; ++j) {
        const int a = map.axis[j];
        c[j] = axis_cos[a][map.freq[j]] * job.magnitude;
        sn[j] = axis_sin[a][map.freq[j]] * job.magnitude * job.sin_sign;
      }
      rotate_heads(args.q, args.q_out, b, s, map, c.data(), sn.data());
      rotate_heads(args.k, args.k_out, b, s, map, c.data(), sn.data());
    }
  }
}

}  // namespace ropekit::detail
