// The fused append's one-launch kernel (AppendShape::one_launch): every body of append_body.hpp inlined into one
// kernel, the largest part of the CUDA build, in a translation unit of its own so that nvcc compiles it beside the
// others. Compiled as rotate_kernel.cu is (-fmad=false; sm_90, sm_80 and PTX).
#include <cuda_runtime.h>

#include "cuda/append_body.hpp"
#include "cuda/rotate_kernel.hpp"

namespace ropekit::cuda {
namespace {

// The whole append in one launch (AppendShape::one_launch: a decode step's small grid): every body in one kernel,
// configurations chosen at run time (uniform across the launch). Its registers are the largest body's, which a grid
// of a few thousand threads does not feel.
__global__ void append_one_kernel(AppendShape shape) {
  append_launch_thread(shape, static_cast<std::int64_t>(blockIdx.x), static_cast<int>(threadIdx.x),
                       static_cast<int>(blockDim.x));
}

}  // namespace

int launch_append_one(const AppendShape& device_shape, void* stream, int block_dim) {
  const std::int64_t blocks = one_launch_blocks(device_shape, block_dim);
  if (blocks == 0) return 0;
  if (blocks > kMaxGridBlocks) return static_cast<int>(cudaErrorInvalidConfiguration);
  append_one_kernel<<<static_cast<unsigned>(blocks), static_cast<unsigned>(block_dim), 0,
                      static_cast<cudaStream_t>(stream)>>>(device_shape);
  return static_cast<int>(cudaGetLastError());
}

}  // namespace ropekit::cuda
