// The CUDA backend's runtime side (rope/device_backend.hpp): a rope's angles copied to a device, the launches on the
// caller's stream, the error word. The only source that calls the CUDA runtime; without the backend every entry says
// so (or sees no device).
#include <fmt/format.h>

#include <cstdint>
#include <string_view>
#include <utility>
#include <vector>

#include "rope/device_backend.hpp"
#include "ropekit/error.hpp"

#if ROPEKIT_HAVE_CUDA
#include <cuda_runtime.h>

#include "cuda/rotate_kernel.hpp"
#endif

namespace ropekit::detail {

#if ROPEKIT_HAVE_CUDA
namespace {

void check_cuda(cudaError_t status, std::string_view what) {
  if (status != cudaSuccess) {
    throw Error(fmt::format("{}: {} ({})", what, cudaGetErrorName(status), cudaGetErrorString(status)));
  }
}

// `device` current for the scope; the caller's current device restored after (the backend never leaves it changed).
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
  DeviceBuffer(const void* host, std::size_t bytes, std::string_view what) {
    if (bytes == 0) return;
    check_cuda(cudaMalloc(&data_, bytes), fmt::format("cudaMalloc of {} bytes for {}", bytes, what));
    const cudaError_t status =
        host != nullptr ? cudaMemcpy(data_, host, bytes, cudaMemcpyHostToDevice) : cudaMemset(data_, 0, bytes);
    if (status != cudaSuccess) {
      cudaFree(data_);
      data_ = nullptr;
      check_cuda(status, fmt::format("copying {} to the device", what));
    }
  }
  ~DeviceBuffer() { cudaFree(data_); }
  DeviceBuffer(DeviceBuffer&& o) noexcept : data_(std::exchange(o.data_, nullptr)) {}
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
    std::swap(data_, o.data_);
    return *this;
  }
  template <class T>
  T* as() const {
    return static_cast<T*>(data_);
  }

 private:
  void* data_ = nullptr;
};

}  // namespace

class DeviceAngles {
 public:
  DeviceAngles(int device, std::int64_t rows) : device(device), rows(rows) {}
  int device;
  std::int64_t rows;
  DeviceBuffer lane_a, lane_b, axis, cos, sin, turns_hi, turns_lo, error;
};

bool cuda_built() { return true; }

int cuda_device_count() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess ? n : 0;
}

void check_cuda_device(int device) {
  const int devices = cuda_device_count();
  if (device < 0 || device >= devices) {
    throw Error(
        fmt::format("device = {}: this process sees {} CUDA device{}", device, devices, devices == 1 ? "" : "s"));
  }
}

DeviceAnglesPtr upload_angles(int device, const PairMap& map, std::int64_t rows, const std::vector<float>& cos,
                              const std::vector<float>& sin, const double* turns_hi, const double* turns_lo) {
  check_cuda_device(device);
  const std::vector<std::int32_t> a(map.lane_a.begin(), map.lane_a.end()), b(map.lane_b.begin(), map.lane_b.end());
  const std::vector<std::uint8_t> axes(map.axis.begin(), map.axis.end());
  const std::size_t pairs = std::size_t(map.num_pairs());
  const DeviceGuard guard(device);
  DeviceAnglesPtr d(new DeviceAngles(device, rows));
  d->lane_a = DeviceBuffer(a.data(), a.size() * 4, "the pair map");
  d->lane_b = DeviceBuffer(b.data(), b.size() * 4, "the pair map");
  d->axis = DeviceBuffer(axes.data(), axes.size(), "the pair map");
  d->cos = DeviceBuffer(cos.data(), cos.size() * 4, "the cos table");
  d->sin = DeviceBuffer(sin.data(), sin.size() * 4, "the sin table");
  if (turns_hi != nullptr) {
    d->turns_hi = DeviceBuffer(turns_hi, pairs * 8, "the turns");
    d->turns_lo = DeviceBuffer(turns_lo, pairs * 8, "the turns");
  }
  d->error = DeviceBuffer(nullptr, 8, "the error word");
  return d;
}

void DeviceAnglesFree::operator()(DeviceAngles* angles) const noexcept {
  if (angles == nullptr) return;
  // Freed on the device they were allocated on.
  int previous = 0;
  const bool switched = cudaGetDevice(&previous) == cudaSuccess && cudaSetDevice(angles->device) == cudaSuccess;
  delete angles;
  if (switched) cudaSetDevice(previous);
}

int device_of(const DeviceAngles& angles) { return angles.device; }
std::int64_t table_rows(const DeviceAngles& angles) { return angles.rows; }

void point_at(const DeviceAngles& d, cuda::RotateShape& shape) {
  shape.lane_a = d.lane_a.as<const std::int32_t>();
  shape.lane_b = d.lane_b.as<const std::int32_t>();
  shape.axis = d.axis.as<const std::uint8_t>();
  shape.cos = d.rows > 0 ? d.cos.as<const float>() : nullptr;
  shape.sin = d.rows > 0 ? d.sin.as<const float>() : nullptr;
  shape.table_positions = d.rows;
  shape.turns_hi = d.turns_hi.as<const double>();
  shape.turns_lo = d.turns_lo.as<const double>();
  shape.error = d.error.as<unsigned long long>();
}

namespace {
template <class Launch>
void launch_on(const DeviceAngles& d, std::string_view what, Launch&& launch) {
  const DeviceGuard guard(d.device);
  check_cuda(static_cast<cudaError_t>(launch()), fmt::format("launching the {}", what));
}
}  // namespace

void launch_rotate(const DeviceAngles& d, const cuda::RotateShape& shape, void* stream) {
  launch_on(d, "rotation", [&] { return cuda::launch_rotate(shape, stream); });
}
void launch_append(const DeviceAngles& d, const cuda::AppendShape& shape, void* stream) {
  launch_on(d, "append", [&] { return cuda::launch_append(shape, stream); });
}
void launch_kshift(const DeviceAngles& d, const cuda::KShiftShape& shape, void* stream) {
  launch_on(d, "K-shift", [&] { return cuda::launch_kshift(shape, stream); });
}

std::uint64_t take_error(const DeviceAngles& d, void* stream) {
  const DeviceGuard guard(d.device);
  check_cuda(cudaStreamSynchronize(static_cast<cudaStream_t>(stream)), "waiting for the stream");
  unsigned long long word = 0;
  check_cuda(cudaMemcpy(&word, d.error.as<void>(), 8, cudaMemcpyDeviceToHost), "reading the error word");
  if (word != 0) check_cuda(cudaMemset(d.error.as<void>(), 0, 8), "clearing the error word");
  return word;
}

#else  // no CUDA backend: nothing can be uploaded, so nothing else is ever reached with angles

class DeviceAngles {};

bool cuda_built() { return false; }
int cuda_device_count() { return 0; }

void check_cuda_device(int) {
  throw Error("ropekit::cuda::DeviceRope: this ropekit was built without the CUDA backend (ROPEKIT_CUDA=OFF)");
}
DeviceAnglesPtr upload_angles(int device, const PairMap&, std::int64_t, const std::vector<float>&,
                              const std::vector<float>&, const double*, const double*) {
  check_cuda_device(device);
  return nullptr;
}
void DeviceAnglesFree::operator()(DeviceAngles* angles) const noexcept { delete angles; }
int device_of(const DeviceAngles&) { return -1; }
std::int64_t table_rows(const DeviceAngles&) { return 0; }
void point_at(const DeviceAngles&, cuda::RotateShape&) {}
void launch_rotate(const DeviceAngles&, const cuda::RotateShape&, void*) {}
void launch_append(const DeviceAngles&, const cuda::AppendShape&, void*) {}
void launch_kshift(const DeviceAngles&, const cuda::KShiftShape&, void*) {}
std::uint64_t take_error(const DeviceAngles&, void*) { return 0; }

#endif

}  // namespace ropekit::detail
