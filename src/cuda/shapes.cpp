// The kernels' shapes made from the core's prepared calls, and the launch's choices: access widths, head groups, one
// launch or several (rope/device_backend.hpp). Plain host code: no kernel body runs here.
#include <algorithm>
#include <cstdint>
#include <tuple>
#include <utility>

#include "cuda/host_grid.hpp"
#include "rope/angles.hpp"
#include "ropekit/table.hpp"

namespace ropekit::detail {

static_assert(LaunchChoices{}.max_access_bytes == cuda::kMaxAccessBytes);
static_assert(cuda::kDevicePositionLimit == kPositionLimit);  // the kernels check the contract's range

cuda::View cuda_view_of(const Heads& h) {
  return {static_cast<char*>(h.data), h.batch_stride, h.seq_stride, h.head_stride};
}

cuda::Storage cuda_storage_of(DType dtype) {
  return dtype == DType::F32 ? cuda::Storage::F32 : dtype == DType::BF16 ? cuda::Storage::BF16 : cuda::Storage::F16;
}

void fill_cuda_views(const RotateJob& job, cuda::RotateShape& s) {
  const PairMap& map = *job.map;
  const RotateArgs& a = job.args;
  s = {};
  if (job.q_heads > 0) {
    s.q_in = cuda_view_of(a.q);
    s.q_out = a.q_out.data != nullptr ? cuda_view_of(a.q_out) : s.q_in;
  }
  if (job.k_heads > 0) {
    s.k_in = cuda_view_of(a.k);
    s.k_out = a.k_out.data != nullptr ? cuda_view_of(a.k_out) : s.k_in;
  }
  const DType dtype = job.q_heads > 0 ? a.q.dtype : a.k.dtype;
  s.storage = cuda_storage_of(dtype);
  s.element_size = static_cast<int>(element_size(dtype));
  s.pairs = map.num_pairs();
  s.rotary_dim = map.rotary_dim;
  s.head_dim = map.head_dim;
  s.positions = a.positions.data;
  s.positions_i64 = a.positions.type == IndexType::I64;
  s.magnitude = job.magnitude;
  s.sin_sign = job.sin_sign;
  s.tokens = job.tokens;
  s.seq = job.seq;
  s.q_heads = job.q_heads;
  s.k_heads = job.k_heads;
  s.head_groups = cuda::choose_head_groups(s.tokens, s.pairs, s.q_heads + s.k_heads);  // one pair per thread
}

namespace {

// Whether pairs j0 … j0 + W − 1 of every run have the lanes a (W, adjacent) access reads: W consecutive a lanes and W
// consecutive b lanes starting at multiples of W, or (adjacent) 2W lanes a, b, a, b, … from a multiple of 2W.
bool runs_fit(const PairMap& map, int w, bool adjacent) {
  const int pairs = map.num_pairs();
  if (pairs % w != 0) return false;
  for (int j0 = 0; j0 < pairs; j0 += w) {
    const int a0 = map.lane_a[std::size_t(j0)], b0 = map.lane_b[std::size_t(j0)];
    if (adjacent ? a0 % (2 * w) != 0 : (a0 % w != 0 || b0 % w != 0)) return false;
    for (int i = 0; i < w; ++i) {
      const int a = map.lane_a[std::size_t(j0 + i)], b = map.lane_b[std::size_t(j0 + i)];
      if (adjacent ? (a != a0 + 2 * i || b != a0 + 2 * i + 1) : (a != a0 + i || b != b0 + i)) return false;
    }
  }
  return true;
}

// Whether every row of view v (elements of element_size bytes) starts on a multiple of `bytes`: its address and each
// stride that moves between its rows (a batch stride with one sequence, a head stride with one head, a sequence stride
// with one token per sequence move nowhere).
bool rows_aligned(const cuda::View& v, const cuda::RotateShape& s, std::int64_t heads, int bytes, int element_size) {
  if (v.data == nullptr || heads == 0) return true;
  const auto aligned = [&](std::int64_t stride) { return (stride * element_size) % bytes == 0; };
  return reinterpret_cast<std::uintptr_t>(v.data) % std::uintptr_t(bytes) == 0 &&
         (s.tokens <= s.seq || aligned(v.batch_stride)) && (s.seq <= 1 || aligned(v.seq_stride)) &&
         (heads <= 1 || aligned(v.head_stride));
}
bool rows_aligned(const cuda::View& v, const cuda::RotateShape& s, std::int64_t heads, int bytes) {
  return rows_aligned(v, s, heads, bytes, s.element_size);
}

bool address_aligned(const void* p, int bytes) {
  return reinterpret_cast<std::uintptr_t>(p) % std::uintptr_t(bytes) == 0;
}

// The widest run a thread can turn with one access per run of lanes — (pairs per thread, adjacent) — of at most
// max_bytes (and kMaxAccessBytes) whose lanes the pair map's runs have and for which aligned(bytes) holds for every
// row the caller's kernel touches; (1, false), one element per access, where none is wider.
template <class Aligned>
std::pair<int, bool> widest_run(const PairMap& map, int element_size, int max_bytes, Aligned aligned) {
  std::pair<int, bool> run{1, false};
  int best = element_size;
  for (const int w : {1, 2, 4, 8}) {
    for (const bool adjacent : {false, true}) {
      const int bytes = (adjacent ? 2 * w : w) * element_size;
      if (bytes <= best || bytes > max_bytes || bytes > cuda::kMaxAccessBytes || !runs_fit(map, w, adjacent) ||
          !aligned(bytes))
        continue;
      best = bytes;
      run = {w, adjacent};
    }
  }
  return run;
}

// The widest copy of `lanes` lanes of a view (element_size bytes each, `heads` rows per token) into entries of
// entry_lanes lanes from lane `first` in a cache at `base`: bytes per access (at most max_bytes), 0 for none wider
// than an element.
int widest_copy(const cuda::View& v, const cuda::RotateShape& s, std::int64_t heads, int element_size, int lanes,
                const void* base, int entry_lanes, int first, int max_bytes) {
  int best = 0;
  for (int bytes = 2 * element_size; bytes <= std::min(max_bytes, cuda::kMaxAccessBytes); bytes *= 2) {
    const int n = bytes / element_size;
    if (lanes % n != 0 || entry_lanes % n != 0 || first % n != 0 || !address_aligned(base, bytes) ||
        !rows_aligned(v, s, heads, bytes, element_size))
      break;
    best = bytes;
  }
  return best;
}

}  // namespace

void choose_append_launch(cuda::AppendShape& a, const LaunchChoices& choices, int block_dim) {
  switch (choices.launches) {
    case AppendLaunches::One: a.one_launch = true; return;
    case AppendLaunches::PerBody: a.one_launch = false; return;
    case AppendLaunches::Choose: break;
  }
  a.one_launch = cuda::one_launch_blocks(a, block_dim) * block_dim <= kOneLaunchThreads;
}

void choose_append_vectors(const PairMap& map, cuda::AppendShape& a, const LaunchChoices& choices) {
  const int max_bytes = choices.max_access_bytes;
  a.key_vector_pairs = 1;
  a.key_adjacent = false;
  a.value_bytes = a.nope_bytes = 0;
  const cuda::RotateShape& s = a.rot;
  const int ces = a.cache_element_size;
  const auto cache_holds = [&](cuda::Storage st) {
    return a.cache != cuda::CacheStorage::E4M3 && static_cast<int>(a.cache) == static_cast<int>(st);
  };
  if (choices.append_runs) {
    const std::int64_t heads = a.pair_k_heads();
    if (heads > 0 && cache_holds(s.storage)) {
      // The row, k_out and every entry: an entry starts at a multiple of key_lanes, its run at k_offset + la.
      std::tie(a.key_vector_pairs, a.key_adjacent) = widest_run(map, s.element_size, max_bytes, [&](int bytes) {
        return rows_aligned(s.k_in, s, heads, bytes) && (!a.keep_k || rows_aligned(a.k_out, s, heads, bytes)) &&
               address_aligned(a.cache_k, bytes) && (a.key_lanes * ces) % bytes == 0 && (a.k_offset * ces) % bytes == 0;
      });
    }
    if (a.v.data != nullptr && cache_holds(a.v_storage)) {
      a.value_bytes = widest_copy(a.v, s, a.kv_heads, ces, a.value_lanes, a.cache_v, a.value_lanes, 0, max_bytes);
    }
    if (a.k_nope.data != nullptr && cache_holds(a.k_nope_storage)) {
      a.nope_bytes =
          widest_copy(a.k_nope, s, a.kv_heads, ces, a.k_nope_dim, a.cache_k, a.key_lanes, a.k_nope_offset, max_bytes);
    }
  }
  a.pair_groups = cuda::choose_head_groups(s.tokens, s.pairs / a.key_vector_pairs, a.pair_k_heads());
}

void choose_vector(const PairMap& map, cuda::RotateShape& s, const LaunchChoices& choices) {
  std::tie(s.vector_pairs, s.adjacent) = widest_run(map, s.element_size, choices.max_access_bytes, [&](int bytes) {
    return rows_aligned(s.q_in, s, s.q_heads, bytes) && rows_aligned(s.q_out, s, s.q_heads, bytes) &&
           rows_aligned(s.k_in, s, s.k_heads, bytes) && rows_aligned(s.k_out, s, s.k_heads, bytes);
  });
  const std::int64_t heads = s.q_heads + s.k_heads;
  const int forced = choices.head_groups;
  s.head_groups = forced > 0 ? std::max<std::int64_t>(1, std::min<std::int64_t>(forced, heads))
                             : cuda::choose_head_groups(s.tokens, s.pairs / s.vector_pairs, heads);
}

bool make_cuda_shape(const RotateJob& job, CudaLanes& lanes, cuda::RotateShape& s) {
  // On the fly, only the accurate angles: HfCompat's are libm's cos/sin of a float32 angle, which a GPU's math
  // library does not reproduce bit for bit (such calls take a table).
  if (job.table == nullptr && (job.angles == nullptr || job.angles->mode() != AngleMode::Accurate)) return false;
  fill_cuda_views(job, s);
  const PairMap& map = *job.map;
  lanes.lane_a.assign(map.lane_a.begin(), map.lane_a.end());
  lanes.lane_b.assign(map.lane_b.begin(), map.lane_b.end());
  lanes.axis.assign(map.axis.begin(), map.axis.end());
  s.lane_a = lanes.lane_a.data();
  s.lane_b = lanes.lane_b.data();
  s.axis = lanes.axis.data();
  if (job.table != nullptr) {
    s.cos = job.table->cos_row(0);
    s.sin = job.table->sin_row(0);
    s.table_positions = job.table->num_positions();
  } else {
    s.turns_hi = job.angles->turns_hi();
    s.turns_lo = job.angles->turns_lo();
  }
  return true;
}

}  // namespace ropekit::detail
