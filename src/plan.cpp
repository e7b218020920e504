// One function per scaling variant, each a transcription of the Hugging Face transformers formula
// (modeling_rope_utils.py at the commit named in ../shared/golden/hf/README.md) in double.
// docs/numerics.md lists where vLLM and llama.cpp differ.
#include <algorithm>
#include <cmath>
#include <fmt/format.h>
#include <numbers>

#include "ropekit/error.hpp"
#include "ropekit/plan.hpp"

namespace ropekit {
namespace {

constexpr std::int64_t kMaxLength = std::int64_t{1} << 47;

// The exponent 2i/d exactly as the references form it: a float32 division of float32 values.
// (Exact whenever d is a power of two; for d = 96 it differs from 2i/d by up to half a float32 ulp.)
double pair_exponent(int pair, int dim) {
  return static_cast<double>(static_cast<float>(2 * pair) / static_cast<float>(dim));
}

// base^(2i/dim) for i in [0, num_pairs).
std::vector<double> wavelength_denominators(double base, int dim, int num_pairs) {
  std::vector<double> out(num_pairs);
  for (int i = 0; i < num_pairs; ++i) out[i] = std::pow(base, pair_exponent(i, dim));
  return out;
}

std::vector<double> default_inv_freq(double base, int dim, int num_pairs) {
  std::vector<double> inv = wavelength_denominators(base, dim, num_pairs);
  for (double& v : inv) v = 1.0 / v;
  return inv;
}

struct Planner {
  const Spec& spec;
  std::optional<std::int64_t> length;
  Plan& plan;

  int d() const { return spec.rotary_dim; }
  int pairs() const { return spec.num_pairs(); }

  void operator()(const scaling::None&) const {
    plan.inv_freq = default_inv_freq(spec.base, d(), pairs());
  }

  void operator()(const scaling::Linear& s) const {
    plan.inv_freq = default_inv_freq(spec.base, d(), pairs());
    for (double& v : plan.inv_freq) v /= s.factor;
  }

  // base' = base · f^(d/(d−2)) (the NTK-aware base change of bloc97; HF has no fixed variant,
  // this is the formula of its dynamic variant at its end point and of vLLM's NTK-alpha).
  void operator()(const scaling::Ntk& s) const {
    const double base = spec.base * std::pow(s.factor, double(d()) / double(d() - 2));
    plan.inv_freq = default_inv_freq(base, d(), pairs());
  }

  // HF _compute_dynamic_ntk_parameters: the length is clamped below at max_position_embeddings,
  // so the base only changes past it (and the formula never sees a negative argument).
  void operator()(const scaling::DynamicNtk& s) const {
    const double lmax = double(s.max_position_embeddings);
    const double len = std::max(double(length.value_or(s.max_position_embeddings)), lmax);
    const double growth = (s.factor * len / lmax) - (s.factor - 1.0);
    const double base = spec.base * std::pow(growth, double(d()) / double(d() - 2));
    plan.inv_freq = default_inv_freq(base, d(), pairs());
  }

  // HF _compute_yarn_parameters.
  void operator()(const scaling::Yarn& s) const {
    const double f = s.factor;
    const double l0 = double(s.original_max_position_embeddings);
    const double log_base = std::log(spec.base);
    // The (fractional) pair index whose wavelength makes `rotations` turns over the original length.
    auto correction_dim = [&](double rotations) {
      return double(d()) * std::log(l0 / (rotations * 2.0 * std::numbers::pi)) / (2.0 * log_base);
    };
    double low = correction_dim(s.beta_fast);
    double high = correction_dim(s.beta_slow);
    if (s.truncate) {
      low = std::floor(low);
      high = std::ceil(high);
    }
    low = std::max(low, 0.0);
    high = std::min(high, double(d() - 1));  // HF clamps with d−1 although pairs end at d/2−1
    plan.yarn_low = low;
    plan.yarn_high = high;
    const double span = (low == high) ? 0.001 : high - low;  // HF: max += 0.001 when equal

    const std::vector<double> denominators = wavelength_denominators(spec.base, d(), pairs());
    plan.inv_freq.resize(pairs());
    for (int i = 0; i < pairs(); ++i) {
      const double inv_extrapolation = 1.0 / denominators[i];
      const double inv_interpolation = 1.0 / (f * denominators[i]);
      const double ramp = std::clamp((double(i) - low) / span, 0.0, 1.0);
      const double extrapolation_weight = 1.0 - ramp;  // 1 = keep the original (high frequency)
      plan.inv_freq[i] = inv_interpolation * (1.0 - extrapolation_weight) +
                         inv_extrapolation * extrapolation_weight;
    }

    // HF tests truthiness: a 0 mscale or mscale_all_dim counts as unset.
    const bool has_mscale = s.mscale && *s.mscale != 0.0;
    const bool has_mscale_all_dim = s.mscale_all_dim && *s.mscale_all_dim != 0.0;
    if (s.attention_factor) {
      plan.cos_sin_scale = *s.attention_factor;
    } else if (has_mscale && has_mscale_all_dim) {
      plan.cos_sin_scale = yarn_get_mscale(f, *s.mscale) / yarn_get_mscale(f, *s.mscale_all_dim);
    } else {
      plan.cos_sin_scale = yarn_get_mscale(f);
    }
    if (has_mscale_all_dim) {
      const double m = yarn_get_mscale(f, *s.mscale_all_dim);
      plan.softmax_scale_mult = m * m;
    }
  }

  // HF _compute_llama3_parameters.
  void operator()(const scaling::Llama3& s) const {
    const double l0 = double(s.original_max_position_embeddings);
    const double low_freq_wavelen = l0 / s.low_freq_factor;
    const double high_freq_wavelen = l0 / s.high_freq_factor;
    plan.inv_freq = default_inv_freq(spec.base, d(), pairs());
    for (double& inv : plan.inv_freq) {
      const double wavelen = 2.0 * std::numbers::pi / inv;
      if (wavelen < high_freq_wavelen) continue;  // high frequency: kept
      if (wavelen > low_freq_wavelen) {           // low frequency: interpolated
        inv /= s.factor;
        continue;
      }
      const double smooth =
          (l0 / wavelen - s.low_freq_factor) / (s.high_freq_factor - s.low_freq_factor);
      inv = (1.0 - smooth) * inv / s.factor + smooth * inv;
    }
  }

  // HF _compute_longrope_parameters + longrope_frequency_update: long factors strictly past the
  // original length. The factor lists are float32 tensors in HF, so they are rounded to float32.
  void operator()(const scaling::LongRope& s) const {
    plan.uses_long_factors = length && *length > s.original_max_position_embeddings;
    const std::vector<double>& ext = plan.uses_long_factors ? s.long_factor : s.short_factor;
    const std::vector<double> denominators = wavelength_denominators(spec.base, d(), pairs());
    plan.inv_freq.resize(pairs());
    for (int i = 0; i < pairs(); ++i) {
      plan.inv_freq[i] = 1.0 / (double(static_cast<float>(ext[i])) * denominators[i]);
    }
    if (s.attention_factor) {
      plan.cos_sin_scale = *s.attention_factor;
    } else if (s.factor <= 1.0) {
      plan.cos_sin_scale = 1.0;
    } else {
      plan.cos_sin_scale =
          std::sqrt(1.0 + std::log(s.factor) / std::log(double(s.original_max_position_embeddings)));
    }
  }

  // HF _compute_proportional_rope_parameters: the exponent's denominator is head_dim and pairs past
  // floor(partial_rotary_factor·head_dim/2) get frequency 0.
  void operator()(const scaling::Proportional& s) const {
    const int rotated = static_cast<int>(std::floor(s.partial_rotary_factor * spec.head_dim / 2.0));
    plan.inv_freq.assign(pairs(), 0.0);
    for (int i = 0; i < rotated && i < pairs(); ++i) {
      plan.inv_freq[i] = 1.0 / std::pow(spec.base, pair_exponent(i, spec.head_dim)) / s.factor;
    }
  }
};

}  // namespace

double yarn_get_mscale(double scale, double mscale) {
  return scale <= 1.0 ? 1.0 : 0.1 * mscale * std::log(scale) + 1.0;
}

Plan make_plan(const Spec& spec, std::optional<std::int64_t> current_length) {
  spec.validate();
  if (current_length && (*current_length < 1 || *current_length >= kMaxLength)) {
    throw Error(fmt::format("current_length = {}: must be in [1, 2^47)", *current_length));
  }
  Plan plan;
  plan.current_length = current_length;
  std::visit(Planner{spec, current_length, plan}, spec.scaling);
  for (std::size_t i = 0; i < plan.inv_freq.size(); ++i) {
    if (!std::isfinite(plan.inv_freq[i]) || plan.inv_freq[i] < 0.0) {
      throw Error(fmt::format("{} scaling produced inv_freq[{}] = {} for base {}: check its parameters",
                              rope_type_name(spec.scaling), i, plan.inv_freq[i], spec.base));
    }
  }
  return plan;
}

bool needs_rerotation(const Plan& cached, const Plan& next) {
  return cached.inv_freq != next.inv_freq || cached.cos_sin_scale != next.cos_sin_scale;
}

}  // namespace ropekit
