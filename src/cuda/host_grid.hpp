// src/cuda/host_grid.hpp — the CUDA rotation kernel's body run by the host over its whole launch grid.
//
// The ordinary test suite calls this on every machine (no GPU or CUDA toolkit needed): the same per-thread body a
// GPU runs (src/cuda/rotate_body.hpp), every (block, thread) of the launch, against the scalar reference bit for bit
// (tests/cuda_host_test.cpp). Internal.
#pragma once

#include <cstdint>
#include <vector>

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

// Runs the kernel body over every (block, thread) of a launch of `block_dim`-thread blocks covering the job, in
// block order. False when the job has no CUDA shape (make_cuda_shape).
bool rotate_on_host_grid(const RotateJob& job, int block_dim = 256);

}  // namespace ropekit::detail
