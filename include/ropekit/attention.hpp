// ropekit/attention.hpp — where RoPE is consumed: softmax attention with the rotation fused into
// its Q/K tile loads (the KV cache is in kv_cache.hpp, linear attention in linear_attention.hpp).
//
//   ropekit::Rope rope(spec);
//   ropekit::attention(rope, {.q = q, .k = k, .v = v, .out = out, .q_positions = pos, .k_positions = pos});
//
// Arithmetic is float32 (storage F32, BF16 or F16; outputs F32 or the storage type of q). Only q
// and k rotate; values never do.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
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

// Position regimes: training-free context extension that keeps every relative position a query sees
// inside the trained range while attending to the whole context. The logit of query i and key j (mask
// positions) is scale·⟨R(P_q(i)) q, R(P_k(j)) k⟩ with (P_q, P_k) taken from one of a few regimes chosen
// per (i, j); the regimes' scores are merged before one online softmax (never an N × N matrix):
//   ReRope      Su (2023): regime 0 (i − j < window): P_q = i, P_k = j; regime 1: P_q = window,
//               P_k = 0 — the relative position is i − j inside the window and the constant `window`
//               beyond it.
//   SelfExtend  Jin et al. (2024), "LLM Maybe LongLM": regime 0 (i − j < window, the neighbours):
//               P_q = i, P_k = j; regime 1 (grouped): P_q = ⌊i/G⌋ + window − ⌊window/G⌋, P_k = ⌊j/G⌋.
//   DualChunk   An et al. (2024), Qwen2.5-1M as vLLM runs it: chunk_len c = chunk_size − local_size;
//               P_k = j mod c in every regime; regime 0 (intra, ⌊i/c⌋ = ⌊j/c⌋): P_q = i mod c;
//               regime 1 (successive, ⌊i/c⌋ = ⌊j/c⌋ + 1): P_q = min(i mod c + c, chunk_size);
//               regime 2 (inter, further back): P_q = min(2c − 1, chunk_size).
// The largest relative position a query at i sees: ReRope w; DualChunk chunk_size; SelfExtend
// ⌊i/G⌋ + W − ⌊W/G⌋ (choose G ≥ (N − W)/(L0 − W) to stay inside a trained length L0). The rotations
// are the Rope's own (frequencies, magnitude, pairing), so regimes combine with any scaling.
// Attention with regimes is the fused tile loop of plain attention with each K tile rotated once per
// regime it needs; where one regime covers a whole row (w ≥ N, W ≥ N, one chunk) the arithmetic is
// plain attention's, bit for bit.
//   Error: against a double-precision softmax whose logits come from the relative-position matrix,
//     scale·f(i)·m²·⟨R(rel(i, j)) q, k⟩ on q and k as stored (unrotated; m = cos_sin_scale, f the log-n
//     factor), each float32 output is within 1e-6·(1 + R)·max|v| + 2.2·δ·max|v|, δ = scale·f·m²·(10ε + 2u)
//     ·|q_i|·max_j |k_j| (two rotations of 5ε·m each, u = the storage type's unit roundoff, 0 for float32).
//     Measured over tests/regimes_test.cpp on every SIMD target: ≤ 0.021 of that bound.
namespace regimes {
struct ReRope {
  std::int64_t window = 0;  // w > 0
  bool operator==(const ReRope&) const = default;
};
struct SelfExtend {
  std::int64_t window = 0;  // W ≥ group
  std::int64_t group = 0;   // G ≥ 1
  bool operator==(const SelfExtend&) const = default;
};
struct DualChunk {
  std::int64_t chunk_size = 0;  // > local_size
  std::int64_t local_size = 0;  // ≥ 0
  bool operator==(const DualChunk&) const = default;
};
}  // namespace regimes
using PositionRegimes = std::variant<std::monostate, regimes::ReRope, regimes::SelfExtend, regimes::DualChunk>;

// Throws ropekit::Error naming the parameter (w ≤ 0, G < 1, W < G, local_size < 0, chunk_size ≤
// local_size, values of 2^47 or more). `what` prefixes the message (the caller's field name).
void validate_regimes(const PositionRegimes& regimes, std::string_view what = "regimes");
// The same checks, the messages spelling each parameter as `names` says (a front with spellings of its own: the
// lab's methods, whose w, W, G, chunk and local set these fields): "<prefix><name> = <value>: must be ...".
struct RegimeNames {
  std::string_view prefix = "regimes.";
  std::string_view window = "window", group = "group", chunk_size = "chunk_size", local_size = "local_size";
};
void validate_regimes(const PositionRegimes& regimes, const RegimeNames& names);
// How many regimes the variant has (1 for none) and the one query i and key j use (positions ≥ 0).
int regime_count(const PositionRegimes& regimes);
int regime_of(const PositionRegimes& regimes, std::int64_t i, std::int64_t j);
// The positions regime r rotates query position i and key position j to.
std::int64_t regime_query_position(const PositionRegimes& regimes, int r, std::int64_t i);
std::int64_t regime_key_position(const PositionRegimes& regimes, int r, std::int64_t j);
// A short text for messages and tables: "rerope(w=256)", "self_extend(W=128,G=8)", "dca(chunk=512,local=16)".
std::string to_string(const PositionRegimes& regimes);

struct AttentionOptions {
  bool causal = true;       // key j visible from query i only if j ≤ i (mask positions)
  std::int64_t window = 0;  // > 0: also i − j < window (Mistral / Gemma sliding window, HF's rule)
  // The softmax scale before the plan's softmax_scale_mult: 1/sqrt(head_dim) when absent (Gemma 3:
  // query_pre_attn_scalar^−0.5). The attention that takes a Rope multiplies in
  // plan().softmax_scale_mult (DeepSeek's mscale²); the one without a Rope takes `softmax_scale_mult`.
  std::optional<double> softmax_scale;
  double softmax_scale_mult = 1.0;  // only read by the overload without a Rope
  // Logit soft-capping (Gemma 2's attn_logit_softcapping): the scaled logits become cap·tanh(logits / cap) before the
  // bias and mask, in float32 (tanh of the float32 quotient, times cap). Absent: none; must be positive and finite.
  std::optional<double> logit_softcap;
  AttentionBias bias;
  // Context extension (see PositionRegimes above); needs `causal`, one position stream and no bias.
  PositionRegimes regimes;
  // > 0: log-n query scaling (Qwen v1's use_logn_attn; ReRoPE's patch): the logits of the query at
  // position i are multiplied by max(1, ln(i + 1) / ln(logn_length)), taken in double and rounded
  // into the float32 softmax scale, so queries at i + 1 ≤ logn_length are exactly unscaled.
  std::int64_t logn_length = 0;
  int threads = 0;  // 0: ropekit::default_threads()
  // The rotations on load (q, and keys a cache keeps unrotated) with the angles of exactly this table —
  // an engine's own cos/sin cache (import_cos_sin_cache) whose keys were appended with it — as
  // Rope::prepare(args, table) takes them; null: the Rope's own. Only with a Rope. Errors: a table built
  // for other frequencies or another angle mode, a (regime's) position outside it.
  std::shared_ptr<const Table> table;
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
  int head_dim = 0;    // 0: the Rope's spec().head_dim, or without a Rope q.head_dim (a bshd/bhsd view's)
  int v_head_dim = 0;  // 0: head_dim
};

// Softmax attention on q and k as given (already rotated, or a model without RoPE: ALiBi, T5).
//
// Online softmax over key tiles (memory O(threads · tile), never O(q_seq · k_seq)): per query row
// a running maximum, sum and float32 accumulator, rescaled as each tile arrives. A query that sees
// no key gets zeros; NaN inputs give NaN outputs.
//   Precision: float32 — dot products and PV accumulation with FMAs, Highway's Exp (≤ 1 ulp), online
//     softmax over 64-key tiles; bf16/fp16 outputs are rounded once from the float32 result.
//   Error: against a double-precision softmax of the same q, k, v (as stored), each float32 output is
//     within 1e-6 · (1 + R) · max|v|, R the row's range of visible logits (≈ 8 float32 ulp of rounding
//     in the dot products, exponentials and sums); a bf16/fp16 output adds at most half an ulp of its
//     type. Measured over the case table on every SIMD target: ≤ 0.092 of the float32 bound; narrowed
//     outputs reach 0.98 of the bound with the half ulp (tests/targets_test.cpp). Results do not depend
//     on the thread count; they may differ between SIMD targets (FMA contraction, Exp).
//   Valid range: any strides; tested for head_dim ≤ 256, k_seq ≤ 4100, positions below 2^31.
// Errors (ropekit::Error naming the field): shapes or dtypes that do not fit, q_heads not a
// multiple of kv_heads, positions of the wrong count, a bias whose shape does not fit, window < 0.
void attention(const AttentionArgs& args, const AttentionOptions& options = {});

// The same with RoPE fused into the tile loads: each Q and K tile is rotated by `rope` (Forward,
// including cos_sin_scale) into a thread-local buffer in the storage type — exactly what
// rope.apply() would have written — and consumed from there; no rotated copy of q or k is made.
// Equals rope.apply() followed by attention(args) bit for bit (the same tiles, the same order), on
// every SIMD target; numerics otherwise as above, on the rotated values as apply() stores them.
void attention(const Rope& rope, const AttentionArgs& args, const AttentionOptions& options = {});

}  // namespace ropekit
