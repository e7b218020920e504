// ropekit/paged_kv_cache.hpp — many sequences in one paged KV cache: the fused append per token,
// per-sequence operations (erase, shift = K-shift, seq_cp: llama.cpp's seq_rm, seq_add, seq_cp), re-rotation per
// sequence, and attention of a batch of sequences with ragged lengths (decode: one query per sequence; prefill over a
// cached prefix).
//
//   ropekit::PagedKvCache cache(rope, {.num_pages = 1024, .page_size = 16, .kv_heads = 8,
//                                      .dtype = ropekit::CacheDType::BF16, .max_sequences = 64});
//   cache.append(rope, seq_of_token, {.q = q, .k = k, .v = v, .positions = ropekit::positions(pos)});
//   ropekit::attention(rope, q, ropekit::positions(pos), seq_of_token, cache, out);
//   cache.shift(seq, 100, -1, -50);        // keys at positions ≥ 100 of `seq` move back by 50: R(−50)
//
// Memory: the cache owns num_pages pages in the layout of ropekit/append.hpp (`cache()` is its
// PagedCache, `page_table()` FlashInfer's view of it, so an engine's own kernels can read it). Pages
// are handed to sequences from a free list as they grow and returned when they shrink. Entry i of a
// sequence lives in its page pages(seq)[i / page_size], entry i % page_size; positions(seq)[i] is
// its position. Keys are stored rotated (Forward, cos_sin_scale included) under the plan of the
// sequence (plan(seq)), which a sequence adopts from the rope of its first append; sequences may
// have different plans (dynamic NTK or LongRoPE at different lengths: ropekit/rope_set.hpp).
//
// Numerics: append is ropekit::append (bit-identical to rope.apply → convert → copy). shift's
// K-shift is KvCache::shift's pure rotation R(δ) with magnitude 1 (f32/bf16/f16 entries rotated in
// place, one rounding to storage; fp8 entries widened × k_scale, rotated in float32, stored
// e4m3(x / k_scale): one more fp8 rounding per shift). rerotate is KvCache::rerotate's (un-rotate
// under the old plan, rotate under the new one in float32, one rounding to storage). attention: for
// each run of query tokens of one sequence, bit for bit ropekit's attention (attention.hpp: q rotated
// on load, keys read as stored) over that sequence's entries in entry order — so equal to a KvCache
// holding the same tokens; fp8 entries are read as e4m3 · scale, rounded to float32.
// Cost: the attention tiles read a sequence's keys and values where they are, through its pages
// (1.00–1.05× the time of contiguous caches for 16 interleaved sequences, docs/performance-log.md); fp8
// entries are widened × scale as each tile loads them (a decode over them takes 0.8–1.0× the time of
// bf16 entries). Keys rotated on load by position regimes, when the sequence's pages do not lie at one
// stride, are gathered first (copied once per call, per page on the library's threads, into per-thread
// buffers that grow to the longest sequence read and are kept). ropekit::KvCache is this
// cache with one sequence in one page of `capacity` entries. Not thread-safe for writes; attention() only
// reads.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string_view>

#include "ropekit/append.hpp"
#include "ropekit/attention.hpp"
#include "ropekit/plan.hpp"
#include "ropekit/rope.hpp"

namespace ropekit {

struct PagedKvCacheShape {
  std::int64_t num_pages = 0;
  std::int64_t page_size = 0;  // entries per page
  std::int64_t kv_heads = 0;
  int head_dim = 0;    // 0: the Rope's head_dim (anything else must equal it)
  int v_head_dim = 0;  // 0: head_dim
  CacheDType dtype = CacheDType::F32;
  PageLayout layout = PageLayout::NHD;
  float k_scale = 1.0f;  // fp8 only
  float v_scale = 1.0f;
  int max_sequences = 0;  // sequence ids are [0, max_sequences)
  // The position regimes attention will read the keys with, which decide how they are stored so that
  // no key is rotated twice on its way to a logit (as KvCacheShape::regimes, kv_cache.hpp): none → rotated
  // at the entry's position; ReRope / SelfExtend → unrotated (rotated on load per regime); DualChunk →
  // rotated at position mod chunk_len. With regimes, append takes keys and values only (no q, q_out,
  // k_out or norm: attention rotates the queries per regime).
  PositionRegimes regimes;
};

class PagedKvCache {
 public:
  // Errors: a shape field out of range (named), invalid regimes (validate_regimes), an M-RoPE rope (one
  // position per entry is kept).
  PagedKvCache(const Rope& rope, PagedKvCacheShape shape);
  ~PagedKvCache();
  PagedKvCache(PagedKvCache&&) noexcept;
  PagedKvCache& operator=(PagedKvCache&&) noexcept;

  const PagedKvCacheShape& shape() const { return shape_; }
  // The memory, for ropekit::append / prepare_append and an engine's kernels.
  const PagedCache& cache() const;
  std::int64_t free_pages() const;
  std::int64_t length(int seq) const;                      // entries
  std::span<const std::int64_t> positions(int seq) const;  // per entry
  std::span<const std::int32_t> pages(int seq) const;      // the sequence's pages, in entry order
  // The plan seq's keys are rotated under. Errors: an empty sequence (it has none yet).
  const Plan& plan(int seq) const;

  // Appends the tokens of args (batch 1; token t to sequence seq_of[t]) at the end of their
  // sequences — q rotated as args says, k rotated into the new entries, v copied (ropekit::append;
  // args.slots must be left default: the cache resolves them). Errors (nothing changes): a sequence
  // id outside [0, max_sequences), seq_of not one per token, too few free pages, a rope whose spec
  // or angle mode differ from the cache's, a rope whose plan differs from a non-empty sequence's
  // (rerotate it first), positions with more than one stream, and everything ropekit::append refuses.
  // table: the keys (and q) rotated with exactly its angles, as ropekit::append(rope, args, cache, table)
  // — an engine's cos/sin cache; attention then takes it in AttentionOptions::table. The cache records
  // rope's plan for the sequence as without it (shift's K-shift and rerotate use the Rope's angles).
  void append(const Rope& rope, std::span<const std::int32_t> seq_of, AppendArgs args,
              std::shared_ptr<const Table> table = nullptr);

  // The sequence operations over positions [p0, p1) (p1 < 0: to the end, p0 < 0: from 0), llama.cpp's
  // seq_rm / seq_add / seq_cp under the one vocabulary's names (docs/conventions.md).
  // erase: removes those entries; later entries move down keeping their positions; pages no longer
  // needed return to the free list.
  void erase(int seq, std::int64_t p0, std::int64_t p1);
  // shift: those entries move by delta positions, their keys turned by R(delta) (K-shift). Errors:
  // a position that would fall below 0 or reach 2^47 (nothing changes).
  void shift(int seq, std::int64_t p0, std::int64_t p1, std::int64_t delta);
  // llama.cpp's names, kept for one version.
  [[deprecated("renamed erase (docs/conventions.md)")]] void seq_rm(int seq, std::int64_t p0, std::int64_t p1) {
    erase(seq, p0, p1);
  }
  [[deprecated("renamed shift (docs/conventions.md)")]] void seq_add(int seq, std::int64_t p0, std::int64_t p1,
                                                                     std::int64_t delta) {
    shift(seq, p0, p1, delta);
  }
  // seq_cp: copies those entries of src to the end of dst (keys, values, positions; dst adopts src's
  // plan when empty, else the plans must agree). Errors: src == dst, too few free pages.
  void seq_cp(int src, int dst, std::int64_t p0, std::int64_t p1);
  // Removes every entry of seq (its plan too).
  void seq_clear(int seq);

  // The same operations over entries [first, last) of seq in entry order, whatever their positions
  // (KvCache's slots). Errors: a span outside [0, length(seq)); shift_entries as shift.
  void erase_entries(int seq, std::int64_t first, std::int64_t last);
  void shift_entries(int seq, std::int64_t first, std::int64_t last, std::int64_t delta);

  // Re-rotates seq's keys from plan(seq) to rope's plan (KvCache::rerotate: un-rotated under the old plan
  // and rotated under the new one in float32, one rounding to storage). Returns false (changing nothing
  // but adopting the plan) when they agree, when the keys are stored unrotated (ReRope, SelfExtend), or
  // when the sequence is empty.
  bool rerotate(int seq, const Rope& rope);
  // The same, un-rotating with `from` — a Rope whose plan is the sequence's — and its table, so that a
  // caller who re-rotates often (dynamic NTK, a step per token) builds no table for the old plan.
  // Identical results. Errors: from's plan is not the sequence's.
  bool rerotate(int seq, const Rope& from, const Rope& to);

  // FlashInfer's page table of sequences `seqs` (indices, indptr, last_page_len), into the given
  // vectors: an engine's attention kernel can read the cache with it.
  void page_table(std::span<const std::int32_t> seqs, std::vector<std::int32_t>& indices,
                  std::vector<std::int32_t>& indptr, std::vector<std::int32_t>& last_page_len) const;

  // Throws unless rope has the cache's layout (head_dim, rotary_dim, pairing) and angle mode.
  void require_layout(const Rope& rope, std::string_view caller) const;

 private:
  struct State;
  PagedKvCacheShape shape_;
  std::unique_ptr<State> state_;
};

// Attention of new queries against their sequences' cached entries: q (batch 1; token t of sequence
// seq_of[t], at q_positions[t]) rotated by `rope` on load; each query sees its own sequence's entries
// under options' mask (causal by positions, window) and the cache's position regimes (keys stored
// unrotated are rotated on load per regime). Numerics: the file comment. Errors: seq_of not one per
// token or naming a sequence outside the cache, rope's plan differs from a non-empty sequence's
// (rerotate first), options.regimes set and different from the cache's, shapes as attention() checks
// them.
void attention(const Rope& rope, const Heads& q, Positions q_positions, std::span<const std::int32_t> seq_of,
               const PagedKvCache& cache, const Heads& out, const AttentionOptions& options = {});

}  // namespace ropekit
