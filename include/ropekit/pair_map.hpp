// ropekit/pair_map.hpp — the one place that says which lanes pair, with which frequency, driven by
// which position stream.
//
// The scalar reference, the oracles, the tests and M-RoPE's position streams read lanes through this
// map. The SIMD kernels vectorize the same two layouts directly (Half: the a and b vectors rotary_dim/2
// lanes apart; Interleaved: whole pairs in each vector), and tests/targets_test.cpp holds every target to
// the reference bit for bit. It covers both pairings, partial rotary (lanes >= rotary_dim pass through),
// proportional RoPE (zero-frequency pairs still appear; their angle is 0) and both M-RoPE layouts.
#pragma once

#include <cstdint>
#include <vector>

#include "ropekit/spec.hpp"

namespace ropekit {

struct PairMap {
  int head_dim = 0;
  int rotary_dim = 0;
  Pairing pairing = Pairing::Half;  // the lane layout below, for kernels that specialize on it
  // For pair j in [0, rotary_dim/2): its two lanes and the position stream it reads (0 unless
  // M-RoPE: 0 = t, 1 = h, 2 = w; or axial RoPE: the axis of its section). Its frequency is always Plan::inv_freq[j]
  // (M-RoPE keeps the global frequency index; only the position stream changes).
  std::vector<int> lane_a;  // rotated as a' = a·cos − b·sin
  std::vector<int> lane_b;  // rotated as b' = b·cos + a·sin
  std::vector<std::uint8_t> axis;
  int num_axes = 1;

  int num_pairs() const { return static_cast<int>(lane_a.size()); }
};

// Builds the map of a spec: exact (integer lane indices). Throws ropekit::Error if the spec is invalid
// (Spec::validate).
PairMap make_pair_map(const Spec& spec);

}  // namespace ropekit
