// ropekit/linear_attention.hpp — RoFormer's linear attention with RoPE on the numerator.
#pragma once

#include "ropekit/attention.hpp"
#include "ropekit/rope.hpp"

namespace ropekit {

// Linear attention with RoPE (RoFormer §3.3, eq. 19), φ(x) = elu(x) + 1:
//   out_m = Σ_n (R_m φ(q_m))·(R_n φ(k_n)) v_n  /  Σ_n φ(q_m)·φ(k_n)
// with n ≤ m when causal (n over all keys otherwise). The rotation (Forward, with cos_sin_scale)
// is on the numerator only, so the denominator stays positive. Recurrent keeps a head_dim ×
// v_head_dim state per head and costs O(seq · head_dim · v_head_dim); Parallel sums explicitly,
// O(seq² · head_dim).
//   Precision: float32 — φ, the rotation (ropekit/call.hpp's arithmetic) and the sums; the sums
//     accumulate rounding over the sequence, so the error grows with it.
//   Error: both forms within 1e-5 · max|out| of a double-precision oracle, and of each other, for the
//     tested shapes (seq 120, head_dim 32, GQA; measured 2.6e-7 recurrent, 7e-7 parallel), on every
//     SIMD target (tests/linear_attention_test.cpp).
//   Valid range: positions in [0, 2^47); causal needs q_seq = k_seq (self-attention; token order is
//     the causal order).
// Errors as for attention(); biases and windows are not accepted.
enum class LinearAttentionForm { Recurrent, Parallel };
void linear_attention(const Rope& rope, const AttentionArgs& args, bool causal = true,
                      LinearAttentionForm form = LinearAttentionForm::Recurrent);

}  // namespace ropekit
