// ropekit/kv_cache.hpp — a KV cache that stores keys rotated: append, K-shift as a pure rotation,
// erase, re-rotation when the plan changes, and attention of new queries against it.
//
//   ropekit::Rope rope(spec);
//   ropekit::KvCache cache(rope, {.capacity = 4096, .kv_heads = 8});
//   cache.append(rope, k, v, ropekit::positions(pos));                  // keys stored rotated
//   ropekit::attention(rope, q, ropekit::positions(pos), cache, out);   // q rotated on load
//   cache.shift(keep, cache.size(), -discard);                          // context shift: R(δ), magnitude 1
#pragma once

#include <cstdint>
#include <memory>
#include <string_view>

#include "ropekit/attention.hpp"
#include "ropekit/paged_kv_cache.hpp"
#include "ropekit/plan.hpp"
#include "ropekit/rope.hpp"
#include "ropekit/tensor.hpp"

namespace ropekit {

struct KvCacheShape {
  std::int64_t capacity = 0;  // tokens
  std::int64_t kv_heads = 0;
  int head_dim = 0;    // 0: the Rope's spec().head_dim; anything else must equal it
  int v_head_dim = 0;  // 0: head_dim
  DType dtype = DType::F32;
  // Threads of append (AppendArgs::threads): 0 = ropekit::default_threads(). Results never depend on it.
  int threads = 0;
  // The position regimes attention will read the keys with (attention.hpp), which decide how they
  // are stored so that no key is ever rotated twice on its way to a logit:
  //   none        rotated at the key's position j (R(j)k): plain attention reads them as stored.
  //   ReRope      unrotated: the far regime's key is R(0)k = k (ReRoPE's far logits need the key without
  //               its position; from a rotated key they would need one query rotation per key), and the
  //               near window is rotated on load at j — exactly the bits a rotated cache would hold.
  //   SelfExtend  unrotated: its keys are needed at j (neighbours) and at ⌊j/G⌋ (groups); each is one
  //               rotation of the stored key on load, bit for bit what a cache at either would store.
  //   DualChunk   rotated at j mod chunk_len: every regime reads the key there, so keys are read as
  //               stored; the regimes differ only in the query's position.
  // A key's stored position depends on its own position only, so a sequence that grows past a group
  // or chunk boundary during decode changes no cached key: the regime of each (query, key) pair is
  // decided when the logits are formed, from the two positions.
  PositionRegimes regimes;
};

// One sequence's keys and values, keys stored rotated (Forward, with cos_sin_scale) under the plan
// they were appended with (or as KvCacheShape::regimes says): a thin case of ropekit::PagedKvCache —
// one sequence in one page of `capacity` entries — with slot-indexed operations. Slots [0, size()) hold tokens in
// append order, each with its position. Not thread-safe for writes; attention() may read it from many threads.
class KvCache {
 public:
  // Errors: capacity ≤ 0, kv_heads ≤ 0, head_dim ≠ the rope's, v_head_dim < 0, an M-RoPE rope
  // (its three position streams per token are not cached yet), invalid regimes (validate_regimes),
  // a DualChunk chunk_size larger than the capacity.
  KvCache(const Rope& rope, KvCacheShape shape);
  ~KvCache();
  KvCache(KvCache&&) noexcept;
  KvCache& operator=(KvCache&&) noexcept;

  std::int64_t size() const { return size_; }
  std::int64_t capacity() const { return shape_.capacity; }
  const KvCacheShape& shape() const { return shape_; }
  // The plan the cached keys are rotated under.
  const Plan& plan() const;
  std::int64_t position(std::int64_t slot) const;
  // Slots [0, size()) as views (batch 1, seq = size()).
  Heads keys() const;
  Heads values() const;
  Positions positions() const;

  // Appends k (not yet rotated; batch 1, kv_heads heads) and v at `positions` (one stream). The
  // keys are rotated by `rope` into the cache in its storage type (one rounding: exactly what
  // rope.apply() writes; F32 storage within 5 ε·m·|pair| of exact, measured 2.6). When the cache
  // is empty it adopts rope's plan. Errors: more tokens than the free capacity (overflow), head
  // counts or dtypes that do not fit, a rope with another spec, or a rope whose plan differs from
  // the cached keys' (call rerotate(rope) first), a bad position. table: as PagedKvCache::append's.
  void append(const Rope& rope, const Heads& k, const Heads& v, Positions positions,
              std::shared_ptr<const Table> table = nullptr);

  // K-shift: slots [first, last) move by delta positions, their keys rotated by R(delta), a pure
  // rotation with magnitude 1 (unrotated keys — ReRope, SelfExtend — only change position; DualChunk's
  // keys turn by R(new − old stored position), each its own) — cos_sin_scale is applied once, at append, never again
  // (llama.cpp multiplies YaRN's magnitude in on every shift). Precision (F32 storage), against the exact m·R(p)k in
  // double (m = cos_sin_scale, |pair| = the pair's norm in the unrotated key): append is one rotation, within 5
  // ε·m·|pair| (ε = 2^−24; numerics.md: 3e-7); each shift adds at most 2.5 ε·m·|pair| (float32 cos/sin of δ·θ formed
  // accurately, one fma rounding per lane). So n shifts stay within (5 + 2.5n) ε·m·|pair| of rotating at p + Σδ;
  // measured: 3.6 after one shift, 82 after 1000 (errors of successive shifts do not line up). BF16/F16 storage adds
  // one rounding to the storage type per shift. Errors: a span outside [0, size()), a position that would fall below 0
  // (shifting before position 0) or reach 2^47. A refused shift changes nothing.
  void shift(std::int64_t first, std::int64_t last, std::int64_t delta);

  // Removes slots [first, last); later slots move down keeping their positions (llama.cpp's
  // seq_rm). Context shifting is erase(keep, keep + n) then shift(keep, size(), −n).
  void erase(std::int64_t first, std::int64_t last);
  void clear();

  // Re-rotates every cached key from plan() to rope's plan (dynamic NTK growing past its length,
  // LongRoPE switching short → long factors): each key is un-rotated (Inverse under the old plan)
  // and rotated again (Forward under the new one) in float32, then rounded once to storage.
  // Precision (F32 storage): within 15 ε·m·|pair| of the exact rotation under the new plan — three
  // rotations' worth (append, inverse, forward), against 5 for appending the unrotated keys anew;
  // measured ≤ 5.6. Returns false (and changes nothing) when the plans agree, and for unrotated keys
  // (ReRope, SelfExtend), which only adopt the new plan.
  bool rerotate(const Rope& rope);
  // The same, un-rotating with `from` — a Rope whose plan is the cached keys' — and its table, so
  // that a caller who re-rotates often (dynamic NTK, one step per token) builds no table for the
  // old plan. Identical results. Errors: from's plan differs from the cached keys'.
  bool rerotate(const Rope& from, const Rope& to);

  // The paged cache this one is: sequence 0, in one page of capacity entries (NHD), which an engine's
  // own kernels can read through its PagedCache and page table.
  const PagedKvCache& paged() const;

  // Throws ropekit::Error unless `rope` has the cache's spec layout (head_dim, rotary_dim,
  // pairing), angle mode and — when keys are cached — the plan they were rotated under.
  void require_compatible(const Rope& rope, std::string_view caller) const;

 private:
  void check_layout(const Rope& rope, std::string_view caller) const;
  struct State;
  KvCacheShape shape_;
  std::int64_t size_ = 0;
  std::unique_ptr<State> state_;
};

// Attention of new queries against a cache: q (batch 1, not yet rotated) is rotated by `rope` on
// load; keys come from the cache as stored (unrotated keys are rotated on load per regime). Mask
// positions: q_positions and the cache's positions. The regimes are the cache's: options.regimes must
// be unset or equal to them.
// Numerics: as attention() in attention.hpp — bit for bit rope.apply() on q, then attention() on the
// cached keys and values (tests/targets_test.cpp, every storage type).
// Errors: rope's plan differs from the cache's (its keys need rerotate first), shapes as above.
void attention(const Rope& rope, const Heads& q, Positions q_positions, const KvCache& cache, const Heads& out,
               const AttentionOptions& options = {});

}  // namespace ropekit
