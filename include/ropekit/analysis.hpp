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
#include <optional>
#include <string>
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
  double wavelength = 0.0;  // tokens per turn
  double turns = 0.0;       // turns within original_context (0 when it is unknown)
  double divisor = 1.0;     // unscaled inv_freq / inv_freq (1 = unchanged)
  Band band = Band::Original;
};

// The context the model was trained with before scaling: original_max_position_embeddings for
// YaRN, Llama 3 and LongRoPE, max_position_embeddings for dynamic NTK, else `fallback`. Exact.
std::int64_t original_context(const Spec& spec, std::int64_t fallback);

// One entry per pair of plan.inv_freq; `context` sets PairBand::turns (0 = leave turns at 0).
// Precision: double (wavelength = 2π/inv_freq, turns = context·inv_freq/2π, one rounding each); the
// band of a YaRN pair follows the plan's ramp (yarn_ramp_end), of a Llama 3 pair its wavelength
// thresholds. Valid range: a plan made from `spec`; context ≥ 0.
std::vector<PairBand> pair_bands(const Spec& spec, const Plan& plan, std::int64_t context);

// RoFormer's long-term decay (Su et al. 2021, §3.4.3): for a relative distance r, the logit
// Σ_j h_j e^{i r θ_j} is bounded by max_j |h_{j+1} − h_j| · Σ_{j=1}^{d/2} |S_j| with the partial sums
// S_j = Σ_{k<j} e^{i r θ_k}. decay_bound returns the paper's relative upper bound
// (1/(d/2)) · Σ_j |S_j| for r = 0, 1, …, max_distance (entry r), θ_k = plan.inv_freq[k] — so it
// shows what a scaling variant does to the decay. Precision: double; r·θ_k is formed in double
// (error ≤ r·2^−53 ≤ 2e-9 rad for r ≤ 2^24), so each entry is within (d/2)·2e-9 of the exact value. Errors:
// max_distance outside [0, 2^24], an empty plan.
std::vector<double> decay_bound(const Plan& plan, std::int64_t max_distance);

// One self-check of a model's RoPE as ropekit computes it (`ropekit verify`): a measured figure
// against the bound the library's contract states. Skipped checks say why in `detail`.
struct Check {
  std::string name;
  std::string what;  // what the figure measures
  double figure = 0.0;
  double bound = 0.0;  // passes when figure ≤ bound
  bool passed = false;
  bool skipped = false;
  std::string detail;
};

// Runs the invariance and accuracy checks on a spec (the plan at current_length): logits depend
// only on m − n (offsets up to 2^30), table accuracy up to position 2^31 − 1 against a long-double
// oracle (and HF's float32 angles for comparison), on-the-fly = table, Inverse ∘ Forward = identity,
// the magnitude applied once, K-shift = rotating at the shifted position, fused attention = apply
// then attention. Deterministic (fixed seeds). Each figure is measured in double from the library's
// float32 results; each bound is the contract of the function checked (its header), so a FAIL means
// the contract does not hold for this spec. Every check has a test that feeds it a broken
// implementation and sees it FAIL (tests/analysis_test.cpp). Errors: an invalid spec or length.
std::vector<Check> verify(const Spec& spec, std::optional<std::int64_t> current_length = std::nullopt);

}  // namespace ropekit
