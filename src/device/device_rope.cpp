// The device API's rope (ropekit/cuda.hpp): a Rope's pair map, table and turns on one device, and rotations of device
// memory on the caller's stream. Each call is checked by the one prepare path with PositionsAt::Device (the host reads
// none of the device's memory) and launched through the CUDA backend's interface; the kernel is the host-verified body
// of rotate_body.hpp. Without the CUDA backend every constructor says so.
#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "device/device_shapes.hpp"
#include "rope/angles.hpp"
#include "rope/backend.hpp"
#include "ropekit/cuda.hpp"
#include "ropekit/error.hpp"

namespace ropekit::cuda {

bool built() { return detail::cuda_built(); }
int device_count() { return detail::cuda_device_count(); }

struct DeviceRope::State {
  Rope rope;                           // the host's copy: its prepare checks each call
  std::shared_ptr<const Table> table;  // the table given (calls prepared with it), or null: the rope's own angles
  detail::DeviceAnglesPtr angles;      // the device copies
};

DeviceRope::DeviceRope(const Rope& rope, int device, std::int64_t table_positions) {
  detail::check_cuda_device(device);
  if (table_positions < 0 || table_positions >= kPositionLimit) {
    throw Error(fmt::format("table_positions = {}: must be in [0, 2^47)", table_positions));
  }
  const AngleMode mode = rope.angle_mode();
  if (mode == AngleMode::HfCompat && table_positions == 0) {
    throw Error(
        "table_positions = 0: a HfCompat Rope's angles (libm's cos/sin of a float32 angle) are not reproduced on a "
        "GPU; give the table every position the calls will use");
  }
  const detail::AngleEvaluator angles(rope.plan().inv_freq, mode);
  // The rows a table of the rope's holds (the CPU backend's angle rows: AngleEvaluator::row's bits, vectorised).
  std::vector<float> cos(std::size_t(table_positions) * std::size_t(rope.pair_map().num_pairs())), sin(cos.size());
  cpu::angle_rows(angles, 0, table_positions, cos.data(), sin.data());
  const bool turns = mode == AngleMode::Accurate;
  state_ = std::make_unique<State>(
      State{Rope(rope.spec(), rope.plan(), rope.angle_mode()), nullptr,
            detail::upload_angles(device, rope.pair_map(), table_positions, cos, sin,
                                  turns ? angles.turns_hi() : nullptr, turns ? angles.turns_lo() : nullptr)});
}

DeviceRope::DeviceRope(const Rope& rope, int device, std::shared_ptr<const Table> table) {
  if (!table) throw Error("table is null");
  if (table->num_positions() < 1) throw Error("table: no rows; a DeviceRope made from a table needs at least one");
  if (table->num_pairs() != rope.pair_map().num_pairs()) {
    throw Error(
        fmt::format("table: {} pairs per row; this rope has {}", table->num_pairs(), rope.pair_map().num_pairs()));
  }
  detail::check_cuda_device(device);
  // The rows as the table holds them, cos then sin: the device table's layout. No turns.
  const std::int64_t rows = table->num_positions();
  const std::size_t pairs = std::size_t(table->num_pairs());
  std::vector<float> cos(std::size_t(rows) * pairs), sin(cos.size());
  for (std::int64_t p = 0; p < rows; ++p) {
    std::copy_n(table->cos_row(p), pairs, cos.data() + std::size_t(p) * pairs);
    std::copy_n(table->sin_row(p), pairs, sin.data() + std::size_t(p) * pairs);
  }
  auto angles = detail::upload_angles(device, rope.pair_map(), rows, cos, sin, nullptr, nullptr);
  state_ = std::make_unique<State>(
      State{Rope(rope.spec(), rope.plan(), rope.angle_mode()), std::move(table), std::move(angles)});
}

DeviceRope::~DeviceRope() = default;
DeviceRope::DeviceRope(DeviceRope&&) noexcept = default;
DeviceRope& DeviceRope::operator=(DeviceRope&&) noexcept = default;

int DeviceRope::device() const { return state_ ? detail::device_of(*state_->angles) : -1; }
std::int64_t DeviceRope::table_positions() const { return state_ ? detail::table_rows(*state_->angles) : 0; }

void DeviceRope::rotate(const RotateArgs& args, const Stream& stream) const {
  detail::DeviceAccess::rotate(*this, args, stream, {});
}

void DeviceRope::check(const Stream& stream) const {
  if (!state_) throw Error("DeviceRope::check: a moved-from DeviceRope");
  const State& s = *state_;
  if (stream.device != device()) {
    throw Error(fmt::format("stream.device = {}: this DeviceRope is on device {}", stream.device, device()));
  }
  const std::uint64_t word = detail::take_error(*s.angles, stream.stream);
  if (word != 0) {
    throw Error(
        fmt::format("token {} of a rotation since the last check: its position is outside [0, 2^47){}; its "
                    "rows were not written",
                    word - 1,
                    s.rope.angle_mode() == AngleMode::HfCompat
                        ? fmt::format(" or past the table's {} positions (HfCompat)", table_positions())
                        : ""));
  }
}

}  // namespace ropekit::cuda

namespace ropekit::detail {

void DeviceAccess::check_stream(const cuda::DeviceRope& gpu, const cuda::Stream& stream) {
  if (stream.device != gpu.device()) {
    throw Error(
        fmt::format("stream.device = {}: this DeviceRope's angles are on device {}", stream.device, gpu.device()));
  }
}

const Rope& DeviceAccess::rope(const cuda::DeviceRope& gpu) {
  if (!gpu.state_) throw Error("a moved-from DeviceRope");
  return gpu.state_->rope;
}
const std::shared_ptr<const Table>& DeviceAccess::table(const cuda::DeviceRope& gpu) {
  if (!gpu.state_) throw Error("a moved-from DeviceRope");
  return gpu.state_->table;
}
const DeviceAngles& DeviceAccess::angles(const cuda::DeviceRope& gpu) {
  if (!gpu.state_) throw Error("a moved-from DeviceRope");
  return *gpu.state_->angles;
}

void DeviceAccess::rotate(const cuda::DeviceRope& gpu, const RotateArgs& args, const cuda::Stream& stream,
                          const LaunchChoices& choices) {
  const DeviceAngles& device = angles(gpu);
  check_stream(gpu, stream);
  cuda::RotateShape shape = device_rotate_shape(rope(gpu), table(gpu), args, choices);
  point_at(device, shape);
  launch_rotate(device, shape, stream.stream);
}

void DeviceAccess::append(const cuda::DeviceRope& gpu, const AppendArgs& args, const PagedCache& cache,
                          const cuda::Stream& stream, const LaunchChoices& choices) {
  const DeviceAngles& device = angles(gpu);
  check_stream(gpu, stream);
  cuda::AppendShape shape = device_append_shape(rope(gpu), table(gpu), args, cache, choices);
  point_at(device, shape.rot);
  launch_append(device, shape, stream.stream);
}

}  // namespace ropekit::detail
