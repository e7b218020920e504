// src/cpu/attention.hpp — the inner step of ropekit::attention on the CPU: one query row against
// one key tile, with an online-softmax update. Highway kernels for every target
// (src/cpu/attention-inl.h), dispatched per call like the rotation kernels.
#pragma once

#include <cstdint>

namespace ropekit::cpu {

// Keys per tile. Tiles are stored transposed (head_dim rows of kTileKeys floats) so the scores of
// one query row against the whole tile are vector FMAs over keys, with no horizontal sums.
inline constexpr int kTileKeys = 64;
inline constexpr int kMaxRows = 64;  // rows per update_rows call

// A group of query rows (the query heads sharing one kv head, at one token) against one key
// tile. Keys come in one of two layouts: transposed (keys_t; scores are vertical FMAs, best when
// many rows share the tile, the transpose is paid once) or as row pointers (k_rows; dot products
// with a horizontal sum, each key row loaded once for up to four query rows — decode, where a
// transpose would cost more than the scores).
struct RowTile {
  const float* q = nullptr;              // rows × head_dim floats, rotated
  const float* keys_t = nullptr;         // head_dim × kTileKeys, key j of lane d at [d·kTileKeys + j]
  const float* const* k_rows = nullptr;  // or: `keys` pointers to head_dim floats
  const float* const* v_rows = nullptr;  // `keys` pointers to v_head_dim floats
  const float* bias = nullptr;           // rows × kTileKeys: additive bias, −infinity = masked
  int rows = 1;                          // 1 … kMaxRows
  int head_dim = 0;
  int v_head_dim = 0;
  int keys = 0;                          // valid keys in the tile (the rest are masked)
  float scale = 1.0f;                    // softmax scale, applied to q·k before the bias
  float* scores = nullptr;               // rows × kTileKeys floats of scratch
};

// Online softmax state of one query row: running maximum, running sum, accumulator (v_head_dim).
struct RowState {
  float max;
  float sum;
  float* acc;
};

// For each row r: scores = q·k·scale + bias; max' = max(max, scores); p = exp(scores − max');
// sum = sum·exp(max − max') + Σp; acc = acc·exp(max − max') + Σ p_j v_j. Masked keys add nothing;
// a tile with no visible key leaves that row's state unchanged. states: `rows` entries.
void update_rows(const RowTile& tile, RowState* states);

}  // namespace ropekit::cpu
