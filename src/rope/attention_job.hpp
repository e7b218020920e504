// src/rope/attention_job.hpp — the attention call shape: one softmax-attention call, resolved by the
// engine (src/attention/attention.cpp validates the arguments, prepares the rotations and schedules
// the work) into plain data that a backend's tile loop reads (the CPU's: src/cpu/attention-inl.h,
// cpu::run_attention in rope/backend.hpp). Internal: it may change with any commit.
#pragma once

#include <array>
#include <cstdint>

#include "rope/call_shape.hpp"

namespace ropekit::detail {

// ALiBi's logit bias −slope · |q − k| (Press et al. 2022), in float32 as slope · float(|q − k|): exact for
// |q − k| < 2^24. The one definition: the tile loop evaluates it per logit, ropekit::alibi_bias
// (ropekit/encodings.hpp) returns it.
inline float alibi_logit_bias(float slope, std::int64_t query_position, std::int64_t key_position) {
  const std::int64_t distance = query_position - key_position;
  return -slope * float(distance < 0 ? -distance : distance);
}

enum class BiasKind { None, Alibi, RelativeBucket, Dense };

// The regime of query position i and key position j (ropekit::regime_of, inlined for the tile loop).
struct RegimeRule {
  enum class Kind { None, Window, DualChunk } kind = Kind::None;
  std::int64_t window = 0;     // Window: regime 0 when i − j < window (ReRope, SelfExtend)
  std::int64_t chunk_len = 1;  // DualChunk: chunk_size − local_size
  int count = 1;

  int of(std::int64_t i, std::int64_t j) const {
    switch (kind) {
      case Kind::Window: return i - j < window ? 0 : 1;
      case Kind::DualChunk: {
        const std::int64_t ci = i / chunk_len, cj = j / chunk_len;
        return ci <= cj ? 0 : ci == cj + 1 ? 1 : 2;
      }
      case Kind::None: break;
    }
    return 0;
  }
};

// One attention call, resolved. Work items are (batch b, kv head, block of block_tokens query
// tokens): item i is block i % blocks of kv head (i / blocks) % kv_heads of batch i / (blocks·kv_heads).
struct AttentionJob {
  Heads q, k, v, out;
  // Rotations applied on load (RoPE fused): the prepared calls over all of q / k, whose rows are
  // rotated into thread-local buffers exactly as RotateCall::run() would write them. Null: as stored.
  // Position regimes (ropekit/attention.hpp): regime r rotates Q by q_rotations[r] and reads the K
  // tile of regime k_tile_of[r], rotated by k_rotations[k_tile_of[r]] (null: as stored). Entry 0 is
  // the plain call's rotation. rule picks the regime of (query position, key position).
  std::array<const detail::RotateJob*, 3> q_rotations = {};
  std::array<const detail::RotateJob*, 3> k_rotations = {};
  std::array<int, 3> k_tile_of = {0, 1, 2};
  RegimeRule rule;
  // Log-n query scaling: the query at position i scores with float(exact_scale · ln(i+1)/ln(logn_length))
  // when i + 1 > logn_length (> 0), else with `scale`.
  double exact_scale = 1.0;
  std::int64_t logn_length = 0;
  int head_dim = 0, v_head_dim = 0;
  std::int64_t batch = 0, q_seq = 0, k_seq = 0, q_heads = 0, kv_heads = 0, group = 0;
  std::int64_t block_tokens = 1;  // query tokens per item
  std::int64_t blocks = 1;        // items per (batch, kv head)
  bool transpose = true;          // key tiles transposed (else read as rows: decode)
  float scale = 1.0f;             // softmax scale × softmax_scale_mult
  float softcap = 0.0f;           // > 0: logits → softcap·tanh(logits / softcap) before the bias (AttentionOptions)
  bool causal = true;
  std::int64_t window = 0;
  Positions q_mask, k_mask;  // one stream each; data null when nothing needs them
  BiasKind bias = BiasKind::None;
  const float* alibi_slopes = nullptr;  // one per query head
  const int* t5_lut = nullptr;          // bucket of relative position r at [r + t5_range]
  const float* t5_table = nullptr;      // num_buckets × q_heads
  std::int64_t t5_range = 0;
  const float* dense = nullptr;  // [dense_batch, dense_heads, q_seq, k_seq]
  std::int64_t dense_batch = 1, dense_heads = 1;

  // A paged cache read in place: key j is row kv_pages[j / page_size] · page_span + j % page_size of k
  // and v (page_span: the rows one page index advances — page_size for NHD pages, kv_heads · page_size
  // for HND), batch 1, keys read as stored (no k rotation). Null: key j is row j.
  const std::int32_t* kv_pages = nullptr;
  std::int64_t page_size = 1, page_span = 1;
  // An fp8 (e4m3) cache read in place (non-zero scales): k's and v's elements are e4m3 bytes — the
  // views' strides count bytes, their dtype is F32, the type the rows widen to — each widened × its
  // scale (e4m3_to_float(b) · scale: the values the cache's K-shift and gather read). Keys read as stored.
  float k_e4m3_scale = 0.0f, v_e4m3_scale = 0.0f;

  std::int64_t items() const { return batch * kv_heads * blocks; }
};

}  // namespace ropekit::detail
