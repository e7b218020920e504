// src/device/device_shapes.hpp — the device fronts (ropekit/cuda.hpp) as the engine builds them: every device call is
// validated and resolved by the one prepare path with PositionsAt::Device (the views, counts and pointers checked on
// the host, the positions' and slots' values left to the kernel), then turned into the kernels' plain-data shapes
// (rope/device_shape.hpp) and launched through the CUDA backend's interface (rope/device_backend.hpp). The engine
// reads no backend folder: the shapes and the interface are the core's.
//
// The shape makers are also what the host tests run (tests/cuda_host_test.cpp): a device call's shape, its angles
// pointed at host copies, run over its whole launch grid by the host — the device path's checks and bits proven on
// every machine. Internal.
#pragma once

#include <cstdint>
#include <memory>
#include <span>

#include "attention/attention_internal.hpp"
#include "rope/device_backend.hpp"
#include "ropekit/cuda.hpp"

namespace ropekit::detail {

// The cache's geometry, type and scales as the kernel shapes hold them.
void set_cuda_cache(const PagedCache& cache, cuda::AppendShape& out);

// The fused append's kernel shape of a resolved append (AppendAccess::job): false for HfCompat angles on the fly, as
// for the rotation (make_cuda_shape). `lanes` holds the pair map's arrays the shape points into.
bool make_cuda_append_shape(const AppendJob& job, CudaLanes& lanes, cuda::AppendShape& out,
                            const LaunchChoices& choices = {});

// Runs the append body over every (block, thread) of its launch grid, in block order: what AppendCall::run writes.
// pair_groups > 0 overrides the launch's choice of head groups for the pair rows.
bool append_on_host_grid(const AppendJob& job, int block_dim = 256, std::int64_t pair_groups = 0,
                         const LaunchChoices& choices = {});

// The K-shift's kernel shape: the key entries at `slots` of `cache` turned by `calls` in order (one: a K-shift, R(δ)
// with magnitude 1; two: a re-rotation's un-rotate and rotate), entry i being token i of each call. `lanes` holds
// the pair map (the calls share it). False for HfCompat angles on the fly.
bool make_cuda_kshift_shape(std::span<const RotateJob* const> calls, const PagedCache& cache,
                            std::span<const std::int64_t> slots, CudaLanes& lanes, cuda::KShiftShape& out);

// Runs the K-shift body over its launch grid on the host.
bool kshift_on_host_grid(std::span<const RotateJob* const> calls, const PagedCache& cache,
                         std::span<const std::int64_t> slots, int block_dim = 256);

// ---- the device calls, before their launch
// ---------------------------------------------------------------------------

// DeviceRope::rotate's shape: args validated with PositionsAt::Device (as Rope::prepare(args) or, given `table`,
// Rope::prepare(args, table) checks them, the positions' values excepted) and resolved into the rotation kernel's
// shape — views, positions, magnitude and sign, access widths and head groups. The pair map, table rows, turns and
// error word are left null: the launch points them at a DeviceRope's copies (point_at), a host test at its own.
cuda::RotateShape device_rotate_shape(const Rope& rope, const std::shared_ptr<const Table>& table,
                                      const RotateArgs& args, const LaunchChoices& choices = {});

// cuda::append's shape likewise: everything prepare_append checks but the values of the positions, the slots (a slot
// mapping or a page table, read by the kernel: table_slot) and the QK-norm weights (weight_offset added on the
// device); the angles left null as above.
cuda::AppendShape device_append_shape(const Rope& rope, const std::shared_ptr<const Table>& table,
                                      const AppendArgs& args, const PagedCache& cache,
                                      const LaunchChoices& choices = {});

// What a DeviceRope holds, for the device calls: its host Rope (whose prepare checks each call), the table it was
// made from (null: the rope's own angles) and its device copies.
struct DeviceAccess {
  static const Rope& rope(const cuda::DeviceRope& gpu);
  static const std::shared_ptr<const Table>& table(const cuda::DeviceRope& gpu);
  static const DeviceAngles& angles(const cuda::DeviceRope& gpu);
  // ropekit::Error unless `stream` is on gpu's device (a call never guesses the device from a pointer).
  static void check_stream(const cuda::DeviceRope& gpu, const cuda::Stream& stream);
  // DeviceRope::rotate and cuda::append with launch choices other than the backend's own (the GPU benchmark's
  // comparisons, the device tests' one-launch and per-body appends).
  static void rotate(const cuda::DeviceRope& gpu, const RotateArgs& args, const cuda::Stream& stream,
                     const LaunchChoices& choices);
  static void append(const cuda::DeviceRope& gpu, const AppendArgs& args, const PagedCache& cache,
                     const cuda::Stream& stream, const LaunchChoices& choices);
};

}  // namespace ropekit::detail
