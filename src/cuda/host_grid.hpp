// src/cuda/host_grid.hpp — the CUDA kernels' bodies run by the host over their whole launch grids, and the shapes
// they take made from the core's prepared calls. The engine's calls (the fused append, the K-shift: PagedCache,
// AppendArgs) are turned into these shapes by the engine (src/attention/device_shapes.hpp): the core reads no engine
// type.
//
// The ordinary test suite calls this on every machine (no GPU or CUDA toolkit needed): the same per-thread body a
// GPU runs (src/cuda/rotate_body.hpp), every (block, thread) of the launch, against the scalar reference bit for bit
// (tests/cuda_host_test.cpp). Internal.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "cuda/append_body.hpp"
#include "cuda/kshift_body.hpp"
#include "cuda/rotate_body.hpp"
#include "rope/call_shape.hpp"

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

// The widest access choose_vector allows by default (kMaxAccessBytes); the GPU benchmark sets it to compare widths.
int cuda_max_access_bytes();
void set_cuda_max_access_bytes(int bytes);
// The head groups choose_vector gives every rotation shape (at most the shape's heads), in place of
// cuda::choose_head_groups' choice; 0 (the default): choose. The GPU benchmark sets it to compare a token's rows per
// thread (groups = heads: one row per thread, its coefficients read per row).
void set_cuda_head_groups(int groups);
// For the rotation kernel (a shape from fill_cuda_views, whose threads turn one pair each): the pairs a thread turns
// and how it reaches their lanes (RotateShape::vector_pairs, adjacent) — the widest accesses of at most max_bytes
// (and kMaxAccessBytes) that the pair map's runs and every view's rows (address and strides) are aligned to, one
// element per access otherwise — and the head groups for that many threads. The append and K-shift bodies turn one
// pair per thread and take the shape as filled.
void choose_vector(const PairMap& map, cuda::RotateShape& s, int max_bytes = cuda_max_access_bytes());

// For the fused append's shape (its views, cache and key heads filled): the key rows' runs (AppendShape::
// key_vector_pairs, key_adjacent), the values' and k_nope's copies (value_bytes, nope_bytes) — the widest accesses of
// at most max_bytes that the pair map, every row and every cache entry are aligned to, where the cache holds the
// tensor's type; one element otherwise — and the key rows' head groups for that many threads.
void choose_append_vectors(const PairMap& map, cuda::AppendShape& a, int max_bytes = cuda_max_access_bytes());
// Whether choose_append_vectors may choose runs wider than an element (default true); the tests and the GPU
// benchmark clear it to run the element-wise bodies beside the wide ones.
void set_cuda_append_runs(bool wide);

// Runs the kernel body over every (block, thread) of a launch of `block_dim`-thread blocks covering the job, in
// block order; head_groups > 0 overrides the launch's choice (cuda::choose_head_groups), max_access_bytes > 0 the
// widest access (choose_vector), and vector_bytes, when given, receives the access width run. False when the job has
// no CUDA shape (make_cuda_shape).
bool rotate_on_host_grid(const RotateJob& job, int block_dim = 256, std::int64_t head_groups = 0,
                         int max_access_bytes = 0, int* vector_bytes = nullptr);

// Whether the fused append runs as one launch (AppendShape::one_launch): where the whole grid — the queries' rotation
// and the append's segments, blocks of block_dim threads — is at most kOneLaunchThreads threads (a decode step's), or
// as the mode set below says. A shape's other fields must be set (the engine's make_cuda_append_shape calls it last).
inline constexpr std::int64_t kOneLaunchThreads = std::int64_t{1} << 16;
void choose_append_launch(cuda::AppendShape& a, int block_dim = 256);
// 0 (the default): choose by the grid's size; 1: every append in one launch; 2: every append in a launch per body.
// The tests run each shape both ways, the GPU benchmark times both.
enum class AppendLaunches : int { Choose = 0, One = 1, PerBody = 2 };
void set_cuda_append_launches(AppendLaunches mode);

// What cuda::launch_append launches, run on the host: the one launch's grid (shape.one_launch), or the queries'
// rotation grid (when the append rotates them) then the append's grid.
void run_append_on_host(const cuda::AppendShape& shape, int block_dim = 256);

// Runs the K-shift body over its launch grid on the host.
void run_kshift_on_host(const cuda::KShiftShape& shape, int block_dim = 256);

}  // namespace ropekit::detail
