// ropekit/plan.hpp — what the numbers are, for a given current length.
//
// make_plan(spec, current_length) turns a Spec into per-pair inverse frequencies and the two
// magnitudes the reference applies, all in double:
//   inv_freq[j]         angle of pair j at position p is p · inv_freq[j] (radians)
//   cos_sin_scale       multiplied into cos and sin (YaRN / LongRoPE attention factor), so q·k
//                       scales by its square
//   softmax_scale_mult  multiplied into the softmax scale 1/sqrt(d) by the attention code
//                       (DeepSeek's mscale(f, mscale_all_dim)²); never folded into cos/sin
//
// Precision: every quantity is computed in double from the Spec, with two exceptions that the
// reference defines in float32 and that the models were trained with: the exponent 2i/d is
// rounded to float32 (HF, Meta and vLLM all form it as a float32 tensor; for d = 96 the exact
// exponent differs by up to 4 ulp of the float32 inv_freq), and LongRoPE's factor lists are
// rounded to float32 (HF builds them as float32 tensors). Result: inv_freq is within 2 float32
// ulp of Hugging Face's float32 inv_freq (tested on every golden entry) and more accurate than it.
//
// Valid range: current_length in [1, 2^47). Dynamic NTK and LongRoPE depend on it; the other
// variants ignore it. Without a current length the plan is the one at initialisation (HF's
// seq_len=None): dynamic NTK uses its unchanged base, LongRoPE its short factors.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "ropekit/spec.hpp"

namespace ropekit {

struct Plan {
  std::vector<double> inv_freq;     // rotary_dim/2 entries, radians per position
  double cos_sin_scale = 1.0;
  double softmax_scale_mult = 1.0;
  std::optional<std::int64_t> current_length;  // the length this plan was formed for
  bool uses_long_factors = false;              // LongRoPE: which factor list was used

  // YaRN's correction range in pair units, after truncation and clamping (for inspection and
  // analysis); {0, 0} for other variants.
  double yarn_low = 0.0;
  double yarn_high = 0.0;
};

// Validates spec (ropekit::Error on bad input) and forms its plan for the given current length.
Plan make_plan(const Spec& spec, std::optional<std::int64_t> current_length = std::nullopt);

// True when keys rotated under `cached` must be re-rotated to be valid under `next`: the angles
// (inv_freq) or the cos/sin magnitude differ. Dynamic NTK past max_position_embeddings and
// LongRoPE crossing original_max_position_embeddings are the variants where this happens.
// Hugging Face does not re-rotate cached keys when this happens; ropekit tells the caller.
bool needs_rerotation(const Plan& cached, const Plan& next);

// get_mscale(s, m) = 0.1·m·ln(s) + 1 for s > 1, else 1 (YaRN / DeepSeek).
double yarn_get_mscale(double scale, double mscale = 1.0);

}  // namespace ropekit
