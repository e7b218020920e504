// The engine's calls in the CUDA kernels' shapes, and the device calls' checks and shapes before their launch
// (device_shapes.hpp).
#include "device/device_shapes.hpp"

#include <fmt/format.h>

#include <vector>

#include "call/prepare.hpp"
#include "ropekit/dtype.hpp"
#include "ropekit/error.hpp"

namespace ropekit::detail {

void set_cuda_cache(const PagedCache& cache, cuda::AppendShape& a) {
  a.cache_k = static_cast<char*>(cache.k);
  a.cache_v = static_cast<char*>(cache.v);
  a.cache = cache.dtype == CacheDType::F32    ? cuda::CacheStorage::F32
            : cache.dtype == CacheDType::BF16 ? cuda::CacheStorage::BF16
            : cache.dtype == CacheDType::F16  ? cuda::CacheStorage::F16
                                              : cuda::CacheStorage::E4M3;
  a.cache_element_size = static_cast<int>(element_size(cache.dtype));
  a.hnd = cache.layout == PageLayout::HND;
  a.page_size = cache.page_size;
  a.num_pages = cache.num_pages;
  a.kv_heads = cache.kv_heads;
  a.key_lanes = cache.head_dim;
  a.value_lanes = cache.v_head_dim;
  a.k_scale = cache.k_scale;
  a.v_scale = cache.v_scale;
}

namespace {

// The append's shape of a resolved job, its rotation's shape already filled (views, positions, coefficients' magnitude
// and sign; the angles as the caller has them).
void fill_append_shape(const AppendJob& job, cuda::AppendShape& a, const LaunchChoices& choices) {
  const AppendArgs& args = *job.args;
  const PagedCache& cache = *job.cache;
  set_cuda_cache(cache, a);
  // The rotation was prepared over q and k as read; the append writes q to q_out (or in place) and the keys to
  // k_out and the cache.
  if (!args.q.empty()) a.rot.q_out = args.q_out.empty() ? a.rot.q_in : cuda_view_of(args.q_out);
  a.keep_k = !args.k_out.empty();
  if (a.keep_k) a.k_out = cuda_view_of(args.k_out);
  a.rotate_keys = job.rotate_keys;
  a.slots = job.slots.data();
  a.slots_i64 = true;
  a.k_offset = args.k_offset;
  if (!args.k_nope.empty()) {
    a.k_nope = cuda_view_of(args.k_nope);
    a.k_nope_storage = cuda_storage_of(args.k_nope.dtype);
    a.k_nope_offset = args.k_nope_offset;
    a.k_nope_dim = args.k_nope_dim;
  }
  if (!args.v.empty()) {
    a.v = cuda_view_of(args.v);
    a.v_storage = cuda_storage_of(args.v.dtype);
  }
  a.q_weight = job.q_weight.empty() ? nullptr : job.q_weight.data();
  a.k_weight = job.k_weight.empty() ? nullptr : job.k_weight.data();
  a.eps = args.norm.eps;
  a.across_heads = args.norm.across_heads;
  choose_append_vectors(*job.rotation->map, a, choices);
  if (a.rotates_queries()) {
    cuda::RotateShape q = cuda::query_rotation(a);
    choose_vector(*job.rotation->map, q, choices);
    a.q_vector_pairs = q.vector_pairs;
    a.q_adjacent = q.adjacent;
    a.q_head_groups = q.head_groups;
  }
  choose_append_launch(a, choices);
}

}  // namespace

bool make_cuda_append_shape(const AppendJob& job, CudaLanes& lanes, cuda::AppendShape& a,
                            const LaunchChoices& choices) {
  a = {};
  if (job.rotation == nullptr || !make_cuda_shape(*job.rotation, lanes, a.rot)) return false;
  fill_append_shape(job, a, choices);
  return true;
}

bool make_cuda_kshift_shape(std::span<const RotateJob* const> calls, const PagedCache& cache,
                            std::span<const std::int64_t> slots, CudaLanes& lanes, cuda::KShiftShape& k) {
  k = {};
  if (calls.empty() || calls.size() > 2) return false;
  for (std::size_t c = 0; c < calls.size(); ++c) {
    if (!make_cuda_shape(*calls[c], lanes, k.calls[c])) return false;  // the lanes: the same pair map each time
  }
  k.num_calls = static_cast<int>(calls.size());
  k.slots = slots.data();
  k.slots_i64 = true;
  k.entries = static_cast<std::int64_t>(slots.size());
  set_cuda_cache(cache, k.cache);
  return true;
}

bool kshift_on_host_grid(std::span<const RotateJob* const> calls, const PagedCache& cache,
                         std::span<const std::int64_t> slots, int block_dim) {
  CudaLanes lanes;
  cuda::KShiftShape shape;
  if (!make_cuda_kshift_shape(calls, cache, slots, lanes, shape)) return false;
  run_kshift_on_host(shape, block_dim);
  return true;
}

bool append_on_host_grid(const AppendJob& job, int block_dim, std::int64_t pair_groups, const LaunchChoices& choices) {
  CudaLanes lanes;
  cuda::AppendShape shape;
  if (!make_cuda_append_shape(job, lanes, shape, choices)) return false;
  if (pair_groups > 0) shape.pair_groups = shape.q_head_groups = pair_groups;
  run_append_on_host(shape, block_dim);
  return true;
}

cuda::RotateShape device_rotate_shape(const Rope& rope, const std::shared_ptr<const Table>& table,
                                      const RotateArgs& args, const LaunchChoices& choices) {
  // A call that runs at once (nothing pinned); with the DeviceRope's table when it was made from one (its frequencies
  // and angle mode checked as Rope::prepare(args, table) checks them), else the rope's angles on the fly.
  const RotateCall call =
      prepare(rope, args, {.table = table, .on_the_fly = !table, .keep_plan = false, .positions = PositionsAt::Device});
  cuda::RotateShape shape;
  fill_cuda_views(call.job(), shape);
  choose_vector(*call.job().map, shape, choices);
  return shape;
}

cuda::AppendShape device_append_shape(const Rope& rope, const std::shared_ptr<const Table>& table,
                                      const AppendArgs& args, const PagedCache& cache, const LaunchChoices& choices) {
  const RotateArgs rotation_args{.q = args.q, .k = args.k, .positions = args.positions};
  const CheckedCall checked = check_append(rope, args, cache, KeyWrite::Rotated, rotation_args, PositionsAt::Device);
  check_slot_layout(args.slots, args.k.batch * args.k.seq);
  const RotateCall rotation = prepare(rope, checked, {.table = table, .on_the_fly = !table, .keep_plan = false});
  // The job as prepare_append resolves it, but for what the device reads itself: the slots (a mapping, or the page
  // table addressed by table_slot) and the weights, to which the kernel adds weight_offset.
  const AppendJob job{.rotation = &rotation.job(),
                      .args = &args,
                      .cache = &cache,
                      .q_weight = args.norm.q_weight,
                      .k_weight = args.norm.k_weight};
  cuda::AppendShape a;
  fill_cuda_views(rotation.job(), a.rot);
  fill_append_shape(job, a, choices);
  if (const auto* m = std::get_if<SlotMapping>(&args.slots)) {
    a.slots = m->data;
    a.slots_i64 = m->type == IndexType::I64;
  } else {
    const PageTable& t = std::get<PageTable>(args.slots);
    a.slots = nullptr;
    a.table = {t.indices.data(),
               t.indptr.data(),
               t.last_page_len.data(),
               t.batch_indices.data(),
               t.seq_positions.data(),
               static_cast<std::int64_t>(t.indptr.size()) - 1,
               static_cast<std::int64_t>(t.indices.size())};
  }
  a.add_weight_offset = true;
  a.weight_offset = args.norm.weight_offset;
  return a;
}

}  // namespace ropekit::detail
