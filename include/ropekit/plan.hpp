// ropekit/plan.hpp — what the numbers are, for a given current length.
//
// make_plan(spec, current_length) turns a Spec into per-pair inverse frequencies and the two
// magnitudes the reference applies:
//   inv_freq[j]         angle of pair j at position p is p · inv_freq[j] (radians)
//   cos_sin_scale       multiplied into cos and sin (YaRN / LongRoPE attention factor), so q·k
//                       scales by its square
//   softmax_scale_mult  multiplied into the softmax scale 1/sqrt(d) by the attention code
//                       (DeepSeek's mscale(f, mscale_all_dim)²); never folded into cos/sin
//
// Precision: as Hugging Face computes them, because that is what the models were trained with.
//   Scalars HF computes in Python — bases (NTK, dynamic NTK), YaRN's correction range, Llama 3's
//   wavelength thresholds, every magnitude — are double. Per-pair values follow HF's float32 tensor
//   operations one rounding at a time: the exponent 2i/d as a float32 division, base^exponent in
//   float32, the YaRN ramp and blend, the Llama 3 smoothing, LongRoPE's factor lists and divisions,
//   torch's `scalar / tensor` as reciprocal-then-multiply (src/rope/plan.cpp marks each rounding).
//   inv_freq holds those float32 values, widened to double.
// Error: inv_freq within 2 float32 ulp of HF's on every golden entry (measured: 22 539 of 22 800
//   bit-identical; torch's float32 pow is not always correctly rounded); cos_sin_scale within 1e-6
//   relative of HF's attention_scaling (tests/golden_test.cpp).
// Valid range: current_length in [1, kPositionLimit) = [1, 2^47). Dynamic NTK (HF's and Qwen's) and
//   LongRoPE depend on it; the other variants ignore it. Without a current length the plan is the one at initialisation
//   (HF's seq_len=None): dynamic NTK uses its unchanged base, LongRoPE its short factors.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "ropekit/spec.hpp"

namespace ropekit {

struct Plan {
  std::vector<double> inv_freq;  // rotary_dim/2 entries, radians per position
  double cos_sin_scale = 1.0;
  double softmax_scale_mult = 1.0;
  std::optional<std::int64_t> current_length;  // the length this plan was formed for
  bool uses_long_factors = false;              // LongRoPE: which factor list was used

  // YaRN's correction range in pair units, after truncation and clamping (for inspection and
  // analysis); {0, 0} for other variants.
  double yarn_low = 0.0;
  double yarn_high = 0.0;
};

// Validates spec (ropekit::Error on bad input: Spec::validate, a current length out of range, or
// parameters whose formula gives a non-finite or negative inv_freq) and forms its plan for the given
// current length. Numerics: the file comment.
Plan make_plan(const Spec& spec, std::optional<std::int64_t> current_length = std::nullopt);

// True for the variants whose plan depends on the current length: dynamic NTK (HF "dynamic" and Qwen's),
// LongRoPE. Exact: it inspects the variant, it computes nothing.
bool depends_on_length(const Spec& spec);

// True when keys rotated under `cached` must be re-rotated to be valid under `next`: the angles
// (inv_freq) or the cos/sin magnitude differ (exact comparison of the doubles). Dynamic NTK past
// max_position_embeddings and LongRoPE crossing original_max_position_embeddings are the variants where this happens.
// Hugging Face does not re-rotate cached keys when this happens; ropekit tells the caller.
bool needs_rerotation(const Plan& cached, const Plan& next);

// get_mscale(s, m) = 0.1·m·ln(s) + 1 for s > 1, else 1 (YaRN / DeepSeek).
// Precision: double, the formula as written (one log, one multiply-add). Range: scale > 0.
double yarn_get_mscale(double scale, double mscale = 1.0);

// The end of YaRN's ramp over pair index i, ramp(i) = clamp((i − low) / (end − low), 0, 1), with low
// and high the plan's yarn_low and yarn_high: 0 keeps a pair's frequency (extrapolated), 1
// interpolates it fully. end = high, except that a zero-width range (low == high) ends at
// high + 0.001 — Hugging Face's guard against dividing by zero, which makes the ramp a step at low.
// The plan and the pair bands both read the ramp through this one rule. Precision: double, exact but
// for that one addition.
double yarn_ramp_end(double low, double high);

}  // namespace ropekit
