// src/rope/device_backend.hpp — the entry points of the CUDA backend (src/cuda/), declared by the core so that the
// layers above it — the engine's device fronts (src/device/: DeviceRope, cuda::append, cuda::shift,
// cuda::rerotate) — call the backend without reading it, as backend.hpp does for the CPU's.
//
// Two halves:
//   shapes   the kernels' plain-data shapes (device_shape.hpp) made from the core's prepared calls, the choices a
//            launch makes (access widths, head groups, one launch or several), and the host's runs of the kernel
//            bodies over their whole launch grids — the same bodies a GPU runs, run by the ordinary tests on every
//            machine (tests/cuda_host_test.cpp). No CUDA runtime: built everywhere.
//   runtime  a rope's angles copied to a device, the launches on the caller's stream and the error word: the CUDA
//            runtime's side (src/cuda/runtime.cpp). Without the CUDA backend (ROPEKIT_CUDA=OFF) they say so.
// Internal: it may change with any commit.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "rope/call_shape.hpp"
#include "rope/device_shape.hpp"
#include "ropekit/pair_map.hpp"
#include "ropekit/tensor.hpp"

namespace ropekit::detail {

// The kernel's plain-data shape of a prepared call: angles from its table, or accurate angles on the fly (HfCompat on
// the fly is libm's cos/sin, which a GPU does not reproduce: false, and `out` untouched, for such a job). `lanes`
// holds the pair map's arrays the shape points into.
struct CudaLanes {
  std::vector<std::int32_t> lane_a, lane_b;
  std::vector<std::uint8_t> axis;
};
bool make_cuda_shape(const RotateJob& job, CudaLanes& lanes, cuda::RotateShape& out);
// A view's rows as the kernels address them, and a storage type as they name it.
cuda::View cuda_view_of(const Heads& h);
cuda::Storage cuda_storage_of(DType dtype);
// The shape's views, storage, dimensions, positions and coefficients' magnitude and sign from a prepared call; the
// pair map and the angles left for the caller (the device API points them at its device copies).
void fill_cuda_views(const RotateJob& job, cuda::RotateShape& out);

// What the tests and the GPU benchmark compare of a launch's choices, given explicitly to the shape makers (never
// process state: two threads' calls cannot change each other's shapes). {}: the backend's own choices.
enum class AppendLaunches : int { Choose = 0, One = 1, PerBody = 2 };
struct LaunchChoices {
  // The widest access choose_vector and choose_append_vectors allow (at most cuda::kMaxAccessBytes, 16).
  int max_access_bytes = 16;
  // > 0: the head groups choose_vector gives every rotation shape (at most its heads), in place of
  // cuda::choose_head_groups' choice (groups = heads: one row per thread, its coefficients read per row).
  int head_groups = 0;
  // false: the fused append's element-wise bodies only (no run wider than an element).
  bool append_runs = true;
  // Choose: one launch where the grid is small (choose_append_launch); One / PerBody: always that.
  AppendLaunches launches = AppendLaunches::Choose;
};

// For the rotation kernel (a shape from fill_cuda_views, whose threads turn one pair each): the pairs a thread turns
// and how it reaches their lanes (RotateShape::vector_pairs, adjacent) — the widest accesses of at most
// choices.max_access_bytes that the pair map's runs and every view's rows (address and strides) are aligned to, one
// element per access otherwise — and the head groups for that many threads. The append and K-shift bodies turn one
// pair per thread and take the shape as filled.
void choose_vector(const PairMap& map, cuda::RotateShape& s, const LaunchChoices& choices = {});

// For the fused append's shape (its views, cache and key heads filled): the key rows' runs (AppendShape::
// key_vector_pairs, key_adjacent), the values' and k_nope's copies (value_bytes, nope_bytes) — the widest accesses of
// at most choices.max_access_bytes that the pair map, every row and every cache entry are aligned to, where the cache
// holds the tensor's type (and choices.append_runs); one element otherwise — and the key rows' head groups for that
// many threads.
void choose_append_vectors(const PairMap& map, cuda::AppendShape& a, const LaunchChoices& choices = {});

// Runs the kernel body over every (block, thread) of a launch of `block_dim`-thread blocks covering the job, in
// block order, with the shape choose_vector makes under `choices`; head_groups > 0 then overrides its head groups
// (any count, past the heads too), and vector_bytes, when given, receives the access width run. False when the job
// has no CUDA shape (make_cuda_shape).
bool rotate_on_host_grid(const RotateJob& job, int block_dim = 256, std::int64_t head_groups = 0,
                         const LaunchChoices& choices = {}, int* vector_bytes = nullptr);
// The rotation body over a shape's whole launch grid (every pointer in it host memory).
void run_rotate_on_host(const cuda::RotateShape& shape, int block_dim = 256);

// Whether the fused append runs as one launch (AppendShape::one_launch): where the whole grid — the queries' rotation
// and the append's segments, blocks of block_dim threads — is at most kOneLaunchThreads threads (a decode step's), or
// as choices.launches says. A shape's other fields must be set (the engine's make_cuda_append_shape calls it last).
inline constexpr std::int64_t kOneLaunchThreads = std::int64_t{1} << 16;
void choose_append_launch(cuda::AppendShape& a, const LaunchChoices& choices = {}, int block_dim = 256);

// What cuda::launch_append launches, run on the host: the one launch's grid (shape.one_launch), or the queries'
// rotation grid (when the append rotates them) then the append's grid.
void run_append_on_host(const cuda::AppendShape& shape, int block_dim = 256);

// Runs the K-shift body over its launch grid on the host.
void run_kshift_on_host(const cuda::KShiftShape& shape, int block_dim = 256);

// ---- runtime -------------------------------------------------------------------------------------------------------

// True when this library was built with the CUDA backend; the devices this process sees (0 without the backend, a
// driver or a device).
bool cuda_built();
int cuda_device_count();
// ropekit::Error unless `device` is one this process sees: a build without the backend says so, else the device
// count is named.
void check_cuda_device(int device);

// A rope's angles on one device: its pair map, `rows` table rows (cos then sin, `pairs` float32 values per position),
// the per-pair turns of the accurate angles (null: none — positions past the table are then reported, never
// computed) and a cleared error word. Freed on its device.
class DeviceAngles;
struct DeviceAnglesFree {
  void operator()(DeviceAngles* angles) const noexcept;
};
using DeviceAnglesPtr = std::unique_ptr<DeviceAngles, DeviceAnglesFree>;
// Errors (ropekit::Error): no CUDA backend, `device` outside [0, cuda_device_count()), an allocation or copy that
// fails (the CUDA error named).
DeviceAnglesPtr upload_angles(int device, const PairMap& map, std::int64_t rows, const std::vector<float>& cos,
                              const std::vector<float>& sin, const double* turns_hi, const double* turns_lo);
int device_of(const DeviceAngles& angles);
std::int64_t table_rows(const DeviceAngles& angles);
// Points the shape's pair map, table rows, turns and error word at the device copies.
void point_at(const DeviceAngles& angles, cuda::RotateShape& shape);

// Launches on the angles' device and `stream` (a cudaStream_t; null: the device's legacy default stream), the
// caller's current device restored after; every pointer in the shape a device pointer. Asynchronous: nothing is
// allocated, synchronized or read back (a CUDA graph may capture them). ropekit::Error naming a failed launch.
void launch_rotate(const DeviceAngles& angles, const cuda::RotateShape& shape, void* stream);
void launch_append(const DeviceAngles& angles, const cuda::AppendShape& shape, void* stream);
void launch_kshift(const DeviceAngles& angles, const cuda::KShiftShape& shape, void* stream);
// Waits for `stream`, then reads and clears the error word: 0, or one more than the first token reported since.
std::uint64_t take_error(const DeviceAngles& angles, void* stream);

}  // namespace ropekit::detail
