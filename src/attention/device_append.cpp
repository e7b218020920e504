// ropekit::cuda::append and ropekit::cuda::shift (ropekit/append.hpp): the fused rotate-and-append and the K-shift
// on device memory. The host never reads the
// device's positions or slots: prepare_append checks everything else, with host stand-ins of the same counts (zeros
// for positions, −1 for slots: every token "padding", so no slot is resolved), and the kernel checks the values,
// reporting through the DeviceRope's error word.
#include <fmt/format.h>

#include <span>
#include <utility>
#include <variant>
#include <vector>

#include "attention/attention_internal.hpp"
#include "attention/device_shapes.hpp"
#include "cuda/device_access.hpp"
#include "ropekit/append.hpp"
#include "ropekit/error.hpp"

namespace ropekit::cuda {
namespace {

// What the host checks of a device slot mapping (its values are the device's): type, count, pointer, alignment.
void check_device_slots(const SlotMapping& slots) {
  if (slots.type != IndexType::I32 && slots.type != IndexType::I64) {
    throw Error(fmt::format("slots.type = {}: not an IndexType", static_cast<int>(slots.type)));
  }
  if (slots.count < 0) throw Error(fmt::format("slots.count = {}: must be >= 0", slots.count));
  if (slots.data == nullptr && slots.count > 0) throw Error("slots.data is null");
  detail::check_device_alignment("slots.data", slots.data, slots.type == IndexType::I64 ? 8 : 4);
}

// What the K-shift and the re-rotation check on the host: the cache (validated, with keys of the rope's head_dim) and
// the slot mapping (its type, count, pointer and alignment; its values are the device's).
void check_turned_entries(const Rope& rope, const PagedCache& cache, const SlotMapping& slots, const char* what) {
  cache.validate();
  if (cache.k == nullptr) throw Error(fmt::format("cache.k is null: {} turns the cache's keys", what));
  if (cache.head_dim != rope.spec().head_dim) {
    throw Error(fmt::format("cache.head_dim = {}: {} turns whole key entries of the rope's head_dim = {}",
                            cache.head_dim, what, rope.spec().head_dim));
  }
  check_device_slots(slots);
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
  // The slots: a slot mapping, or a page table whose spans are device arrays (their sizes are the host's to check,
  // their values the device's: table_slot). Either way the host prepares with stand-in slots of the same count.
  SlotMapping device_slots;
  DevicePageTable table;
  if (const auto* m = std::get_if<SlotMapping>(&args.slots)) {
    device_slots = *m;
    check_device_slots(device_slots);
  } else {
    const PageTable& t = std::get<PageTable>(args.slots);
    const std::size_t batch = detail::check_page_table_counts(t);
    for (const auto& [field, span] :
         {std::pair<const char*, std::span<const std::int32_t>>{"page_table.indices", t.indices},
          {"page_table.indptr", t.indptr},
          {"page_table.last_page_len", t.last_page_len},
          {"page_table.batch_indices", t.batch_indices},
          {"page_table.seq_positions", t.seq_positions}}) {
      if (span.data() == nullptr && !span.empty()) throw Error(fmt::format("{} is null", field));
      detail::check_device_alignment(field, span.data(), 4);
    }
    table = {t.indices.data(),
             t.indptr.data(),
             t.last_page_len.data(),
             t.batch_indices.data(),
             t.seq_positions.data(),
             static_cast<std::int64_t>(batch),
             static_cast<std::int64_t>(t.indices.size())};
    device_slots = {nullptr, IndexType::I64, static_cast<std::int64_t>(t.batch_indices.size())};
  }
  const Positions& p = args.positions;
  detail::check_device_positions(p);
  for (const auto& [field, h] : {std::pair<const char*, const Heads*>{"q.data", &args.q},
                                 {"q_out.data", &args.q_out},
                                 {"k.data", &args.k},
                                 {"k_out.data", &args.k_out},
                                 {"k_nope.data", &args.k_nope},
                                 {"v.data", &args.v}}) {
    detail::check_device_alignment(field, h->data, static_cast<std::size_t>(element_size(h->dtype)));
  }
  detail::check_device_alignment("cache.k", cache.k, static_cast<std::size_t>(element_size(cache.dtype)));
  detail::check_device_alignment("cache.v", cache.v, static_cast<std::size_t>(element_size(cache.dtype)));
  detail::check_device_alignment("norm.q_weight", args.norm.q_weight.data(), 4);
  detail::check_device_alignment("norm.k_weight", args.norm.k_weight.data(), 4);
  // Host stand-ins; the weights' values are never read by prepare_append beyond their count (the sums it forms are
  // the host's, unused here): stand-ins of the same lengths.
  thread_local std::vector<std::int64_t> zeros, padding;
  thread_local std::vector<float> q_weight, k_weight;
  zeros.assign(static_cast<std::size_t>(p.count * p.axes), 0);
  padding.assign(static_cast<std::size_t>(device_slots.count), -1);
  q_weight.assign(args.norm.q_weight.size(), 0.0f);
  k_weight.assign(args.norm.k_weight.size(), 0.0f);
  AppendArgs host = args;
  host.positions = {zeros.data(), IndexType::I64, p.count, p.axes};
  host.slots = SlotMapping{padding.data(), IndexType::I64, device_slots.count};
  host.norm.q_weight = q_weight;
  host.norm.k_weight = k_weight;
  const std::shared_ptr<const Table>& angles = detail::DeviceAccess::table(gpu);  // a table given: its angles
  const AppendCall call = angles ? prepare_append(detail::DeviceAccess::rope(gpu), host, cache, angles)
                                 : prepare_append(detail::DeviceAccess::rope(gpu), host, cache);
  const detail::AppendJob job = detail::AppendAccess::job(call);

  // The host's shape of that call (views, cache, norm settings), then the device's angles, positions and slots.
  AppendShape shape;
  detail::CudaLanes host_lanes;
  if (!detail::make_cuda_append_shape(job, host_lanes, shape)) throw Error("the append has no CUDA shape");
  detail::DeviceAccess::angles(gpu, shape.rot);
  shape.rot.positions = p.data;
  shape.rot.positions_i64 = p.type == IndexType::I64;
  shape.slots = device_slots.data;
  shape.slots_i64 = device_slots.type == IndexType::I64;
  shape.table = table;
  shape.q_weight = args.norm.q_weight.empty() ? nullptr : args.norm.q_weight.data();
  shape.k_weight = args.norm.k_weight.empty() ? nullptr : args.norm.k_weight.data();
  shape.add_weight_offset = true;
  shape.weight_offset = args.norm.weight_offset;
  detail::DeviceAccess::launch_append(gpu, shape, stream);
}

void shift(const DeviceRope& gpu, const PagedCache& cache, const SlotMapping& slots, std::int64_t delta,
           const Stream& stream) {
  const Rope& rope = detail::DeviceAccess::rope(gpu);
  refuse_table(gpu, "rope", "a K-shift");
  check_turned_entries(rope, cache, slots, "a K-shift");
  const std::int64_t steps = delta < 0 ? -delta : delta;
  if (delta <= -kDevicePositionLimit || delta >= kDevicePositionLimit) {
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
  detail::DeviceAccess::angles(gpu, turn);
  if (turn.turns_hi == nullptr && steps >= turn.table_positions) {
    throw Error(
        fmt::format("delta = {}: past this HfCompat DeviceRope's table of {} positions", delta, turn.table_positions));
  }
  k.num_calls = 1;
  k.slots = slots.data;
  k.slots_i64 = slots.type == IndexType::I64;
  k.entries = slots.count;
  detail::set_cuda_cache(cache, k.cache);
  detail::DeviceAccess::launch_kshift(gpu, k, stream);
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
  detail::check_device_positions(positions);
  if (positions.count != slots.count || positions.axes != b.num_axes) {
    throw Error(fmt::format("positions: count = {}, axes = {}: must be one per slot ({}) in the rope's {} axes",
                            positions.count, positions.axes, slots.count, b.num_axes));
  }
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
    detail::DeviceAccess::angles(*gpus[c], turn);
  }
  k.calls[0].error = k.calls[1].error;  // every report on to's error word
  k.slots = slots.data;
  k.slots_i64 = slots.type == IndexType::I64;
  k.entries = slots.count;
  detail::set_cuda_cache(cache, k.cache);
  detail::DeviceAccess::launch_kshift(to, k, stream);
}

}  // namespace ropekit::cuda
