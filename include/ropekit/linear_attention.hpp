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
// O(seq² · head_dim). The two agree to float32 rounding (accumulated over the sequence: within
// 1e-5 relative for seq ≤ 1024 in the tests). Causal needs q_seq = k_seq (self-attention; token
// order is the causal order). Errors as for attention(); biases and windows are not accepted.
enum class LinearAttentionForm { Recurrent, Parallel };
void linear_attention(const Rope& rope, const AttentionArgs& args, bool causal = true,
                      LinearAttentionForm form = LinearAttentionForm::Recurrent);

}  // namespace ropekit
