// ropekit/attention.hpp — where RoPE is consumed: softmax attention with the rotation fused into
// its Q/K tile loads, a KV cache that stores rotated keys (append, K-shift, erase, re-rotation),
// and RoFormer's linear attention with RoPE on the numerator.
//
//   ropekit::Rope rope(spec);
//   ropekit::KvCache cache(rope, {.capacity = 4096, .kv_heads = 8});
//   cache.append(rope, k, v, ropekit::positions(pos));          // keys stored rotated
//   ropekit::attention(rope, q, ropekit::positions(pos), cache, out);   // q rotated on load
//   cache.shift(keep, cache.size(), -discard);                  // context shift: R(δ), magnitude 1
//
// Arithmetic is float32 (storage F32, BF16 or F16; outputs F32 or the storage type of q). Only q
// and k rotate; values never do.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string_view>
#include <variant>
#include <vector>

#include "ropekit/encodings.hpp"
#include "ropekit/plan.hpp"
#include "ropekit/rope.hpp"
#include "ropekit/tensor.hpp"

namespace ropekit {

// Additive biases on the logits (after the softmax scale), each for query head h, query position
// i, key position j (the mask positions of AttentionArgs):
//   AlibiBias           −slopes[h] · |i − j|                      slopes: one per query head
//   RelativeBucketBias  table[t5_bucket(buckets, j − i) · q_heads + h]   HF T5's Embedding(num_buckets, heads)
//   DenseBias           data[((b·heads + h)·queries + s)·keys + t] for query token s and key token t
//                       of batch b; batch may be 1 (shared) or the batch, heads 1 or the query heads
struct AlibiBias {
  std::vector<float> slopes;
};
struct RelativeBucketBias {
  T5Buckets buckets;
  std::vector<float> table;  // num_buckets × q_heads, row-major
};
struct DenseBias {
  const float* data = nullptr;
  std::int64_t batch = 1;
  std::int64_t heads = 1;
  std::int64_t queries = 0;
  std::int64_t keys = 0;
};
using AttentionBias = std::variant<std::monostate, AlibiBias, RelativeBucketBias, DenseBias>;

struct AttentionOptions {
  bool causal = true;        // key j visible from query i only if j ≤ i (mask positions)
  std::int64_t window = 0;   // > 0: also i − j < window (Mistral / Gemma sliding window, HF's rule)
  // The softmax scale before the plan's softmax_scale_mult: 1/sqrt(head_dim) when absent (Gemma 3:
  // query_pre_attn_scalar^−0.5). The attention that takes a Rope multiplies in
  // plan().softmax_scale_mult (DeepSeek's mscale²); the one without a Rope takes `softmax_scale_mult`.
  std::optional<double> softmax_scale;
  double softmax_scale_mult = 1.0;  // only read by the overload without a Rope
  AttentionBias bias;
  int threads = 0;  // 0: ropekit::default_threads()
};

// q: [batch, q_seq, q_heads, head_dim], k: [batch, k_seq, kv_heads, head_dim],
// v: [batch, k_seq, kv_heads, v_head_dim], out: [batch, q_seq, q_heads, v_head_dim].
// q_heads must be a multiple of kv_heads (GQA; MQA has kv_heads = 1): query head h reads kv head
// h / (q_heads / kv_heads), as HF's repeat_kv. Query token (b, s) sees key tokens (b, t) only.
struct AttentionArgs {
  Heads q, k, v, out;
  Positions q_positions;  // RoPE positions (M-RoPE: 3 streams)
  Positions k_positions;
  // Positions the causal mask, sliding window and biases compare; absent (count 0): q_positions /
  // k_positions, which then must have one stream (M-RoPE callers give token order here).
  Positions q_mask_positions;
  Positions k_mask_positions;
  int head_dim = 0;    // 0: the Rope's spec().head_dim (required without a Rope)
  int v_head_dim = 0;  // 0: head_dim
};

// Softmax attention on q and k as given (already rotated, or a model without RoPE: ALiBi, T5).
//
// Online softmax over key tiles (memory O(threads · tile), never O(q_seq · k_seq)): per query row
// a running maximum, sum and float32 accumulator, rescaled as each tile arrives. A query that sees
// no key gets zeros; NaN inputs give NaN outputs. Precision: against a double-precision softmax of
// the same q, k, v (as stored), each output is within 1e-6 · (1 + R) · max|v|, R the row's range of
// visible logits (float32 rounding of the dot products, exponentials and sums; ≈ 8 float32 ulp;
// tests check it for head_dim ≤ 256 and k_seq ≤ 4100 and measure ≤ 0.08 of it). Results do not
// depend on the thread count; they may differ between SIMD targets (FMA contraction, Exp).
// Errors (ropekit::Error naming the field): shapes or dtypes that do not fit, q_heads not a
// multiple of kv_heads, positions of the wrong count, a bias whose shape does not fit, window < 0.
void attention(const AttentionArgs& args, const AttentionOptions& options = {});

// The same with RoPE fused into the tile loads: each Q and K tile is rotated by `rope` (Forward,
// including cos_sin_scale) into a thread-local buffer in the storage type — exactly what
// rope.apply() would have written — and consumed from there; no rotated copy of q or k is made.
// Equals rope.apply() followed by attention(args) bit for bit (the same tiles, the same order).
void attention(const Rope& rope, const AttentionArgs& args, const AttentionOptions& options = {});

struct KvCacheShape {
  std::int64_t capacity = 0;  // tokens
  std::int64_t kv_heads = 0;
  int head_dim = 0;    // 0: the Rope's spec().head_dim; anything else must equal it
  int v_head_dim = 0;  // 0: head_dim
  DType dtype = DType::F32;
};

// One sequence's keys and values, keys stored rotated (Forward, with cos_sin_scale) under the plan
// they were appended with. Slots [0, size()) hold tokens in append order, each with its position.
// Not thread-safe for writes; attention() may read it from many threads.
class KvCache {
 public:
  // Errors: capacity ≤ 0, kv_heads ≤ 0, head_dim ≠ the rope's, v_head_dim < 0, an M-RoPE rope
  // (its three position streams per token are not cached yet).
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
  // keys are rotated by `rope` into the cache in its storage type (one rounding). When the cache
  // is empty it adopts rope's plan. Errors: more tokens than the free capacity (overflow), head
  // counts or dtypes that do not fit, a rope with another spec, or a rope whose plan differs from
  // the cached keys' (call rerotate(rope) first), a bad position.
  void append(const Rope& rope, const Heads& k, const Heads& v, Positions positions);

  // K-shift: slots [first, last) move by delta positions, their keys rotated by R(delta), a pure
  // rotation with magnitude 1 — cos_sin_scale is applied once, at append, never again (llama.cpp
  // multiplies YaRN's magnitude in on every shift). Precision (F32 storage), against the exact
  // m·R(p)k in double (m = cos_sin_scale, |pair| = the pair's norm in the unrotated key): append
  // is one rotation, within 5 ε·m·|pair| (ε = 2^−24; numerics.md: 3e-7); each shift adds at most 2.5 ε·m·|pair|
  // (float32 cos/sin of δ·θ formed accurately, one fma rounding per lane). So n shifts stay within
  // (5 + 2.5n) ε·m·|pair| of rotating at p + Σδ; measured: 3.6 after one shift, 82 after 1000
  // (errors of successive shifts do not line up). BF16/F16 storage adds one rounding to the
  // storage type per shift. Errors: a span outside [0, size()), a position that would fall below 0
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
  // measured ≤ 5.6. Returns false (and changes nothing) when the plans agree.
  bool rerotate(const Rope& rope);

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
// load; keys come from the cache as stored. Mask positions: q_positions and the cache's positions.
// Errors: rope's plan differs from the cache's (its keys need rerotate first), shapes as above.
void attention(const Rope& rope, const Heads& q, Positions q_positions, const KvCache& cache,
               const Heads& out, const AttentionOptions& options = {});

// Linear attention with RoPE (RoFormer §3.3, eq. 19), φ(x) = elu(x) + 1:
//   out_m = Σ_n (R_m φ(q_m))·(R_n φ(k_n)) v_n  /  Σ_n φ(q_m)·φ(k_n)
// with n ≤ m when causal (n over all keys otherwise). The rotation (Forward, with cos_sin_scale)
// is on the numerator only, so the denominator stays positive. Recurrent keeps a head_dim ×
// v_head_dim state per head and costs O(seq · head_dim · v_head_dim); Parallel sums explicitly,
// O(seq² · head_dim). The two agree to float32 rounding (accumulated over the sequence: within
// 1e-5 relative for seq ≤ 1024 in the tests). Causal needs q_seq = k_seq (self-attention; token
// order is the causal order). Errors as for attention(); biases and windows are not accepted.
enum class LinearAttentionForm { Recurrent, Parallel };
void linear_attention(const Rope& rope, const AttentionArgs& args, bool causal = true,
                      LinearAttentionForm form = LinearAttentionForm::Recurrent);

}  // namespace ropekit
