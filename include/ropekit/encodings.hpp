// ropekit/encodings.hpp — the positional encodings RoPE is compared with.
//
//   sinusoidal absolute   added to the token embedding (Vaswani et al. 2017)
//   learned absolute      a trained table, looked up (GPT-2, BERT); nothing exists past its end
//   ALiBi                 a per-head linear bias on attention logits (Press et al. 2022)
//   T5 relative buckets   a learned per-head bias indexed by a log-bucketed distance (Raffel et al. 2020)
//
// ALiBi and T5 biases are consumed by ropekit::attention (ropekit/attention.hpp) through
// AttentionBias; the functions here give their numbers for inspection and tests.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace ropekit {

// Sinusoidal absolute encoding (Vaswani et al. 2017, §3.5), for each position p and i < dim/2:
//   PE(p, 2i) = sin(p · base^(−2i/dim)),   PE(p, 2i+1) = cos(p · base^(−2i/dim))
// out holds positions.size() rows of `dim` floats. Precision: the frequency and the angle are
// formed in double and reduced mod 2π exactly (the Table's Accurate mode), so every value is
// within 6e-8 (one float32 rounding) of the exact encoding for 0 ≤ p < 2^31 (valid to 2^47).
// Errors: dim not even and > 0, base not finite and > 1, a position outside [0, 2^47), out of
// the wrong size.
void sinusoidal_encoding(std::span<const std::int64_t> positions, int dim, std::span<float> out, double base = 10000.0);

// A learned absolute table: num_positions rows of `dim` floats (row p is the embedding of
// position p). Unlike RoPE it has no value past its last row: looking one up is an error.
class LearnedPositionTable {
 public:
  // weights: num_positions × dim, row-major. Errors: dim ≤ 0, weights.size() not a multiple of dim,
  // an empty table.
  LearnedPositionTable(std::vector<float> weights, int dim);

  std::int64_t num_positions() const { return num_positions_; }
  int dim() const { return dim_; }
  // Copies row positions[t] to out[t·dim, (t+1)·dim) exactly. Errors (ropekit::Error naming the
  // token and the position): a position < 0 or ≥ num_positions(); out of the wrong size.
  void lookup(std::span<const std::int64_t> positions, std::span<float> out) const;

 private:
  std::vector<float> weights_;
  int dim_;
  std::int64_t num_positions_;
};

// ALiBi head slopes (Press et al. 2022; the authors' code, also BLOOM, MPT, ggml). With
// n = the largest power of two ≤ num_heads:
//   the first n heads:  slope_h = 2^(−max_bias·(h+1)/n),  h = 0..n−1   (8/n steps for max_bias 8)
//   the other heads:    the odd-numbered slopes of the 2n-head sequence, 2^(−max_bias·(2j+1)/(2n)),
//                       j = 0..num_heads−n−1 (they interleave between the first n)
// Precision: each slope is 2^x with x formed exactly in double (a power of two or within 1 ulp of
// the double result), then rounded to float32 once. Errors: num_heads < 1, max_bias not finite
// and > 0.
std::vector<float> alibi_slopes(int num_heads, double max_bias = 8.0);

// The ALiBi bias added to the logit of query position q and key position k:
//   −slope · |q − k|   (causal models only see k ≤ q, where it is the paper's −slope·(q − k))
// Computed in float32 as slope · float(|q − k|); exact for |q − k| < 2^24 (the attention kernels evaluate
// the same expression per logit).
float alibi_bias(float slope, std::int64_t query_position, std::int64_t key_position);

// T5 relative-position buckets (Raffel et al. 2020; Hugging Face T5Attention._relative_position_bucket).
// relative_position = key_position − query_position. Bidirectional: half the buckets for keys
// after the query (relative_position > 0), half for the rest; causal: only keys at or before the
// query, later keys share bucket 0. Within each half of B buckets, distances below B/2 have a
// bucket each; larger ones are bucketed logarithmically up to max_distance:
//   bucket = B/2 + trunc(log(n / (B/2)) / log(max_distance / (B/2)) · (B − B/2)), at most B − 1
// The logarithm is evaluated in float32 as PyTorch does (the boundary cases at powers of two come
// out exact; the others lie far from integers), so buckets equal Hugging Face's.
struct T5Buckets {
  int num_buckets = 32;       // HF default (relative_attention_num_buckets)
  int max_distance = 128;     // HF default (relative_attention_max_distance)
  bool bidirectional = true;  // encoder self-attention: true; decoder self-attention: false

  // Errors: num_buckets < 2 (< 4 when bidirectional: each half needs an exact and a log range),
  // max_distance not greater than the exact range.
  void validate() const;
};
int t5_bucket(const T5Buckets& buckets, std::int64_t relative_position);

}  // namespace ropekit
