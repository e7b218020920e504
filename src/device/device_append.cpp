// ropekit::cuda::append, shift and rerotate (ropekit/cuda.hpp): the fused rotate-and-append, the K-shift and the
// re-rotation on device memory. The host never reads the device's positions or slots: the append is checked by
// prepare_append's own checks with PositionsAt::Device (device_shapes.cpp), the K-shift and re-rotation check the cache
// and the slots' layout here, and the kernels check the values, reporting through the DeviceRope's error word.
#include <fmt/format.h>

#include "device/device_shapes.hpp"
#include "rope/views.hpp"
#include "ropekit/cuda.hpp"
#include "ropekit/error.hpp"

namespace ropekit::cuda {
namespace {

// What the K-shift and the re-rotation check on the host: the cache (validated, with keys of the rope's head_dim) and
// the slot mapping (its type, count, pointer and alignment; its values are the device's).
void check_turned_entries(const Rope& rope, const PagedCache& cache, const SlotMapping& slots, const char* what) {
  cache.validate();
  if (cache.k == nullptr) throw Error(fmt::format("cache.k is null: {} turns the cache's keys", what));
  if (cache.head_dim != rope.spec().head_dim) {
    throw Error(fmt::format("cache.head_dim = {}: {} turns whole key entries of the rope's head_dim = {}",
                            cache.head_dim, what, rope.spec().head_dim));
  }
  if (slots.count < 0) throw Error(fmt::format("slots.count = {}: must be >= 0", slots.count));
  detail::check_slot_layout(slots, slots.count);
  detail::check_device_alignment("cache.k", cache.k, static_cast<std::size_t>(element_size(cache.dtype)));
}

// The K-shift and the re-rotation turn cached keys by the rope's own angles (R(δ), or one scaling's into another's):
// a DeviceRope made from a table (an engine's cos/sin cache, magnitude included) is refused, naming the argument.
void refuse_table(const DeviceRope& gpu, const char* name, const char* what) {
  if (detail::DeviceAccess::table(gpu)) {
    throw Error(
        fmt::format("{}: a DeviceRope made from a table; {} takes one of the rope's own angles "
                    "(DeviceRope(rope, device, table_positions))",
                    name, what));
  }
}

// The K-shift on gpu's device and the caller's stream.
void launch_kshift(const DeviceRope& gpu, const KShiftShape& shape, const Stream& stream) {
  detail::DeviceAccess::check_stream(gpu, stream);
  detail::launch_kshift(detail::DeviceAccess::angles(gpu), shape, stream.stream);
}

// A turn's pair geometry from the rope, over `entries` entries.
void set_turn(const Rope& rope, std::int64_t entries, RotateShape& turn) {
  const PairMap& map = rope.pair_map();
  turn.pairs = map.num_pairs();
  turn.rotary_dim = map.rotary_dim;
  turn.head_dim = map.head_dim;
  turn.tokens = entries;
}

}  // namespace

void append(const DeviceRope& gpu, const AppendArgs& args, const PagedCache& cache, const Stream& stream) {
  detail::DeviceAccess::append(gpu, args, cache, stream, {});
}

void shift(const DeviceRope& gpu, const PagedCache& cache, const SlotMapping& slots, std::int64_t delta,
           const Stream& stream) {
  const Rope& rope = detail::DeviceAccess::rope(gpu);
  refuse_table(gpu, "rope", "a K-shift");
  check_turned_entries(rope, cache, slots, "a K-shift");
  const std::int64_t steps = delta < 0 ? -delta : delta;
  if (delta <= -kPositionLimit || delta >= kPositionLimit) {
    throw Error(fmt::format("delta = {}: |delta| must be below 2^47", delta));
  }
  if (delta == 0 || slots.count == 0) return;
  KShiftShape k;
  RotateShape& turn = k.calls[0];
  set_turn(rope, slots.count, turn);
  // R(δ) with magnitude 1: the angle of |δ|, the sine's sign flipped for a shift back (Direction::Inverse of a unit
  // rope, as PagedKvCache turns its entries).
  turn.magnitude = 1.0f;
  turn.sin_sign = delta < 0 ? -1.0f : 1.0f;
  turn.uniform_position = steps;
  detail::point_at(detail::DeviceAccess::angles(gpu), turn);
  if (turn.turns_hi == nullptr && steps >= turn.table_positions) {
    throw Error(
        fmt::format("delta = {}: past this HfCompat DeviceRope's table of {} positions", delta, turn.table_positions));
  }
  k.num_calls = 1;
  k.slots = slots.data;
  k.slots_i64 = slots.type == IndexType::I64;
  k.entries = slots.count;
  detail::set_cuda_cache(cache, k.cache);
  launch_kshift(gpu, k, stream);
}

void rerotate(const DeviceRope& from, const DeviceRope& to, const PagedCache& cache, const SlotMapping& slots,
              const Positions& positions, const Stream& stream) {
  const Rope& old_rope = detail::DeviceAccess::rope(from);
  const Rope& rope = detail::DeviceAccess::rope(to);
  refuse_table(from, "from", "a re-rotation");
  refuse_table(to, "to", "a re-rotation");
  check_turned_entries(rope, cache, slots, "a re-rotation");
  if (from.device() != to.device()) {
    throw Error(fmt::format("from is on device {}, to on device {}: a re-rotation needs both on one device",
                            from.device(), to.device()));
  }
  const PairMap &a = old_rope.pair_map(), &b = rope.pair_map();
  if (a.head_dim != b.head_dim || a.rotary_dim != b.rotary_dim || a.lane_a != b.lane_a || a.lane_b != b.lane_b ||
      a.axis != b.axis) {
    throw Error(
        fmt::format("from ({}, rotary_dim {}) and to ({}, rotary_dim {}) pair their lanes differently: a "
                    "re-rotation changes the frequencies, not the layout",
                    to_string(a.pairing), a.rotary_dim, to_string(b.pairing), b.rotary_dim));
  }
  detail::check_positions_layout(positions, "positions", slots.count, b.num_axes);  // one per slot
  detail::check_device_alignment("positions.data", positions.data, element_size(positions.type));
  if (slots.count == 0) return;
  // Un-rotate under from (Direction::Inverse: magnitude 1 / cos_sin_scale, the sine negated) and rotate under to
  // (Forward), in float32, rounded once to the cache's type: PagedKvCache::rerotate's two calls, its bits.
  KShiftShape k;
  k.num_calls = 2;
  const Rope* ropes[2] = {&old_rope, &rope};
  const DeviceRope* gpus[2] = {&from, &to};
  for (int c = 0; c < 2; ++c) {
    RotateShape& turn = k.calls[c];
    set_turn(*ropes[c], slots.count, turn);
    const double m = ropes[c]->plan().cos_sin_scale;
    turn.magnitude = static_cast<float>(c == 0 ? 1.0 / m : m);
    turn.sin_sign = c == 0 ? -1.0f : 1.0f;
    turn.positions = positions.data;
    turn.positions_i64 = positions.type == IndexType::I64;
    detail::point_at(detail::DeviceAccess::angles(*gpus[c]), turn);
  }
  k.calls[0].error = k.calls[1].error;  // every report on to's error word
  k.slots = slots.data;
  k.slots_i64 = slots.type == IndexType::I64;
  k.entries = slots.count;
  detail::set_cuda_cache(cache, k.cache);
  launch_kshift(to, k, stream);
}

}  // namespace ropekit::cuda
