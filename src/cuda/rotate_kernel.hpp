// src/cuda/rotate_kernel.hpp — the host side of the CUDA kernels (rotation, fused append, K-shift) (built when the CUDA
// toolkit is found: ROPEKIT_CUDA). Internal: the public device API (device pointers, an explicit device and stream) is
// issue 41's next step.
#pragma once

#include <cstdint>

#include "cuda/append_body.hpp"
#include "cuda/kshift_body.hpp"
#include "cuda/rotate_body.hpp"

namespace ropekit::cuda {

// The most blocks a launch's grid takes along x.
constexpr std::int64_t kMaxGridBlocks = 0x7fffffff;
// Blocks of block_dim threads for `threads` threads (the launches of rotate_kernel.cu and append_kernel.cu); 0 when
// there is nothing to do, −1 past the grid's x limit.
inline std::int64_t blocks_for(std::int64_t threads, int block_dim) {
  const std::int64_t blocks = blocks_of(threads, block_dim);
  return blocks > kMaxGridBlocks ? -1 : blocks;
}

// Launches the kernel over `device_shape` (every pointer in it a device pointer) on `stream` (a cudaStream_t; null:
// the default stream), blocks of block_dim threads. Returns the cudaError_t of the launch (0: launched).
int launch_rotate(const RotateShape& device_shape, void* stream, int block_dim = 256);
// The fused rotate-and-append over `device_shape` (slots resolved, every pointer a device pointer).
int launch_append(const AppendShape& device_shape, void* stream, int block_dim = 256);
// The same in one launch (append_one_kernel.cu), for a shape whose one_launch is set (launch_append calls it).
int launch_append_one(const AppendShape& device_shape, void* stream, int block_dim);
// The K-shift / re-rotation of cached keys over `device_shape`.
int launch_kshift(const KShiftShape& device_shape, void* stream, int block_dim = 256);

// The storage codecs on the device (tests/cuda_device_test.cpp): bf16_store and f16_store of each float32 pattern in
// `in`, f16_load of its low 16 bits, and bf16x2_store / f16x2_store of it with its neighbour in[i ^ 1] (itself for
// the last of an odd count) in the high half, on the default stream.
int launch_codecs(const std::uint32_t* in, std::uint16_t* bf16, std::uint16_t* f16, float* widened,
                  std::uint32_t* bf16x2, std::uint32_t* f16x2, std::int64_t n);

}  // namespace ropekit::cuda
