// ropekit/cos_sin_cache.hpp — engines' own cos/sin caches: export ropekit's, import theirs, and say how
// far one is from the accurate angles.
//
// Layout (vLLM's `cos_sin_cache`, which FlashInfer's apply_rope_with_cos_sin_cache takes as is):
// float32 [num_positions, rotary_dim], row p = m·cos(p·ω_0) … m·cos(p·ω_{P−1}), then m·sin(p·ω_0) …
// m·sin(p·ω_{P−1}), with P = rotary_dim/2 pairs, ω the plan's inv_freq and m its cos_sin_scale (vLLM
// multiplies YaRN's mscale in, Hugging Face its attention_scaling: the same number). The layout
// does not depend on the pairing; M-RoPE indexes the same rows with each pair's position stream.
//
//   std::vector<float> cache(n * rope.spec().rotary_dim);
//   ropekit::export_cos_sin_cache(rope, n, cache);            // what ropekit rotates with
//   auto report = ropekit::check_cos_sin_cache(rope, theirs, n); // how far theirs is from exact
//   auto table = ropekit::import_cos_sin_cache(rope, theirs, n); // rotate with theirs:
//   rope.apply(args, *table);                                    //   rope.prepare(args, table)
#pragma once

#include <cstdint>
#include <memory>
#include <span>

#include "ropekit/rope.hpp"
#include "ropekit/table.hpp"

namespace ropekit {

// Writes rows [0, num_positions) in the layout above into out (num_positions · rotary_dim values).
// Precision: bit for bit the coefficients every call of this Rope rotates with (Rope::cos_sin: the
// table's angle mode, then one float32 multiply by m). Error: Accurate angles, against m·cos/sin of
// the exact angle: ≤ 6e-8·m (the correctly rounded cos/sin) + m·2^-24 (m rounded to float32) +
// m·2^-24 (the product's rounding) ≈ 1.8e-7·m. Errors: num_positions outside [0, 2^47), out of
// another size.
void export_cos_sin_cache(const Rope& rope, std::int64_t num_positions, std::span<float> out);

// A table holding `cache` (num_positions rows in the layout above, the magnitude m of rope's plan
// included, as vLLM and HF make it), for Rope::prepare(args, table) / Rope::apply(args, table): the
// rotation then uses exactly the cache's coefficients (Forward and Backward; Inverse divides by m²
// in float32), with the call's contract otherwise (ropekit/call.hpp) — its accuracy is the cache's,
// which check_cos_sin_cache measures. Errors: a size other than num_positions · rotary_dim, a value
// that is not finite (named by position and pair), a position a call needs beyond the cache.
std::shared_ptr<const Table> import_cos_sin_cache(const Rope& rope, std::span<const float> cache,
                                                  std::int64_t num_positions);

// How far a cache is from the accurate angles.
struct CosSinCacheReport {
  std::int64_t num_positions = 0;
  double tolerance = 0.0;
  // max over every value of |value − m·cos(p·ω_j)| (or sin), in double against the accurate angle
  // (AngleMode::Accurate's doubles before their float32 rounding: within about 6e-16 of exact).
  double max_error = 0.0;
  std::int64_t worst_position = -1;  // where max_error is (-1: an empty cache)
  int worst_pair = -1;
  bool worst_is_sin = false;
  // The first position with an error above `tolerance` (-1: none): where the cache stops being
  // good enough — an HF/vLLM float32-angle cache drifts with p (≈ p·2^-24·ω rad).
  std::int64_t first_position_over = -1;
  // ropekit's own export meets this bound everywhere (≈ 1.8e-7·m, export_cos_sin_cache).
  double accurate_bound = 0.0;
};

// Errors: a size other than num_positions · rotary_dim, num_positions outside [0, 2^47), tolerance
// not finite and > 0. Non-finite values are reported as an infinite error at their position.
CosSinCacheReport check_cos_sin_cache(const Rope& rope, std::span<const float> cache, std::int64_t num_positions,
                                      double tolerance = 1e-6);

}  // namespace ropekit
