// src/cpu/attention.hpp — the inner step of ropekit::attention on the CPU: one query row against
// one key tile, with an online-softmax update. Highway kernels for every target
// (src/cpu/attention-inl.h), dispatched per call like the rotation kernels.
#pragma once

#include <cstdint>

namespace ropekit::cpu {

// Keys per tile. Tiles are stored transposed (head_dim rows of kTileKeys floats) so the scores of
// one query row against the whole tile are vector FMAs over keys, with no horizontal sums.
inline constexpr int kTileKeys = 64;

struct RowTile {
  const float* q = nullptr;            // head_dim floats, rotated
  const float* keys_t = nullptr;       // head_dim × kTileKeys, key j of lane d at [d·kTileKeys + j]
  const float* const* v_rows = nullptr;  // `keys` pointers to v_head_dim floats
  const float* bias = nullptr;         // kTileKeys floats: additive bias, −infinity = masked
  int head_dim = 0;
  int v_head_dim = 0;
  int keys = 0;                        // valid keys in the tile (the rest are masked)
  float scale = 1.0f;                  // softmax scale, applied to q·k before the bias
  float* scores = nullptr;             // kTileKeys floats of scratch
};

// Online softmax state of one query row: running maximum, running sum, accumulator (v_head_dim).
struct RowState {
  float max;
  float sum;
  float* acc;
};

// scores = q·k·scale + bias; max' = max(max, scores); p = exp(scores − max');
// sum = sum·exp(max − max') + Σp; acc = acc·exp(max − max') + Σ p_j v_j. Masked keys add nothing;
// a tile with no visible key leaves the state unchanged.
void update_row(const RowTile& tile, RowState& state);

}  // namespace ropekit::cpu
