// src/rope/device_shape.hpp — the device call shapes: a rotation, a fused append and a K-shift resolved into the plain
// data the CUDA backend's kernel bodies read (src/cuda/*_body.hpp), and nothing else. They are the device half of the
// core's call shape (call_shape.hpp): the prepare path and the engine fill them from validated calls
// (device_backend.hpp's shape makers, the engine's src/device/), the backend launches them or runs them on the host
// over the whole launch grid. Written for the host compiler and nvcc alike (C++17, no public header, no CUDA type).
// Internal: it may change with any commit.
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define ROPEKIT_HD __host__ __device__ inline
// Inlined into its device caller whatever its size: a function taking a shape by reference that stays a call makes the
// kernel copy the shape into local memory and read every field from there.
#define ROPEKIT_HD_INLINED __host__ __device__ __forceinline__
#else
#define ROPEKIT_HD inline
#define ROPEKIT_HD_INLINED inline
#endif

namespace ropekit::cuda {

enum class Storage : std::uint8_t { F32 = 0, BF16 = 1, F16 = 2 };

struct View {  // one tensor's rows: element strides
  char* data = nullptr;
  std::int64_t batch_stride = 0, seq_stride = 0, head_stride = 0;
};

struct RotateShape {
  View q_in, q_out, k_in, k_out;  // out.data == in.data: in place
  Storage storage = Storage::F32;
  int element_size = 4;
  // The pair map: lane_a[j], lane_b[j], axis[j] for j < pairs; lanes ≥ rotary_dim pass through.
  const std::int32_t* lane_a = nullptr;
  const std::int32_t* lane_b = nullptr;
  const std::uint8_t* axis = nullptr;
  int pairs = 0, rotary_dim = 0, head_dim = 0;
  // Positions: axes streams of `tokens` each, int32 or int64 — or, where uniform_position >= 0, that one position for
  // every token (the device K-shift: every entry turns by the same |δ|).
  const void* positions = nullptr;
  bool positions_i64 = true;
  std::int64_t uniform_position = -1;
  // The table: rows of `pairs` float32 values per position — or, where cos is null, the accurate angles on the fly
  // from each pair's turns per position as hi + lo (rope/angles.hpp's AngleEvaluator).
  const float* cos = nullptr;
  const float* sin = nullptr;
  const double* turns_hi = nullptr;
  const double* turns_lo = nullptr;
  float magnitude = 1.0f, sin_sign = 1.0f;
  std::int64_t tokens = 0, seq = 1, q_heads = 0, k_heads = 0;
  // A token's rows are split into head_groups interleaved sets, one thread per (token, set, run of pairs)
  // (choose_head_groups).
  std::int64_t head_groups = 1;
  // Pairs a thread turns (chosen on the host: detail::choose_vector): vector_pairs consecutive pairs of the map, read
  // and written with one access per run of lanes — W a lanes then W b lanes (half pairing), or, adjacent, 2W lanes
  // alternating a, b (interleaved pairing). 1, not adjacent: one element per access, any pair map.
  int vector_pairs = 1;
  bool adjacent = false;
  // Rows of the table cover positions [0, table_positions); past them the turns give the angle (the same bits:
  // the table's rows are those angles). A shape made from a CPU call has one source or the other.
  std::int64_t table_positions = 0;
  // Set by the device API, whose positions the host never reads: a position outside [0, 2^47), or past the table
  // with no turns (HfCompat), leaves its token's rows unwritten and records token + 1 here (the first to get there).
  // Null: the positions were checked before the launch.
  unsigned long long* error = nullptr;

  ROPEKIT_HD std::int64_t rows() const { return tokens * (q_heads + k_heads); }
  ROPEKIT_HD std::int64_t threads() const { return tokens * head_groups * (pairs / vector_pairs); }
};

ROPEKIT_HD int storage_size(Storage s) { return s == Storage::F32 ? 4 : 2; }

enum class CacheStorage : std::uint8_t { F32 = 0, BF16 = 1, F16 = 2, E4M3 = 3 };  // the first three as Storage

// ropekit::PageTable on the device: sequence b owns pages indices[indptr[b] .. indptr[b + 1]), the last holding
// last_page_len[b] entries; token t goes to entry seq_positions[t] of sequence batch_indices[t].
struct DevicePageTable {
  const std::int32_t* indices = nullptr;
  const std::int32_t* indptr = nullptr;
  const std::int32_t* last_page_len = nullptr;
  const std::int32_t* batch_indices = nullptr;
  const std::int32_t* seq_positions = nullptr;
  std::int64_t batch = 0, num_indices = 0;
};

struct AppendShape {
  RotateShape rot;  // q: rot.q_in → rot.q_out; keys read from rot.k_in (rot.k_out unused); coefficients, positions
  View k_out;       // the live rotated keys, when keep_k
  bool keep_k = false;
  bool rotate_keys = true;      // false: keys stored as given
  const void* slots = nullptr;  // one per token, int64 or int32; −1: not cached
  bool slots_i64 = true;
  // Or, where table.indptr is set, FlashInfer's page table read on the device (ropekit::PageTable's addressing).
  DevicePageTable table;
  // The cache.
  char* cache_k = nullptr;
  char* cache_v = nullptr;
  CacheStorage cache = CacheStorage::F32;
  int cache_element_size = 4;
  bool hnd = false;
  std::int64_t page_size = 1, kv_heads = 0, num_pages = 0;
  int key_lanes = 0, value_lanes = 0;  // elements per key / value entry
  float k_scale = 1.0f, v_scale = 1.0f;
  int k_offset = 0;
  // MLA's unrotated part and the values.
  View k_nope;
  Storage k_nope_storage = Storage::F32;
  int k_nope_offset = 0, k_nope_dim = 0;
  View v;
  Storage v_storage = Storage::F32;
  // QK-norm: weight + weight_offset per lane (across_heads: per head and lane); null: not normed.
  const float* q_weight = nullptr;
  const float* k_weight = nullptr;
  // The device API's weights are the caller's: weight_offset is added to each in float32 (as prepare_append forms
  // them). A shape made from a resolved call has the sums already (add_weight_offset false).
  bool add_weight_offset = false;
  float weight_offset = 0.0f;
  float eps = 1e-6f;
  bool across_heads = false;

  // Queries that are not QK-normed are the rotation kernel's work (query_rotation: its launch, the same bits), with
  // its choice of access width and head groups made on the host (choose_vector).
  ROPEKIT_HD bool rotates_queries() const { return q_weight == nullptr && rot.q_heads > 0; }
  int q_vector_pairs = 1;
  bool q_adjacent = false;
  std::int64_t q_head_groups = 1;
  // Key rows that are not QK-normed: one thread per (token, head group, run of key_vector_pairs pairs), the rows of a
  // token split into pair_groups interleaved sets (rotate_body.hpp's head groups). Runs wider than one pair
  // (key_adjacent: the rotation's adjacent runs) only where the cache holds k's type: a run is then read, kept in
  // k_out and stored in its entry with one access each (choose_append_vectors checks the alignment of every row and
  // entry); else one pair per thread, element by element, converted into the cache's type.
  ROPEKIT_HD std::int64_t pair_k_heads() const { return k_weight != nullptr ? 0 : rot.k_heads; }
  std::int64_t pair_groups = 1;
  int key_vector_pairs = 1;
  bool key_adjacent = false;
  ROPEKIT_HD std::int64_t pair_threads() const {
    return pair_k_heads() == 0 ? 0 : rot.tokens * pair_groups * (rot.pairs / key_vector_pairs);
  }
  // Bytes of v (and of k_nope) a value (nope) thread copies per kv head with one access, where the cache holds their
  // type and the rows and entries are aligned to it (choose_append_vectors); 0: one lane per thread, converted.
  int value_bytes = 0, nope_bytes = 0;
  ROPEKIT_HD std::int64_t q_groups() const {
    return q_weight == nullptr || rot.q_heads == 0 ? 0 : across_heads ? 1 : rot.q_heads;
  }
  ROPEKIT_HD std::int64_t k_groups() const { return k_weight == nullptr ? 0 : across_heads ? 1 : rot.k_heads; }
  ROPEKIT_HD std::int64_t norm_threads() const { return rot.tokens * (q_groups() + k_groups()); }
  // One thread per (token, lane) of v and of k_nope — or per (token, run of lanes) of value_bytes / nope_bytes — over
  // every kv head.
  ROPEKIT_HD int value_run() const { return value_bytes == 0 ? 1 : value_bytes / storage_size(v_storage); }
  ROPEKIT_HD int nope_run() const { return nope_bytes == 0 ? 1 : nope_bytes / storage_size(k_nope_storage); }
  ROPEKIT_HD std::int64_t value_threads() const {
    return v.data == nullptr ? 0 : rot.tokens * (value_lanes / value_run());
  }
  ROPEKIT_HD std::int64_t nope_threads() const {
    return k_nope.data == nullptr ? 0 : rot.tokens * (k_nope_dim / nope_run());
  }
  ROPEKIT_HD std::int64_t threads() const { return pair_threads() + norm_threads() + value_threads() + nope_threads(); }

  // The whole append in one launch (append_launch_thread): the queries' rotation grid first, then the segments above.
  // A decode step's append is a few thousand threads whose time is its launches' (two or three, about as long as
  // the work each), so it is launched once; a prefill keeps a launch per body, each holding only the registers its
  // own body needs (choose_append_launch decides on the host).
  bool one_launch = false;
};

// The rotation of the queries that are not QK-normed, in place or into q_out: the rotation kernel's shape over q's
// heads alone (rotates_queries()).
ROPEKIT_HD RotateShape query_rotation(const AppendShape& a) {
  RotateShape q = a.rot;
  q.k_heads = 0;
  q.k_in = q.k_out = View{};
  q.vector_pairs = a.q_vector_pairs;
  q.adjacent = a.q_adjacent;
  q.head_groups = a.q_head_groups;
  return q;
}

struct KShiftShape {
  RotateShape calls[2];  // coefficients only: positions (one per entry), table or turns, magnitude, sign; lanes
  int num_calls = 1;
  const void* slots = nullptr;  // each entry's slot, int64 or int32 (−1: skipped)
  bool slots_i64 = true;
  std::int64_t entries = 0;
  AppendShape cache;  // the cache's geometry, type and k_scale (cache_k, cache, hnd, page_size, kv_heads, key_lanes)

  ROPEKIT_HD std::int64_t threads() const { return entries * cache.kv_heads * calls[0].pairs; }
};

}  // namespace ropekit::cuda
