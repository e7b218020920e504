// ropekit/analysis.hpp — what a plan does to each frequency band.
//
// For every rotated pair: its frequency, wavelength (tokens per full turn), the turns it makes
// within the model's original context, how much the scaling divided its frequency, and which band
// it falls in. The band names follow the YaRN paper and Llama 3's smoothing:
//   extrapolated — frequency kept as trained (high-frequency pairs that see many turns)
//   interpolated — frequency divided by the full factor (low-frequency pairs)
//   blended      — between the two (YaRN's ramp, Llama 3's smooth band)
//   rescaled     — changed by a base change (NTK, dynamic NTK) or per-pair factors (LongRoPE,
//                  GGUF rope_freqs)
//   original     — no scaling
//   not rotated  — angle 0 (proportional RoPE's padding pairs)
// Precision: double throughout; wavelength = 2π/inv_freq (infinity for inv_freq 0).
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "ropekit/plan.hpp"
#include "ropekit/spec.hpp"

namespace ropekit {

enum class Band { Original, Extrapolated, Interpolated, Blended, Rescaled, NotRotated };
std::string_view to_string(Band band);

struct PairBand {
  int pair = 0;
  double inv_freq = 0.0;
  double wavelength = 0.0;        // tokens per turn
  double turns = 0.0;             // turns within original_context (0 when it is unknown)
  double divisor = 1.0;           // unscaled inv_freq / inv_freq (1 = unchanged)
  Band band = Band::Original;
};

// The context the model was trained with before scaling: original_max_position_embeddings for
// YaRN, Llama 3 and LongRoPE, max_position_embeddings for dynamic NTK, else `fallback`.
std::int64_t original_context(const Spec& spec, std::int64_t fallback);

// One entry per pair of plan.inv_freq; `context` sets PairBand::turns (0 = leave turns at 0).
std::vector<PairBand> pair_bands(const Spec& spec, const Plan& plan, std::int64_t context);

}  // namespace ropekit
