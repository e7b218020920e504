// ropekit/call.hpp — the arguments of one rotation call (see ropekit/rope.hpp for the call).
//
// One call rotates q and k of the same tokens (GQA: their head counts may differ; either may be
// empty). Each is rotated in place, or read from q/k and written to q_out/k_out (same shape and
// dtype; lanes outside the rotary part are copied). Per pair (a, b) with angle θ and magnitude m:
//   Forward   a' = m(a·cosθ − b·sinθ),  b' = m(b·cosθ + a·sinθ)    m = cos_sin_scale
//   Inverse   the exact inverse of Forward: rotation by −θ, m = 1/cos_sin_scale
//             (un-rotating cached keys before re-rotation)
//   Backward  the transpose of Forward: rotation by −θ, m = cos_sin_scale (gradients)
// Arithmetic: the coefficients m·cos and m·sin are formed in float32 (as HF does), then
// a' = fma(a, c, −b·s), b' = fma(b, c, a·s) in float32, rounded once to the storage type.
#pragma once

#include "ropekit/tensor.hpp"

namespace ropekit {

enum class Direction { Forward, Inverse, Backward };

struct RotateArgs {
  Heads q;
  Heads k;
  Heads q_out;  // data == nullptr: rotate q in place
  Heads k_out;  // data == nullptr: rotate k in place
  Positions positions;
  Direction direction = Direction::Forward;
  int threads = 0;  // 0: ropekit::default_threads() (see ropekit/cpu.hpp); results never depend on it
};

}  // namespace ropekit
