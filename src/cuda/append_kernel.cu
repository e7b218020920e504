// The fused rotate-and-append's kernels (append_body.hpp's per-thread bodies): a translation unit of their own, so that
// nvcc compiles them beside the rotation's (rotate_kernel.cu) and the one-launch kernel's (append_one_kernel.cu).
// Compiled as rotate_kernel.cu is (-fmad=false; sm_90, sm_80 and PTX); the host runs the same bodies over the same
// grids (tests/cuda_host_test.cpp).
#include <cuda_runtime.h>

#include "cuda/append_body.hpp"
#include "cuda/rotate_kernel.hpp"

namespace ropekit::cuda {
namespace {

// The key rows' pairs, the values and MLA's nope lanes, one segment after the other (one launch: a decode step's
// append is launch-bound), one kernel per configuration of the key rows (storage, pairs per thread, adjacent: as the
// rotation's); the QK-normed rows, whose double-precision sums need more registers, in a kernel of their own.
template <Storage St, int W, bool Adjacent>
__global__ void append_kernel(AppendShape shape) {
  std::int64_t g = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (g < shape.pair_threads()) return pair_thread_as<St, W, Adjacent>(shape, g);
  g -= shape.pair_threads();
  if (g < shape.value_threads()) return append_part<AppendPart::Values>(shape, g);
  g -= shape.value_threads();
  if (g < shape.nope_threads()) append_part<AppendPart::Nope>(shape, g);
}

__global__ void append_norm_kernel(AppendShape shape) {
  const std::int64_t g = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (g < shape.norm_threads()) append_part<AppendPart::Norms>(shape, g);
}

}  // namespace

int launch_append(const AppendShape& device_shape, void* stream, int block_dim) {
  if (device_shape.one_launch) return launch_append_one(device_shape, stream, block_dim);
  if (device_shape.rotates_queries()) {  // the queries: the rotation kernel, on the same stream
    const int rc = launch_rotate(query_rotation(device_shape), stream, block_dim);
    if (rc != 0) return rc;
  }
  // The launches write disjoint memory (queries; the normed rows' entries and outputs; the other key rows', the value
  // entries and MLA's nope lanes), in stream order.
  const auto launch = [&](auto kernel, std::int64_t threads) {
    const std::int64_t blocks = blocks_for(threads, block_dim);
    if (blocks == 0) return 0;
    if (blocks < 0) return static_cast<int>(cudaErrorInvalidConfiguration);
    kernel<<<static_cast<unsigned>(blocks), static_cast<unsigned>(block_dim), 0, static_cast<cudaStream_t>(stream)>>>(
        device_shape);
    return static_cast<int>(cudaGetLastError());
  };
  const int rc = launch(append_norm_kernel, device_shape.norm_threads());
  if (rc != 0) return rc;
  int result = static_cast<int>(cudaErrorInvalidValue);  // a configuration choose_append_vectors does not make
  with_configuration(device_shape.rot.storage, device_shape.key_vector_pairs, device_shape.key_adjacent,
                     [&](auto st, auto w, auto adjacent) {
                       result = launch(
                           append_kernel<decltype(st)::value, decltype(w)::value, decltype(adjacent)::value>,
                           device_shape.pair_threads() + device_shape.value_threads() + device_shape.nope_threads());
                     });
  return result;
}

}  // namespace ropekit::cuda
