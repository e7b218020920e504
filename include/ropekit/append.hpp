// ropekit/append.hpp — what an inference engine runs for every new token: q and k rotated, k and v
// written into the engine's own KV cache, in one pass (vLLM's rotary_embedding + reshape_and_cache,
// FlashInfer's append_paged_kv_cache and rope_quantize_fp8_append_paged_kv_cache, ggml's rope fused
// with set_rows), optionally with the QK-norm of Qwen3 / Gemma 3 / OLMo 2 in front.
//
//   ropekit::PagedCache cache{.k = k_pages, .v = v_pages, .dtype = ropekit::CacheDType::F8E4M3,
//                             .layout = ropekit::PageLayout::NHD, .num_pages = 1024, .page_size = 16,
//                             .kv_heads = 8, .head_dim = 128, .k_scale = 0.05f, .v_scale = 0.02f};
//   ropekit::append(rope, {.q = q, .k = k, .v = v, .positions = ropekit::positions(pos),
//                          .slots = ropekit::slot_mapping(slots)}, cache);
//
// The cache is memory the caller owns: pages of page_size token entries. A token's entry is a slot,
// slot = page · page_size + entry; the k and v of kv head h of the slot live at
//   NHD  k + ((page · page_size + entry) · kv_heads + h) · head_dim      [pages, page_size, heads, dim]
//   HND  k + ((page · kv_heads + h) · page_size + entry) · head_dim      [pages, heads, page_size, dim]
// (in elements of the cache's type; v alike with v_head_dim). Which slot each token goes to is given
// either as a slot mapping (vLLM: token t → slot, −1 skips a padding token) or as a page table
// (FlashInfer: token t belongs to sequence batch_indices[t] at index seq_positions[t] of that sequence's
// entries, which fill the pages indices[indptr[b] .. indptr[b+1]) in order).
//
// What is written, and nothing else:
//   q       rotated in place, or into q_out when given (q then only read)
//   k       only read; its rotated values go to the cache and, when k_out is given, to k_out (the live
//           tensor the engine's attention reads next: k_out may be k itself, the same view, to rotate in
//           place)
//   cache   for each token with a slot: lanes [k_offset, k_offset + spec.head_dim) of each key entry
//           (rotary lanes rotated, pass-through lanes of a partial rotary copied), lanes
//           [k_nope_offset, k_nope_offset + k_nope_dim) from k_nope (MLA's latent or nope part, not
//           rotated), and the v entry; other lanes of an entry are left as they were.
//
// Numerics: the fused call gives the bits of the unfused sequence — Rope::apply on q and k in their
// storage types, then each stored element converted to the cache's type (exact widening, or one
// rounding to nearest even; fp8: e4m3(float(x) / scale), dtype.hpp) and copied to its slot — for any
// pairing, partial rotary, storage and cache type and split of the work (tests/append_test.cpp). With
// a QK-norm: the RMSNorm is formed in float32 and rotated in float32 with one rounding to storage at
// the end (see QkNorm); the unfused norm-then-rotate rounds twice, so the two differ by at most one
// rounding of the storage type, and the fused one is the more accurate.
// Valid range: as Rope::apply (positions in [0, 2^47), int32 or int64, any order; M-RoPE included).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string_view>
#include <variant>
#include <vector>

#include "ropekit/rope.hpp"
#include "ropekit/tensor.hpp"

namespace ropekit {

namespace detail {
struct AppendAccess;  // src/attention: the caches' own appends (keys stored unrotated for ReRoPE / SelfExtend)
}  // namespace detail

// One layer's paged KV cache in the caller's memory (layouts in the file comment). A cache of
// contiguous token slots, as vLLM's slot mapping addresses it, is page_size = the block size.
struct PagedCache {
  void* k = nullptr;
  void* v = nullptr;  // null (and v_head_dim 0): keys only (MLA caches the latent in the key entry)
  CacheDType dtype = CacheDType::F32;
  PageLayout layout = PageLayout::NHD;
  std::int64_t num_pages = 0;
  std::int64_t page_size = 0;  // token entries per page
  std::int64_t kv_heads = 0;
  int head_dim = 0;      // lanes of a key entry: ≥ k_offset + spec.head_dim (and the nope lanes)
  int v_head_dim = 0;    // lanes of a value entry
  float k_scale = 1.0f;  // F8E4M3 only (finite, > 0); other types must leave 1
  float v_scale = 1.0f;

  std::int64_t slots() const { return num_pages * page_size; }
  // Throws ropekit::Error naming the first invalid field: a dtype or layout out of range, a count
  // ≤ 0 (v_head_dim < 0), more than 2^46 bytes, a scale not finite and > 0 (fp8) or ≠ 1 (others).
  // The pointers are the call's to check (prepare_append).
  void validate() const;
  // The key entry of kv head `head` in `slot` (no check: slots inside a validated call).
  void* key(std::int64_t slot, std::int64_t head) const;
  void* value(std::int64_t slot, std::int64_t head) const;
  // Elements between the entries of consecutive heads of one slot.
  std::int64_t head_stride(int lanes) const { return layout == PageLayout::NHD ? lanes : page_size * lanes; }
};

// Token t → slot (vLLM's slot_mapping); −1: the token is not cached (padding).
struct SlotMapping {
  const void* data = nullptr;
  IndexType type = IndexType::I64;
  std::int64_t count = 0;
};
inline SlotMapping slot_mapping(std::span<const std::int64_t> s) {
  return {s.data(), IndexType::I64, static_cast<std::int64_t>(s.size())};
}
inline SlotMapping slot_mapping(std::span<const std::int32_t> s) {
  return {s.data(), IndexType::I32, static_cast<std::int64_t>(s.size())};
}

// FlashInfer's append_paged_kv_cache addressing (int32, as its kernels take it). Sequence b owns the
// pages indices[indptr[b] .. indptr[b+1]); its entries 0, 1, 2, ... fill them in order, and its last
// page holds last_page_len[b] ∈ [1, page_size] of them (after this append), so it has
// (pages − 1) · page_size + last_page_len[b] entries. Token t goes to entry seq_positions[t] of sequence
// batch_indices[t] (FlashInfer's get_batch_indices_positions gives both).
struct PageTable {
  std::span<const std::int32_t> indices;
  std::span<const std::int32_t> indptr;         // batch + 1 values, indptr[0] = 0, non-decreasing
  std::span<const std::int32_t> last_page_len;  // batch values
  std::span<const std::int32_t> batch_indices;  // per token
  std::span<const std::int32_t> seq_positions;  // per token
};

// RMSNorm of each q and k head before the rotation (Qwen3's q_norm / k_norm; Gemma 3 with
// weight_offset = 1; OLMo 2 normalizes the whole projection: across_heads). In float32:
//   r = float32(1 / sqrt(mean(x²) + eps))   (the sum of squares and the root in double, rounded once)
//   y = (x · r) · (weight + weight_offset)  (two float32 roundings, weight + offset formed in float32)
// then y is rotated in float32 and rounded once to storage. Error against the exact norm-then-rotate:
// half an ulp of storage plus 8 ε·‖pair‖ (ε = 2^-24, ‖pair‖ the norm of y's pair). The unfused
// sequence (y rounded to storage, then rotated; Hugging Face also rounds before its weight multiply)
// rounds twice: the two differ by at most 1.5 ulp of storage times ‖pair‖.
struct QkNorm {
  std::span<const float> q_weight;  // head_dim values (across_heads: q heads × head_dim); empty: q not normed
  std::span<const float> k_weight;  // likewise for k
  float eps = 1e-6f;                // finite, > 0
  float weight_offset = 0.0f;       // Gemma's (1 + weight): 1
  bool across_heads = false;        // OLMo 2: one norm over all heads of a token
};

struct AppendArgs {
  Heads q;              // optional: the new queries (batch × seq tokens, like k)
  Heads q_out;          // optional: rotated q goes here, q only read
  Heads k;              // the new keys' rotary part (spec.head_dim lanes: rotary + pass-through), kv_heads heads
  Heads k_out;          // optional: the rotated keys are also written here (may be k itself: in place)
  Heads k_nope;         // optional: k_nope_dim lanes per kv head copied into the key entry, not rotated (MLA)
  Heads v;              // the new values (v_head_dim lanes); absent exactly when the cache has no values
  Positions positions;  // one per token (three streams for M-RoPE)
  std::variant<SlotMapping, PageTable> slots;
  int k_offset = 0;       // first lane of the key entry that k fills
  int k_nope_offset = 0;  // first lane k_nope fills
  int k_nope_dim = 0;
  QkNorm norm;
  int threads = 0;  // run(): 0 = ropekit::default_threads()
};

// One fused append, validated and resolved once (like RotateCall): views, positions, slots and page
// tables checked, the slot of every token resolved, the table pinned, the kernels chosen. Running it
// does no checks, locks or allocations beyond a per-thread buffer, so an engine splits rows() (the
// tokens) over its own threads; disjoint ranges may run concurrently. The buffer: prepare_append grows
// the preparing thread's; another thread's first run(first, last) of a call this size grows its own,
// and running out of memory there ends the process (noexcept). run() allocates what its threads need
// before writing anything, so out of memory is a std::bad_alloc with nothing written.
class AppendCall {
 public:
  AppendCall();
  ~AppendCall();
  AppendCall(AppendCall&&) noexcept;
  AppendCall& operator=(AppendCall&&) noexcept;

  std::int64_t rows() const;  // tokens
  void run(std::int64_t first, std::int64_t last) const noexcept;
  void run() const;  // every token on the library's threads

  // A decode step: the same tokens' new positions and cache slots (a slot mapping or a page table of
  // the same tokens), checked as prepare_append checks them — nothing else is checked again. Angles as
  // RotateCall::set_positions takes them; the bits of a fresh prepare_append. On bad positions or slots
  // it throws ropekit::Error and leaves the call as it was. Not while the call runs.
  void set_positions_and_slots(const Positions& positions, const std::variant<SlotMapping, PageTable>& slots);

  struct Resolved;

 private:
  friend struct detail::AppendAccess;
  std::unique_ptr<Resolved> r_;
};

// Errors (ropekit::Error naming the field and value; nothing is written): views that do not fit the
// rope or the cache (heads, lanes, dtypes, overlaps between written views or with the cache), lanes
// outside the key entry or overlapping, a cache with no pages or an invalid type or layout, a scale
// ≤ 0 or not finite (or ≠ 1 for a cache that is not fp8), a slot outside the cache (or negative other
// than −1), two tokens writing one slot, a page table whose indptr is not non-decreasing from 0, a page
// index outside the cache, a last_page_len outside [1, page_size], a token's sequence or entry outside
// its sequence, norm weights of the wrong length or eps ≤ 0, positions as Rope::apply checks them.
AppendCall prepare_append(const Rope& rope, const AppendArgs& args, const PagedCache& cache);
// prepare_append(rope, args, cache).run() in one call, as Rope::apply is prepare + run: the same checks,
// errors and bits, without the call object (nothing allocated once a thread has run a call of the size,
// the Rope's plan not pinned: it runs while the Rope exists).
void append(const Rope& rope, const AppendArgs& args, const PagedCache& cache);
// The same with the angles of exactly `table` — an engine's own cos/sin cache (import_cos_sin_cache,
// ropekit/cos_sin_cache.hpp; FlashInfer's fused rope + append takes one) or a table of this Rope's —
// as Rope::prepare(args, table) takes them; the call keeps it alive, and set_positions_and_slots reads
// it. Bit-identical to Rope::apply(args, *table) → convert → copy. Errors also: a null table, one
// built for other frequencies or another angle mode, a position outside it.
AppendCall prepare_append(const Rope& rope, const AppendArgs& args, const PagedCache& cache,
                          std::shared_ptr<const Table> table);
void append(const Rope& rope, const AppendArgs& args, const PagedCache& cache, std::shared_ptr<const Table> table);

// The slot each token of `args` writes (−1: none), as prepare_append resolves and checks it.
std::vector<std::int64_t> resolve_slots(const AppendArgs& args, const PagedCache& cache);

}  // namespace ropekit
