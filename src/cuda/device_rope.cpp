// The device API (ropekit/cuda.hpp): a Rope's pair map, table and turns on one device, and rotations of device
// memory on the caller's stream. The views are checked by the core's own prepare (with host positions of the same
// count standing in for the device's, which the host never reads); the kernel is the host-verified body of
// rotate_body.hpp. Without the CUDA backend every entry point says so.
#include "ropekit/cuda.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string_view>
#include <utility>
#include <vector>

#include "cuda/device_access.hpp"
#include "cuda/host_grid.hpp"
#include "rope/angles.hpp"
#include "ropekit/error.hpp"

#if ROPEKIT_HAVE_CUDA
#include <cuda_runtime.h>

#include "cuda/rotate_kernel.hpp"
#endif

namespace ropekit::cuda {

#if ROPEKIT_HAVE_CUDA
namespace {

void check_cuda(cudaError_t status, std::string_view what) {
  if (status != cudaSuccess) {
    throw Error(fmt::format("{}: {} ({})", what, cudaGetErrorName(status), cudaGetErrorString(status)));
  }
}

// `device` current for the scope; the caller's current device restored after (the API never leaves it changed).
class DeviceGuard {
 public:
  explicit DeviceGuard(int device) {
    check_cuda(cudaGetDevice(&previous_), "cudaGetDevice");
    if (previous_ != device) check_cuda(cudaSetDevice(device), fmt::format("cudaSetDevice({})", device));
  }
  ~DeviceGuard() { cudaSetDevice(previous_); }
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_ = 0;
};

// Device memory holding a copy of host data (or zeros).
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  DeviceBuffer(const void* host, std::size_t bytes, std::string_view what) : bytes_(bytes) {
    if (bytes == 0) return;
    check_cuda(cudaMalloc(&data_, bytes), fmt::format("cudaMalloc of {} bytes for {}", bytes, what));
    const cudaError_t status =
        host != nullptr ? cudaMemcpy(data_, host, bytes, cudaMemcpyHostToDevice) : cudaMemset(data_, 0, bytes);
    if (status != cudaSuccess) {
      cudaFree(data_);
      check_cuda(status, fmt::format("copying {} to the device", what));
    }
  }
  ~DeviceBuffer() { cudaFree(data_); }
  DeviceBuffer(DeviceBuffer&& o) noexcept : data_(o.data_), bytes_(o.bytes_) { o.data_ = nullptr; }
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
    std::swap(data_, o.data_);
    std::swap(bytes_, o.bytes_);
    return *this;
  }
  template <class T>
  T* as() const {
    return static_cast<T*>(data_);
  }

 private:
  void* data_ = nullptr;
  std::size_t bytes_ = 0;
};

}  // namespace

bool built() { return true; }

int device_count() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess ? n : 0;
}
#else
bool built() { return false; }
int device_count() { return 0; }
#endif

struct DeviceRope::State {
  Rope rope;  // the host's copy: its prepare checks each call's views
  int device = 0;
  std::int64_t table_positions = 0;
  int pairs = 0;
  std::shared_ptr<const Table> table;  // the table given (calls prepared with it), or null: the rope's own angles
#if ROPEKIT_HAVE_CUDA
  DeviceBuffer lane_a, lane_b, axis, cos, sin, turns_hi, turns_lo, error;

  // Uploads to `device` rope's pair map, `rows` table rows (cos then sin: `pairs` values per position), the turns
  // (null: none — positions past the table are then reported, never computed) and a cleared error word.
  State(const Rope& r, int device_, std::int64_t rows, const std::vector<float>& cos_rows,
        const std::vector<float>& sin_rows, const double* hi, const double* lo, std::shared_ptr<const Table> given)
      : rope(r.spec(), r.plan(), r.angle_mode()),
        device(device_),
        table_positions(rows),
        pairs(r.pair_map().num_pairs()),
        table(std::move(given)) {
    const int devices = device_count();
    if (device < 0 || device >= devices) {
      throw Error(
          fmt::format("device = {}: this process sees {} CUDA device{}", device, devices, devices == 1 ? "" : "s"));
    }
    const PairMap& map = r.pair_map();
    const std::vector<std::int32_t> a(map.lane_a.begin(), map.lane_a.end()), b(map.lane_b.begin(), map.lane_b.end());
    const std::vector<std::uint8_t> axes(map.axis.begin(), map.axis.end());
    const DeviceGuard guard(device);
    lane_a = DeviceBuffer(a.data(), a.size() * 4, "the pair map");
    lane_b = DeviceBuffer(b.data(), b.size() * 4, "the pair map");
    axis = DeviceBuffer(axes.data(), axes.size(), "the pair map");
    cos = DeviceBuffer(cos_rows.data(), cos_rows.size() * 4, "the cos table");
    sin = DeviceBuffer(sin_rows.data(), sin_rows.size() * 4, "the sin table");
    if (hi != nullptr) {
      turns_hi = DeviceBuffer(hi, std::size_t(pairs) * 8, "the turns");
      turns_lo = DeviceBuffer(lo, std::size_t(pairs) * 8, "the turns");
    }
    error = DeviceBuffer(nullptr, 8, "the error word");
  }
#endif
};

DeviceRope::DeviceRope(const Rope& rope, int device, std::int64_t table_positions) {
#if ROPEKIT_HAVE_CUDA
  if (table_positions < 0 || table_positions >= kDevicePositionLimit) {
    throw Error(fmt::format("table_positions = {}: must be in [0, 2^47)", table_positions));
  }
  const AngleMode mode = rope.angle_mode();
  if (mode == AngleMode::HfCompat && table_positions == 0) {
    throw Error(
        "table_positions = 0: a HfCompat Rope's angles (libm's cos/sin of a float32 angle) are not reproduced on a "
        "GPU; give the table every position the calls will use");
  }
  const std::size_t pairs = std::size_t(rope.pair_map().num_pairs());
  const detail::AngleEvaluator angles(rope.plan().inv_freq, mode);
  std::vector<float> cos(std::size_t(table_positions) * pairs), sin(cos.size());
  for (std::int64_t p = 0; p < table_positions; ++p) {
    angles.row(p, cos.data() + std::size_t(p) * pairs, sin.data() + std::size_t(p) * pairs);
  }
  const bool turns = mode == AngleMode::Accurate;
  state_ = std::make_unique<State>(rope, device, table_positions, cos, sin, turns ? angles.turns_hi() : nullptr,
                                   turns ? angles.turns_lo() : nullptr, nullptr);
#else
  (void)rope;
  (void)device;
  (void)table_positions;
  throw Error("ropekit::cuda::DeviceRope: this ropekit was built without the CUDA backend (ROPEKIT_CUDA=OFF)");
#endif
}

DeviceRope::DeviceRope(const Rope& rope, int device, std::shared_ptr<const Table> table) {
  if (!table) throw Error("table is null");
  if (table->num_positions() < 1) throw Error("table: no rows; a DeviceRope made from a table needs at least one");
  if (table->num_pairs() != rope.pair_map().num_pairs()) {
    throw Error(
        fmt::format("table: {} pairs per row; this rope has {}", table->num_pairs(), rope.pair_map().num_pairs()));
  }
#if ROPEKIT_HAVE_CUDA
  // The rows as the table holds them, cos then sin: the device table's layout. No turns.
  const std::int64_t rows = table->num_positions();
  const std::size_t pairs = std::size_t(table->num_pairs());
  std::vector<float> cos(std::size_t(rows) * pairs), sin(cos.size());
  for (std::int64_t p = 0; p < rows; ++p) {
    std::copy_n(table->cos_row(p), pairs, cos.data() + std::size_t(p) * pairs);
    std::copy_n(table->sin_row(p), pairs, sin.data() + std::size_t(p) * pairs);
  }
  state_ = std::make_unique<State>(rope, device, rows, cos, sin, nullptr, nullptr, std::move(table));
#else
  (void)device;
  throw Error("ropekit::cuda::DeviceRope: this ropekit was built without the CUDA backend (ROPEKIT_CUDA=OFF)");
#endif
}

DeviceRope::~DeviceRope() {
#if ROPEKIT_HAVE_CUDA
  if (state_) {
    // Freed on the device they were allocated on.
    int previous = 0;
    if (cudaGetDevice(&previous) == cudaSuccess) {
      cudaSetDevice(state_->device);
      state_.reset();
      cudaSetDevice(previous);
    }
  }
#endif
}
DeviceRope::DeviceRope(DeviceRope&&) noexcept = default;
DeviceRope& DeviceRope::operator=(DeviceRope&&) noexcept = default;

int DeviceRope::device() const { return state_ ? state_->device : -1; }
std::int64_t DeviceRope::table_positions() const { return state_ ? state_->table_positions : 0; }

void DeviceRope::rotate(const RotateArgs& args, const Stream& stream) const {
  if (!state_) throw Error("DeviceRope::rotate: a moved-from DeviceRope");
  const State& s = *state_;
  if (stream.device != s.device) {
    throw Error(fmt::format("stream.device = {}: this DeviceRope's angles are on device {}", stream.device, s.device));
  }
  detail::check_device_positions(args.positions);
  detail::check_device_alignment("q.data", args.q.data, static_cast<std::size_t>(element_size(args.q.dtype)));
  detail::check_device_alignment("q_out.data", args.q_out.data,
                                 static_cast<std::size_t>(element_size(args.q_out.dtype)));
  detail::check_device_alignment("k.data", args.k.data, static_cast<std::size_t>(element_size(args.k.dtype)));
  detail::check_device_alignment("k_out.data", args.k_out.data,
                                 static_cast<std::size_t>(element_size(args.k_out.dtype)));
  // The views checked by the core's prepare, with host zeros standing in for the device's positions (same count and
  // streams): shapes, strides, dtypes, overlaps and counts are refused exactly as Rope::apply refuses them.
  thread_local std::vector<std::int64_t> zeros;
  zeros.assign(std::size_t(args.positions.count * args.positions.axes), 0);
  RotateArgs host = args;
  host.positions = {zeros.data(), IndexType::I64, args.positions.count, args.positions.axes};
  const RotateCall call = s.table ? s.rope.prepare(host, s.table) : s.rope.prepare(host);
  RotateShape shape;
  detail::fill_cuda_views(call.job(), shape);
  detail::choose_vector(*call.job().map, shape);
  shape.positions = args.positions.data;
  shape.positions_i64 = args.positions.type == IndexType::I64;
  detail::DeviceAccess::angles(*this, shape);
#if ROPEKIT_HAVE_CUDA
  const DeviceGuard guard(s.device);
  check_cuda(static_cast<cudaError_t>(launch_rotate(shape, stream.stream)), "launching the rotation");
#endif
}

void DeviceRope::check(const Stream& stream) const {
  if (!state_) throw Error("DeviceRope::check: a moved-from DeviceRope");
#if ROPEKIT_HAVE_CUDA
  const State& s = *state_;
  if (stream.device != s.device) {
    throw Error(fmt::format("stream.device = {}: this DeviceRope is on device {}", stream.device, s.device));
  }
  const DeviceGuard guard(s.device);
  check_cuda(cudaStreamSynchronize(static_cast<cudaStream_t>(stream.stream)), "waiting for the stream");
  unsigned long long word = 0;
  check_cuda(cudaMemcpy(&word, s.error.as<void>(), 8, cudaMemcpyDeviceToHost), "reading the error word");
  if (word != 0) {
    check_cuda(cudaMemset(s.error.as<void>(), 0, 8), "clearing the error word");
    throw Error(
        fmt::format("token {} of a rotation since the last check: its position is outside [0, 2^47){}; its "
                    "rows were not written",
                    word - 1,
                    s.rope.angle_mode() == AngleMode::HfCompat
                        ? fmt::format(" or past the table's {} positions (HfCompat)", s.table_positions)
                        : ""));
  }
#else
  (void)stream;
#endif
}

}  // namespace ropekit::cuda

namespace ropekit::detail {

const Rope& DeviceAccess::rope(const cuda::DeviceRope& gpu) {
  if (!gpu.state_) throw Error("a moved-from DeviceRope");
  return gpu.state_->rope;
}

void DeviceAccess::angles(const cuda::DeviceRope& gpu, cuda::RotateShape& shape) {
  if (!gpu.state_) throw Error("a moved-from DeviceRope");
#if ROPEKIT_HAVE_CUDA
  const cuda::DeviceRope::State& s = *gpu.state_;
  shape.lane_a = s.lane_a.as<const std::int32_t>();
  shape.lane_b = s.lane_b.as<const std::int32_t>();
  shape.axis = s.axis.as<const std::uint8_t>();
  shape.cos = s.table_positions > 0 ? s.cos.as<const float>() : nullptr;
  shape.sin = s.table_positions > 0 ? s.sin.as<const float>() : nullptr;
  shape.table_positions = s.table_positions;
  shape.turns_hi = s.turns_hi.as<const double>();
  shape.turns_lo = s.turns_lo.as<const double>();
  shape.error = s.error.as<unsigned long long>();
#else
  (void)shape;
#endif
}

namespace {

// A kernel launched on `device` and the caller's stream (which must be on that device).
template <class Launch>
void launch_on(const cuda::Stream& stream, std::string_view what, int device, Launch&& launch) {
  if (stream.device != device) {
    throw Error(fmt::format("stream.device = {}: this DeviceRope's angles are on device {}", stream.device, device));
  }
#if ROPEKIT_HAVE_CUDA
  const cuda::DeviceGuard guard(device);
  cuda::check_cuda(static_cast<cudaError_t>(launch(stream.stream)), fmt::format("launching the {}", what));
#else
  (void)what;
  (void)launch;
#endif
}

}  // namespace

void DeviceAccess::launch_append(const cuda::DeviceRope& gpu, const cuda::AppendShape& shape,
                                 const cuda::Stream& stream) {
  if (!gpu.state_) throw Error("a moved-from DeviceRope");
  launch_on(stream, "append", gpu.state_->device, [&](void* s) {
#if ROPEKIT_HAVE_CUDA
    return cuda::launch_append(shape, s);
#else
    return (void)shape, (void)s, 0;
#endif
  });
}

void DeviceAccess::launch_kshift(const cuda::DeviceRope& gpu, const cuda::KShiftShape& shape,
                                 const cuda::Stream& stream) {
  if (!gpu.state_) throw Error("a moved-from DeviceRope");
  launch_on(stream, "K-shift", gpu.state_->device, [&](void* s) {
#if ROPEKIT_HAVE_CUDA
    return cuda::launch_kshift(shape, s);
#else
    return (void)shape, (void)s, 0;
#endif
  });
}

std::int64_t DeviceAccess::table_positions(const cuda::DeviceRope& gpu) { return gpu.table_positions(); }

const std::shared_ptr<const Table>& DeviceAccess::table(const cuda::DeviceRope& gpu) {
  if (!gpu.state_) throw Error("a moved-from DeviceRope");
  return gpu.state_->table;
}

void check_device_positions(const Positions& p) {
  if (p.type != IndexType::I32 && p.type != IndexType::I64) {
    throw Error(fmt::format("positions.type = {}: not an IndexType", static_cast<int>(p.type)));
  }
  if (p.count < 0 || p.axes < 1) {
    throw Error(fmt::format("positions: count = {}, axes = {}: must be >= 0 and >= 1", p.count, p.axes));
  }
  if (p.data == nullptr && p.count > 0) throw Error("positions.data is null");
  check_device_alignment("positions.data", p.data, p.type == IndexType::I64 ? 8 : 4);
}

void check_device_alignment(const char* field, const void* p, std::size_t align) {
  if (p != nullptr && reinterpret_cast<std::uintptr_t>(p) % align != 0) {
    throw Error(
        fmt::format("{} = {}: a device pointer must be aligned to its element size ({} bytes)", field, p, align));
  }
}

}  // namespace ropekit::detail
