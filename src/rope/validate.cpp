// Validation of one rotation call and its flattening into the call shape the kernels read.
#include "rope/validate.hpp"

#include <fmt/format.h>

#include <array>

#include "rope/call_shape.hpp"
#include "rope/views.hpp"
#include "ropekit/error.hpp"

namespace ropekit::detail {

namespace {

// Returns the output view's extent.
std::int64_t check_output(const Heads& in, const Heads& out, std::string_view in_name, std::string_view out_name,
                          int head_dim) {
  const std::int64_t extent = check_view(out, out_name, head_dim);
  if (in.empty()) {
    throw Error(fmt::format("{}.data is set but {} is empty: nothing to write", out_name, in_name));
  }
  if (out.batch != in.batch || out.seq != in.seq || out.heads != in.heads) {
    throw Error(fmt::format("{} shape [{}, {}, {}] differs from {} shape [{}, {}, {}]", out_name, out.batch, out.seq,
                            out.heads, in_name, in.batch, in.seq, in.heads));
  }
  if (out.dtype != in.dtype) {
    throw Error(fmt::format("{}.dtype = {} differs from {}.dtype = {}", out_name, to_string(out.dtype), in_name,
                            to_string(in.dtype)));
  }
  return extent;
}

}  // namespace

CheckedCall validate_call(const RotateArgs& args, const PairMap& map, ViewUse use, const CallNames& names,
                          PositionsAt at) {
  const int d = map.head_dim;
  if (args.threads < 0) throw Error(fmt::format("threads = {}: must be >= 0 (0: the default)", args.threads));
  if (args.direction != Direction::Forward && args.direction != Direction::Inverse &&
      args.direction != Direction::Backward) {
    throw Error(fmt::format("direction = {}: not a Direction", static_cast<int>(args.direction)));
  }
  const std::int64_t q_extent = check_view(args.q, names.q, d);
  const std::int64_t k_extent = check_view(args.k, names.k, d);
  const bool q_out = args.q_out.data != nullptr;
  const bool k_out = args.k_out.data != nullptr;
  const std::int64_t q_out_extent = q_out ? check_output(args.q, args.q_out, names.q, names.q_out, d) : 0;
  const std::int64_t k_out_extent = k_out ? check_output(args.k, args.k_out, names.k, names.k_out, d) : 0;
  if (!args.q.empty() && !args.k.empty() && (args.q.batch != args.k.batch || args.q.seq != args.k.seq)) {
    throw Error(
        fmt::format("{} has batch {} x seq {} but {} has batch {} x seq {}: they must hold "
                    "the same tokens",
                    names.k, args.k.batch, args.k.seq, names.q, args.q.batch, args.q.seq));
  }

  if (use == ViewUse::Read && (q_out || k_out)) {
    throw Error(
        fmt::format("{}/{} are set but this call only reads {} and {} (the consumer writes the "
                    "rotated rows)",
                    names.q_out, names.k_out, names.q, names.k));
  }
  if (use == ViewUse::Write) {
    // Every view that is written must not overlap itself, and no two views may share memory (an
    // in-place q that overlaps k would be rotated twice).
    // (A fixed array, not a vector: a decode call is a microsecond, an allocation is not free.)
    std::array<ByteRange, 4> ranges;
    std::size_t num_ranges = 0;
    if (!args.q.empty()) {
      if (!q_out) require_no_self_overlap(args.q, names.q, d);
      ranges[num_ranges++] = byte_range(args.q, names.q, d, q_extent);
    }
    if (!args.k.empty()) {
      if (!k_out) require_no_self_overlap(args.k, names.k, d);
      ranges[num_ranges++] = byte_range(args.k, names.k, d, k_extent);
    }
    if (q_out) {
      require_no_self_overlap(args.q_out, names.q_out, d);
      ranges[num_ranges++] = byte_range(args.q_out, names.q_out, d, q_out_extent);
    }
    if (k_out) {
      require_no_self_overlap(args.k_out, names.k_out, d);
      ranges[num_ranges++] = byte_range(args.k_out, names.k_out, d, k_out_extent);
    }
    require_disjoint(std::span<const ByteRange>(ranges.data(), num_ranges));
  }

  if (at == PositionsAt::Device) {
    // Device pointers: the kernels read each element with one access of its width.
    const auto aligned = [](const Heads& v, std::string_view name) {
      check_device_alignment(fmt::format("{}.data", name), v.data, static_cast<std::size_t>(element_size(v.dtype)));
    };
    aligned(args.q, names.q);
    aligned(args.k, names.k);
    aligned(args.q_out, names.q_out);
    aligned(args.k_out, names.k_out);
  }

  CheckedCall checked(args, use, at);
  checked.q_extent_ = q_extent;
  checked.k_extent_ = k_extent;
  CallShape& shape = checked.shape_;
  shape.tokens = !args.q.empty() ? args.q.tokens() : (!args.k.empty() ? args.k.tokens() : 0);
  const auto written = [d](const Heads& v) { return v.tokens() * v.heads * d * element_size(v.dtype); };
  if (q_out) shape.bytes_written += written(args.q_out);
  if (k_out) shape.bytes_written += written(args.k_out);
  if (shape.tokens == 0) return checked;

  if (at == PositionsAt::Device) {
    check_positions_layout(args.positions, names.positions, shape.tokens, map.num_axes);
    check_device_alignment(fmt::format("{}.data", names.positions), args.positions.data,
                           element_size(args.positions.type));
    return checked;  // max_position stays −1: the values are the device's
  }
  shape.max_position = check_positions(args.positions, names.positions, shape.tokens, map.num_axes);
  return checked;
}

void make_job(RotateJob& job, const PairMap& map, const Plan& plan, const CallShape& shape, const Table* table,
              const AngleEvaluator* angles) {
  const RotateArgs& args = job.args;
  job.map = &map;
  // Magnitude and sign of the sine per direction (ropekit/call.hpp). Formed in float32 like HF's
  // cos·attention_scaling, so Forward with HfCompat angles reproduces HF's coefficients.
  const double m = args.direction == Direction::Inverse ? 1.0 / plan.cos_sin_scale : plan.cos_sin_scale;
  job.magnitude = static_cast<float>(m);
  job.sin_sign = args.direction == Direction::Forward ? 1.0f : -1.0f;
  job.table = table;
  job.angles = angles;
  job.tokens = shape.tokens;
  const Heads& any = !args.q.empty() ? args.q : args.k;
  job.seq = any.seq > 0 ? any.seq : 1;
  job.q_heads = args.q.empty() ? 0 : args.q.heads;
  job.k_heads = args.k.empty() ? 0 : args.k.heads;
  job.bytes_moved = job.tokens * map.head_dim * 2 *
                    (job.q_heads * element_size(args.q.dtype) + job.k_heads * element_size(args.k.dtype));
}

}  // namespace ropekit::detail
