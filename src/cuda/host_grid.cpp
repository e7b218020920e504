// The host's run of the CUDA rotation body over the launch grid (host_grid.hpp).
#include "cuda/host_grid.hpp"

#include "rope/angles.hpp"
#include "ropekit/table.hpp"

namespace ropekit::detail {
namespace {

cuda::View view_of(const Heads& h) { return {static_cast<char*>(h.data), h.batch_stride, h.seq_stride, h.head_stride}; }

}  // namespace

bool make_cuda_shape(const RotateJob& job, CudaLanes& lanes, cuda::RotateShape& s) {
  // On the fly, only the accurate angles: HfCompat's are libm's cos/sin of a float32 angle, which a GPU's math
  // library does not reproduce bit for bit (such calls take a table).
  if (job.table == nullptr && (job.angles == nullptr || job.angles->mode() != AngleMode::Accurate)) return false;
  const PairMap& map = *job.map;
  lanes.lane_a.assign(map.lane_a.begin(), map.lane_a.end());
  lanes.lane_b.assign(map.lane_b.begin(), map.lane_b.end());
  lanes.axis.assign(map.axis.begin(), map.axis.end());
  const RotateArgs& a = job.args;
  s = {};
  if (job.q_heads > 0) {
    s.q_in = view_of(a.q);
    s.q_out = a.q_out.data != nullptr ? view_of(a.q_out) : s.q_in;
  }
  if (job.k_heads > 0) {
    s.k_in = view_of(a.k);
    s.k_out = a.k_out.data != nullptr ? view_of(a.k_out) : s.k_in;
  }
  const DType dtype = job.q_heads > 0 ? a.q.dtype : a.k.dtype;
  s.storage = dtype == DType::F32    ? cuda::Storage::F32
              : dtype == DType::BF16 ? cuda::Storage::BF16
                                     : cuda::Storage::F16;
  s.element_size = static_cast<int>(element_size(dtype));
  s.lane_a = lanes.lane_a.data();
  s.lane_b = lanes.lane_b.data();
  s.axis = lanes.axis.data();
  s.pairs = map.num_pairs();
  s.rotary_dim = map.rotary_dim;
  s.head_dim = map.head_dim;
  s.positions = a.positions.data;
  s.positions_i64 = a.positions.type == IndexType::I64;
  if (job.table != nullptr) {
    s.cos = job.table->cos_row(0);
    s.sin = job.table->sin_row(0);
  } else {
    s.turns_hi = job.angles->turns_hi();
    s.turns_lo = job.angles->turns_lo();
  }
  s.magnitude = job.magnitude;
  s.sin_sign = job.sin_sign;
  s.tokens = job.tokens;
  s.seq = job.seq;
  s.q_heads = job.q_heads;
  s.k_heads = job.k_heads;
  return true;
}

bool rotate_on_host_grid(const RotateJob& job, int block_dim) {
  CudaLanes lanes;
  cuda::RotateShape shape;
  if (!make_cuda_shape(job, lanes, shape)) return false;
  const std::int64_t blocks = (shape.threads() + block_dim - 1) / block_dim;
  for (std::int64_t block = 0; block < blocks; ++block) {
    for (int thread = 0; thread < block_dim; ++thread) cuda::rotate_thread(shape, block, thread, block_dim);
  }
  return true;
}

}  // namespace ropekit::detail
