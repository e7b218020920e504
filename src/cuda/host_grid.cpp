// The host's runs of the CUDA kernel bodies over their whole launch grids (rope/device_backend.hpp): what the tests
// compare with the CPU on every machine.
#include "cuda/host_grid.hpp"

#include <cstdint>

namespace ropekit::detail {

namespace {

// Runs thread(block, thread) over every (block, thread) of a launch of `blocks` blocks of block_dim threads, in block
// order: the host's run of a kernel's grid.
template <class Thread>
void each_thread(std::int64_t blocks, int block_dim, Thread thread) {
  for (std::int64_t block = 0; block < blocks; ++block) {
    for (int t = 0; t < block_dim; ++t) thread(block, t);
  }
}

}  // namespace

bool rotate_on_host_grid(const RotateJob& job, int block_dim, std::int64_t head_groups, const LaunchChoices& choices,
                         int* vector_bytes) {
  CudaLanes lanes;
  cuda::RotateShape shape;
  if (!make_cuda_shape(job, lanes, shape)) return false;
  choose_vector(*job.map, shape, choices);
  if (head_groups > 0) shape.head_groups = head_groups;
  if (vector_bytes != nullptr) *vector_bytes = (shape.adjacent ? 2 : 1) * shape.vector_pairs * shape.element_size;
  run_rotate_on_host(shape, block_dim);
  return true;
}

void run_rotate_on_host(const cuda::RotateShape& shape, int block_dim) {
  each_thread(cuda::blocks_of(shape.threads(), block_dim), block_dim,
              [&](std::int64_t block, int thread) { cuda::rotate_thread(shape, block, thread, block_dim); });
}

void run_kshift_on_host(const cuda::KShiftShape& shape, int block_dim) {
  each_thread(cuda::blocks_of(shape.threads(), block_dim), block_dim,
              [&](std::int64_t block, int thread) { cuda::kshift_thread(shape, block, thread, block_dim); });
}

void run_append_on_host(const cuda::AppendShape& shape, int block_dim) {
  if (shape.one_launch) {
    each_thread(cuda::one_launch_blocks(shape, block_dim), block_dim,
                [&](std::int64_t block, int thread) { cuda::append_launch_thread(shape, block, thread, block_dim); });
    return;
  }
  if (shape.rotates_queries()) {  // the rotation kernel's grid over the queries, then the append's
    const cuda::RotateShape q = cuda::query_rotation(shape);
    each_thread(cuda::blocks_of(q.threads(), block_dim), block_dim,
                [&](std::int64_t block, int thread) { cuda::rotate_thread(q, block, thread, block_dim); });
  }
  each_thread(cuda::blocks_of(shape.threads(), block_dim), block_dim,
              [&](std::int64_t block, int thread) { cuda::append_thread(shape, block, thread, block_dim); });
}

}  // namespace ropekit::detail
