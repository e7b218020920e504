// src/attention/device_shapes.hpp — the engine's calls as the CUDA kernels take them: a resolved fused append
// (AppendAccess::job) and a K-shift or re-rotation of a paged cache's entries, turned into the kernels' plain-data
// shapes (src/cuda/), and their host runs over the whole launch grid for the tests. The core's CUDA backend knows
// no engine type (PagedCache, AppendArgs); this is where they become its shapes. Internal.
#pragma once

#include <cstdint>
#include <span>

#include "attention/attention_internal.hpp"
#include "cuda/host_grid.hpp"
#include "ropekit/append.hpp"

namespace ropekit::detail {

// The cache's geometry, type and scales as the kernel shapes hold them.
void set_cuda_cache(const PagedCache& cache, cuda::AppendShape& out);

// The fused append's kernel shape of a resolved append: false for HfCompat angles on the fly, as for the rotation
// (make_cuda_shape). `lanes` holds the pair map's arrays the shape points into.
bool make_cuda_append_shape(const AppendJob& job, CudaLanes& lanes, cuda::AppendShape& out);

// Runs the append body over every (block, thread) of its launch grid, in block order: what AppendCall::run writes.
// pair_groups > 0 overrides the launch's choice of head groups for the pair rows.
bool append_on_host_grid(const AppendJob& job, int block_dim = 256, std::int64_t pair_groups = 0);

// The K-shift's kernel shape: the key entries at `slots` of `cache` turned by `calls` in order (one: a K-shift, R(δ)
// with magnitude 1; two: a re-rotation's un-rotate and rotate), entry i being token i of each call. `lanes` holds
// the pair map (the calls share it). False for HfCompat angles on the fly.
bool make_cuda_kshift_shape(std::span<const RotateJob* const> calls, const PagedCache& cache,
                            std::span<const std::int64_t> slots, CudaLanes& lanes, cuda::KShiftShape& out);

// Runs the K-shift body over its launch grid on the host.
bool kshift_on_host_grid(std::span<const RotateJob* const> calls, const PagedCache& cache,
                         std::span<const std::int64_t> slots, int block_dim = 256);

}  // namespace ropekit::detail
