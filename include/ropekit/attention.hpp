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
