// src/attention/attention_internal.hpp — what attention.cpp shares with the KV cache and linear
// attention: argument resolution (all validation, the rotations prepared once) and the run of a
// resolved call on the per-target driver.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <span>
#include <variant>
#include <vector>

#include "rope/attention_job.hpp"
#include "rope/validate.hpp"
#include "rope/views.hpp"
#include "ropekit/append.hpp"
#include "ropekit/attention.hpp"

namespace ropekit::detail {

// What the rope rotates on load: q and k (fused attention, and a cache of unrotated keys: ReRope,
// SelfExtend), q only (keys come from a cache, stored rotated at the positions every regime reads them
// at: plain and DualChunk), or nothing (the caller rotates features of its own: linear attention, which validates
// the positions when it prepares them).
enum class RopeLoads { QueriesAndKeys, Queries, None };

struct ResolvedAttention {
  int head_dim = 0, v_head_dim = 0;
  float scale = 1.0f;        // softmax scale × softmax_scale_mult
  Positions q_mask, k_mask;  // data null when neither mask nor bias needs positions
  std::vector<int> t5_lut;   // T5 bucket of relative position r at [r + t5_range]
  std::int64_t t5_range = 0;
  std::optional<RotateCall> q_rotation, k_rotation;  // prepared (validated once) for the loads
  // Position regimes (options.regimes): regime r > 0 rotates Q (and K, when keys rotate on load) at
  // its own positions, materialized here once per call (O(tokens), never O(q · k)). Regime 0 is
  // q_rotation / k_rotation unless its positions differ from the tokens' (DualChunk).
  int regime_count = 1;
  std::array<std::optional<RotateCall>, 3> q_regime, k_regime;  // [0] unused: q_rotation, k_rotation
  std::array<int, 3> k_tile_of = {0, 1, 2};                   // the K tile regime r reads (DualChunk: every regime 0's)
  std::array<bool, 3> k_as_stored = {false, false, false};    // regime r reads keys as stored (no rotation)
  std::array<std::vector<std::int64_t>, 6> regime_positions;  // storage: q of regime r at [r], k at [3 + r]
  double exact_scale = 1.0;  // softmax scale × softmax_scale_mult in double (log-n scaling starts here)
};

// All of a paged cache's key (or value) memory from `base`: every slot's `lanes`-lane entries of every
// head (the range a view written or read beside the cache must not meet).
inline ByteRange cache_byte_range(const PagedCache& c, const void* base, std::int64_t lanes, std::string_view name) {
  const auto begin = reinterpret_cast<std::uintptr_t>(base);
  return ByteRange{begin, begin + std::uintptr_t(c.slots() * c.kv_heads * lanes * element_size(c.dtype)), name};
}

// Where args.k and args.v lie: in the memory their views describe (checked against out), or in a paged
// cache read through KvPages, whose views give the tile loader shapes and strides only (their memory is
// the cache's; the caller checks out against all of it).
enum class KvMemory { Views, Cache };
// Validates everything (ropekit::Error naming the field). rope: the rope of the call, or null.
ResolvedAttention resolve_attention(const Rope* rope, const AttentionArgs& args, const AttentionOptions& options,
                                    RopeLoads loads, KvMemory kv = KvMemory::Views);
// Position regimes (regimes.cpp): the rule the tile loop reads to pick each (query, key) pair's regime,
// and Dual Chunk's chunk_len = chunk_size − local_size.
RegimeRule rule_of(const PositionRegimes& regimes);
std::int64_t chunk_len(const regimes::DualChunk& dc);
// The regimes' rotations (options.regimes set): part of resolve_attention.
void resolve_regimes(const Rope* rope, const AttentionArgs& args, const AttentionOptions& options, RopeLoads loads,
                     ResolvedAttention& resolved);
// A paged cache's keys and values read in place by run_attention: args.k and args.v view the cache from
// page 0 with the sequence's length, and key j lies in row pages[j / page_size] · page_span + j % page_size
// (detail::AttentionJob::kv_pages). Only for keys read as stored (no rotation on load).
struct KvPages {
  std::span<const std::int32_t> pages;
  std::int64_t page_size = 1, page_span = 1;
  // An fp8 cache (non-zero): its e4m3 entries are widened × these as they load; args.k and args.v then
  // count bytes (detail::AttentionJob::k_e4m3_scale).
  float k_e4m3_scale = 0.0f, v_e4m3_scale = 0.0f;
};
void run_attention(const AttentionArgs& args, const AttentionOptions& options, const ResolvedAttention& resolved,
                   const KvPages* pages = nullptr);

// How a KV cache stores keys for the position regimes it is read with (KvCacheShape::regimes,
// PagedKvCacheShape::regimes): at the entry's position, unrotated (ReRope, SelfExtend: rotated on load
// per regime — such keys carry no plan), or at position mod chunk_len (DualChunk).
enum class KeyStorage { AtPosition, Unrotated, ChunkRelative };
inline KeyStorage storage_of(const PositionRegimes& regimes) {
  if (std::holds_alternative<regimes::ReRope>(regimes) || std::holds_alternative<regimes::SelfExtend>(regimes)) {
    return KeyStorage::Unrotated;
  }
  if (std::holds_alternative<regimes::DualChunk>(regimes)) return KeyStorage::ChunkRelative;
  return KeyStorage::AtPosition;
}

// The counts every page table must have, wherever its values live (prepare_append's host tables, cuda::append's
// device ones): indptr batch + 1 values, last_page_len batch, batch_indices and seq_positions one per token each.
// Returns batch; ropekit::Error naming the field otherwise.
std::size_t check_page_table_counts(const PageTable& table);

// The cache as a call writes it: its geometry (PagedCache::validate) and its memory (k set; v set exactly when
// v_head_dim > 0). ropekit::Error naming the field.
void check_cache(const PagedCache& cache);

// The resolved slot of every token (−1: none) into `slots`, resized to `tokens` (its capacity is reused, so a decode
// step that refills it allocates nothing); ropekit::Error on a slot or page outside the cache, a count that does not
// match, or two tokens writing one slot (paged_cache.cpp).
void fill_slots(const std::variant<SlotMapping, PageTable>& spec, const PagedCache& cache, std::int64_t tokens,
                std::vector<std::int64_t>& slots);

// A fused append as prepare_append resolved it (append.cpp), for a backend that runs it another way (the CUDA
// kernel body: device_shapes.hpp turns it into the kernel's shape). Everything points into the resolved call, which
// must outlive the job.
struct AppendJob {
  const RotateJob* rotation = nullptr;  // q and k as read: each token's positions and coefficients
  const AppendArgs* args = nullptr;     // the views, offsets and norm settings
  const PagedCache* cache = nullptr;
  std::span<const std::int64_t> slots;        // each token's slot, −1: not cached
  std::span<const float> q_weight, k_weight;  // QK-norm weight + weight_offset; empty: the heads are not normed
  bool rotate_keys = true;                    // false: keys stored as given (ReRoPE / SelfExtend caches)
};

// How a fused append writes the keys into the cache: rotated at their positions (ropekit::append), or
// as given (a cache read by ReRoPE / SelfExtend, whose regimes rotate every key on load: KvCache and
// PagedKvCache with such regimes). Unrotated takes no k_out and no k norm.
enum class KeyWrite { Rotated, Unrotated };

// prepare_append's checks, for host memory or (PositionsAt::Device) device memory, whose positions, slots and QK-norm
// weights the host never reads: everything but those values (the slots: check_slot_layout). rotation_args holds
// args' q, k and positions (the caller keeps it: the result refers to it); returns the rotation's CheckedCall.
CheckedCall check_append(const Rope& rope, const AppendArgs& args, const PagedCache& cache, KeyWrite keys,
                         const RotateArgs& rotation_args, PositionsAt at = PositionsAt::Host);
// What the host checks of slots the device reads: a slot mapping's type, count (one per token), pointer and alignment;
// a page table's counts (check_page_table_counts, one batch index and sequence position per token) and its arrays'
// pointers and alignment. Their values are the kernel's to check (table_slot).
void check_slot_layout(const std::variant<SlotMapping, PageTable>& slots, std::int64_t tokens);
struct AppendAccess {
  // table: the angles of an external cos/sin cache (import_cos_sin_cache), null for the Rope's own.
  static AppendCall prepare(const Rope& rope, const AppendArgs& args, const PagedCache& cache, KeyWrite keys,
                            std::shared_ptr<const Table> table = nullptr);
  // prepare(...).run() without the call object: resolved on the stack, the plan not pinned (ropekit::append).
  static void run_once(const Rope& rope, const AppendArgs& args, const PagedCache& cache, KeyWrite keys,
                       std::shared_ptr<const Table> table = nullptr);
  // The resolved call as a device backend reads it (AppendJob above); points into `call`. An empty job (null
  // rotation) for a moved-from call.
  static AppendJob job(const AppendCall& call);
};

}  // namespace ropekit::detail
