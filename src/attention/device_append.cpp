// ropekit::cuda::append and ropekit::cuda::shift (ropekit/append.hpp): the fused rotate-and-append and the K-shift
// on device memory. The host never reads the
// device's positions or slots: prepare_append checks everything else, with host stand-ins of the same counts (zeros
// for positions, −1 for slots: every token "padding", so no slot is resolved), and the kernel checks the values,
// reporting through the DeviceRope's error word.
#include <fmt/format.h>

#include <utility>
#include <variant>
#include <vector>

#include "attention/attention_internal.hpp"
#include "cuda/device_access.hpp"
#include "cuda/host_grid.hpp"
#include "ropekit/append.hpp"
#include "ropekit/error.hpp"

namespace ropekit::cuda {

void append(const DeviceRope& gpu, const AppendArgs& args, const PagedCache& cache, const Stream& stream) {
  if (!std::holds_alternative<SlotMapping>(args.slots)) {
    throw Error(
        "slots: a page table has no device form yet; give a SlotMapping (vLLM's slot_mapping, one slot per token)");
  }
  const SlotMapping device_slots = std::get<SlotMapping>(args.slots);
  if (device_slots.type != IndexType::I32 && device_slots.type != IndexType::I64) {
    throw Error(fmt::format("slots.type = {}: not an IndexType", static_cast<int>(device_slots.type)));
  }
  if (device_slots.data == nullptr && device_slots.count > 0) throw Error("slots.data is null");
  const Positions& p = args.positions;
  if (p.type != IndexType::I32 && p.type != IndexType::I64) {
    throw Error(fmt::format("positions.type = {}: not an IndexType", static_cast<int>(p.type)));
  }
  if (p.count < 0 || p.axes < 1 || device_slots.count < 0) {
    throw Error(fmt::format("positions: count = {}, axes = {}; slots: count = {}: counts must be >= 0, axes >= 1",
                            p.count, p.axes, device_slots.count));
  }
  if (p.data == nullptr && p.count > 0) throw Error("positions.data is null");
  for (const auto& [field, h] : {std::pair<const char*, const Heads*>{"q.data", &args.q},
                                 {"q_out.data", &args.q_out},
                                 {"k.data", &args.k},
                                 {"k_out.data", &args.k_out},
                                 {"k_nope.data", &args.k_nope},
                                 {"v.data", &args.v}}) {
    detail::check_device_alignment(field, h->data, static_cast<std::size_t>(element_size(h->dtype)));
  }
  detail::check_device_alignment("positions.data", p.data, p.type == IndexType::I64 ? 8 : 4);
  detail::check_device_alignment("slots.data", device_slots.data, device_slots.type == IndexType::I64 ? 8 : 4);
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
  const AppendCall call = prepare_append(detail::DeviceAccess::rope(gpu), host, cache);
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
  shape.q_weight = args.norm.q_weight.empty() ? nullptr : args.norm.q_weight.data();
  shape.k_weight = args.norm.k_weight.empty() ? nullptr : args.norm.k_weight.data();
  shape.add_weight_offset = true;
  shape.weight_offset = args.norm.weight_offset;
  detail::DeviceAccess::launch_append(gpu, shape, stream);
}

void shift(const DeviceRope& gpu, const PagedCache& cache, const SlotMapping& slots, std::int64_t delta,
           const Stream& stream) {
  const Rope& rope = detail::DeviceAccess::rope(gpu);
  cache.validate();
  if (cache.k == nullptr) throw Error("cache.k is null: a K-shift turns the cache's keys");
  if (cache.head_dim != rope.spec().head_dim) {
    throw Error(fmt::format("cache.head_dim = {}: the K-shift turns whole key entries of the rope's head_dim = {}",
                            cache.head_dim, rope.spec().head_dim));
  }
  if (slots.type != IndexType::I32 && slots.type != IndexType::I64) {
    throw Error(fmt::format("slots.type = {}: not an IndexType", static_cast<int>(slots.type)));
  }
  if (slots.count < 0) throw Error(fmt::format("slots.count = {}: must be >= 0", slots.count));
  if (slots.data == nullptr && slots.count > 0) throw Error("slots.data is null");
  detail::check_device_alignment("slots.data", slots.data, slots.type == IndexType::I64 ? 8 : 4);
  detail::check_device_alignment("cache.k", cache.k, static_cast<std::size_t>(element_size(cache.dtype)));
  const std::int64_t steps = delta < 0 ? -delta : delta;
  if (delta <= -kDevicePositionLimit || delta >= kDevicePositionLimit) {
    throw Error(fmt::format("delta = {}: |delta| must be below 2^47", delta));
  }
  if (delta == 0 || slots.count == 0) return;
  KShiftShape k;
  RotateShape& turn = k.calls[0];
  const PairMap& map = rope.pair_map();
  turn.pairs = map.num_pairs();
  turn.rotary_dim = map.rotary_dim;
  turn.head_dim = map.head_dim;
  turn.tokens = slots.count;
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

}  // namespace ropekit::cuda
