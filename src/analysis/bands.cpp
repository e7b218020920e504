// Pair bands: what a plan does to each frequency (see ropekit/analysis.hpp).
#include "ropekit/analysis.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numbers>

namespace ropekit {
namespace {

constexpr double kTwoPi = 2.0 * std::numbers::pi;

struct Classifier {
  const Plan& plan;
  const std::vector<double>& unscaled;
  int pair;

  Band operator()(const scaling::None&) const { return Band::Original; }
  Band operator()(const scaling::Proportional&) const {
    return plan.inv_freq[pair] == 0.0 ? Band::NotRotated : Band::Original;
  }
  Band operator()(const scaling::Linear&) const { return Band::Interpolated; }
  Band operator()(const scaling::Ntk&) const { return Band::Rescaled; }
  Band operator()(const scaling::DynamicNtk&) const {
    return plan.inv_freq[pair] == unscaled[pair] ? Band::Original : Band::Rescaled;
  }
  Band operator()(const scaling::QwenDynamicNtk&) const {
    return plan.inv_freq[pair] == unscaled[pair] ? Band::Original : Band::Rescaled;
  }
  Band operator()(const scaling::HunyuanAlpha&) const { return Band::Rescaled; }
  Band operator()(const scaling::LongRope&) const { return Band::Rescaled; }
  Band operator()(const scaling::FreqFactors& s) const {
    return s.divisors[pair] == 1.0 ? Band::Extrapolated : Band::Rescaled;
  }
  // The same ramp as the plan: 0 at or below yarn_low (kept), 1 at or above yarn_high.
  Band operator()(const scaling::Yarn&) const {
    const double low = plan.yarn_low;
    const double high = yarn_ramp_end(low, plan.yarn_high);
    const double ramp = std::clamp((double(pair) - low) / (high - low), 0.0, 1.0);
    return ramp == 0.0 ? Band::Extrapolated : ramp == 1.0 ? Band::Interpolated : Band::Blended;
  }
  // Llama 3 compares the unscaled wavelength with L0/high_freq_factor and L0/low_freq_factor.
  Band operator()(const scaling::Llama3& s) const {
    const double wavelength = kTwoPi / unscaled[pair];
    const double l0 = double(s.original_max_position_embeddings);
    if (wavelength < l0 / s.high_freq_factor) return Band::Extrapolated;
    if (wavelength > l0 / s.low_freq_factor) return Band::Interpolated;
    return Band::Blended;
  }
};

}  // namespace

std::string_view to_string(Band band) {
  switch (band) {
    case Band::Original: return "original";
    case Band::Extrapolated: return "extrapolated";
    case Band::Interpolated: return "interpolated";
    case Band::Blended: return "blended";
    case Band::Rescaled: return "rescaled";
    case Band::NotRotated: return "not rotated";
  }
  return "?";
}

std::int64_t original_context(const Spec& spec, std::int64_t fallback) {
  if (const auto* y = std::get_if<scaling::Yarn>(&spec.scaling)) return y->original_max_position_embeddings;
  if (const auto* l = std::get_if<scaling::Llama3>(&spec.scaling)) return l->original_max_position_embeddings;
  if (const auto* r = std::get_if<scaling::LongRope>(&spec.scaling)) return r->original_max_position_embeddings;
  if (const auto* d = std::get_if<scaling::DynamicNtk>(&spec.scaling)) return d->max_position_embeddings;
  if (const auto* q = std::get_if<scaling::QwenDynamicNtk>(&spec.scaling)) return q->seq_length;
  if (const auto* h = std::get_if<scaling::HunyuanAlpha>(&spec.scaling)) return h->max_position_embeddings;
  return fallback;
}

std::vector<PairBand> pair_bands(const Spec& spec, const Plan& plan, std::int64_t context) {
  Spec plain = spec;
  plain.scaling = scaling::None{};
  if (std::holds_alternative<scaling::Proportional>(spec.scaling)) plain.scaling = scaling::Proportional{1.0, 1.0};
  const std::vector<double> unscaled = make_plan(plain).inv_freq;
  std::vector<PairBand> out;
  for (int j = 0; j < static_cast<int>(plan.inv_freq.size()); ++j) {
    PairBand b;
    b.pair = j;
    b.inv_freq = plan.inv_freq[j];
    b.wavelength = b.inv_freq > 0.0 ? kTwoPi / b.inv_freq : std::numeric_limits<double>::infinity();
    b.turns = context > 0 ? double(context) * b.inv_freq / kTwoPi : 0.0;
    b.divisor = b.inv_freq > 0.0 ? unscaled[j] / b.inv_freq : 0.0;
    b.band = std::visit(Classifier{plan, unscaled, j}, spec.scaling);
    out.push_back(b);
  }
  return out;
}

}  // namespace ropekit
