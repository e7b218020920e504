// One function per scaling variant, each a transcription of the Hugging Face transformers formula
// (modeling_rope_utils.py at the commit named in tests/data/golden/hf/README.md). Scalars (bases,
// correction ranges, magnitudes) are double, as in HF's Python; per-pair values follow HF's float32
// tensor operations one rounding at a time. docs/numerics.md says why and where vLLM and llama.cpp
// differ.
#include <fmt/format.h>
#include <algorithm>
#include <cmath>
#include <numbers>

#include "ropekit/error.hpp"
#include "ropekit/plan.hpp"

namespace ropekit {
namespace {

// Per-pair quantities are float32 tensors in the reference; f32() marks each point where it
// rounds. Between those points every operation is a single IEEE operation (correctly rounded in
// double, then rounded to float32), which reproduces the float32 result of the same operation.
float f32(double x) { return static_cast<float>(x); }

// torch evaluates `scalar / tensor` as tensor.reciprocal() * scalar: two float32 roundings.
float scalar_over(double scalar, double tensor_value) {
  return f32(double(f32(1.0 / tensor_value)) * double(f32(scalar)));
}

// arange(0, dim, 2).float() / dim — a float32 division (exact when dim is a power of two).
float pair_exponent(int pair, int dim) { return f32(2 * pair) / f32(dim); }

// base ** exponent with a Python-float base and a float32 exponent tensor: torch casts the base to
// float32 and evaluates pow in float32 (within 1 ulp; glibc's pow is correctly rounded, torch's
// vectorised pow may differ by an ulp on rare pairs — the golden tests bound that at 2 ulp).
float base_power(double base, int pair, int dim) {
  return f32(std::pow(double(f32(base)), double(pair_exponent(pair, dim))));
}

// HF's default inv_freq: 1.0 / (base ** (arange(0, dim, 2).float() / dim)).
std::vector<double> default_inv_freq(double base, int dim, int num_pairs) {
  std::vector<double> inv(num_pairs);
  for (int i = 0; i < num_pairs; ++i) inv[i] = f32(1.0 / double(base_power(base, i, dim)));
  return inv;
}

// Axial (vision) RoPE, unscaled (Spec::validate refuses scaling with it). PerAxis: HF's
// VisionRotaryEmbedding(dim = 2·sections[a]) per axis, `1.0 / (theta ** (arange(0, dim, 2, dtype=float) / dim))`
// — the default formula at that dim. Strided: Pixtral's `freqs[a::axes]` of the default list over rotary_dim.
std::vector<double> axial_inv_freq(const Spec& spec) {
  const std::vector<int>& sections = spec.axial->sections;
  std::vector<double> inv;
  inv.reserve(static_cast<std::size_t>(spec.num_pairs()));
  if (spec.axial->frequencies == AxialFrequencies::Strided) {
    const std::vector<double> global = default_inv_freq(spec.base, spec.rotary_dim, spec.num_pairs());
    const std::size_t axes = sections.size();
    for (std::size_t a = 0; a < axes; ++a) {
      for (int i = 0; i < sections[a]; ++i) inv.push_back(global[i * axes + a]);
    }
    return inv;
  }
  for (const int s : sections) {
    const std::vector<double> axis = default_inv_freq(spec.base, 2 * s, s);
    inv.insert(inv.end(), axis.begin(), axis.end());
  }
  return inv;
}

struct Planner {
  const Spec& spec;
  std::optional<std::int64_t> length;
  Plan& plan;

  int d() const { return spec.rotary_dim; }
  int pairs() const { return spec.num_pairs(); }

  // Axial (vision) RoPE combines only with None (Spec::validate): its frequencies are planned here.
  void operator()(const scaling::None&) const {
    plan.inv_freq = spec.axial ? axial_inv_freq(spec) : default_inv_freq(spec.base, d(), pairs());
  }

  // HF: inv_freq /= factor.
  void operator()(const scaling::Linear& s) const {
    plan.inv_freq = default_inv_freq(spec.base, d(), pairs());
    for (double& v : plan.inv_freq) v = f32(v / double(f32(s.factor)));
  }

  // base' = base · f^(d/(d−2)) (the NTK-aware base change of bloc97; HF has no fixed variant:
  // this is its dynamic formula at factor·Lmax, and vLLM's NTK-alpha), base' in double.
  void operator()(const scaling::Ntk& s) const {
    const double base = spec.base * std::pow(s.factor, double(d()) / double(d() - 2));
    plan.inv_freq = default_inv_freq(base, d(), pairs());
  }

  // HF _compute_dynamic_ntk_parameters with a Python-int seq_len (the new base in double): the
  // length is clamped below at max_position_embeddings, so the base only changes past it (and the
  // formula never sees a negative argument).
  void operator()(const scaling::DynamicNtk& s) const {
    const double lmax = double(s.max_position_embeddings);
    const double len = std::max(double(length.value_or(s.max_position_embeddings)), lmax);
    const double growth = (s.factor * len / lmax) - (s.factor - 1.0);
    const double base = spec.base * std::pow(growth, double(d()) / double(d() - 2));
    plan.inv_freq = default_inv_freq(base, d(), pairs());
  }

  // modeling_qwen.py's get_ntk_alpha and update_rotary_pos_emb_cache: α from Python floats
  // (math.log(x, 2) is log(x)/log(2)), the new base in double, inv_freq as the default's float32 ops.
  void operator()(const scaling::QwenDynamicNtk& s) const {
    double alpha = 1.0;
    if (length && *length > s.seq_length) {
      const double context = std::log(double(*length) / double(s.seq_length)) / std::log(2.0) + 1.0;
      alpha = std::max(std::exp2(std::ceil(context)) - 1.0, 1.0);
    }
    const double base = spec.base * std::pow(alpha, double(d()) / double(d() - 2));
    plan.inv_freq = default_inv_freq(base, d(), pairs());
  }

  // HunYuan's rotary: the α base in double (Python floats) up to max_position_embeddings, HF's dynamic NTK on the
  // unscaled base past it (its dynamic_rope_update calls ROPE_INIT_FUNCTIONS["dynamic"]).
  void operator()(const scaling::HunyuanAlpha& s) const {
    if (length && *length > s.max_position_embeddings) {
      (*this)(scaling::DynamicNtk{s.factor, s.max_position_embeddings});
      return;
    }
    const double base = spec.base * std::pow(s.alpha, double(d()) / double(d() - 2));
    plan.inv_freq = default_inv_freq(base, d(), pairs());
  }

  // HF _compute_yarn_parameters: the correction range in double (Python math), the ramp and the
  // blend as float32 tensors.
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
    high = yarn_ramp_end(low, high);

    plan.inv_freq.resize(pairs());
    for (int i = 0; i < pairs(); ++i) {
      const float pos_freq = base_power(spec.base, i, d());
      const float inv_extrapolation = f32(1.0 / double(pos_freq));
      const float inv_interpolation = f32(1.0 / double(f32(double(f32(f)) * pos_freq)));
      const float ramp =
          std::clamp(f32(double(f32(double(f32(i)) - double(f32(low)))) / double(f32(high - low))), 0.0f, 1.0f);
      const float extrapolation_weight = f32(1.0 - double(ramp));  // 1 = keep (high frequency)
      const float interpolated_part = f32(double(inv_interpolation) * double(f32(1.0 - double(extrapolation_weight))));
      const float extrapolated_part = f32(double(inv_extrapolation) * double(extrapolation_weight));
      plan.inv_freq[i] = f32(double(interpolated_part) + double(extrapolated_part));
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
    if (has_mscale_all_dim && s.mscale_softmax) {
      const double m = yarn_get_mscale(f, *s.mscale_all_dim);
      plan.softmax_scale_mult = m * m;
    }
  }

  // HF _compute_llama3_parameters (as Meta's apply_scaling): wavelength thresholds in double, the
  // per-pair smoothing as float32 tensors. Near the band edges the smoothing cancels
  // (L0/wavelen − low_freq_factor), so float32 and exact arithmetic differ by up to ~30 ulp there;
  // the model was trained with the float32 values, which is what this reproduces.
  void operator()(const scaling::Llama3& s) const {
    const double l0 = double(s.original_max_position_embeddings);
    const float low_freq_wavelen = f32(l0 / s.low_freq_factor);
    const float high_freq_wavelen = f32(l0 / s.high_freq_factor);
    const double factor = f32(s.factor);
    plan.inv_freq = default_inv_freq(spec.base, d(), pairs());
    for (double& inv : plan.inv_freq) {
      const float wavelen = scalar_over(2.0 * std::numbers::pi, inv);
      const double inv_llama = wavelen > low_freq_wavelen ? double(f32(inv / factor)) : inv;
      if (wavelen < high_freq_wavelen || wavelen > low_freq_wavelen) {
        inv = inv_llama;  // high frequency kept, low frequency interpolated
        continue;
      }
      const float smooth = f32(double(f32(double(scalar_over(l0, wavelen)) - double(f32(s.low_freq_factor)))) /
                               double(f32(s.high_freq_factor - s.low_freq_factor)));
      const float interpolated = f32(double(f32(double(f32(1.0 - double(smooth))) * inv_llama)) / factor);
      inv = f32(double(interpolated) + double(f32(double(smooth) * inv_llama)));
    }
  }

  // HF _compute_longrope_parameters + longrope_frequency_update: long factors strictly past the
  // original length; 1.0 / (ext_factors * base ** exponent) with float32 factor tensors.
  void operator()(const scaling::LongRope& s) const {
    plan.uses_long_factors = length && *length > s.original_max_position_embeddings;
    const std::vector<double>& ext = plan.uses_long_factors ? s.long_factor : s.short_factor;
    plan.inv_freq.resize(pairs());
    for (int i = 0; i < pairs(); ++i) {
      const float denominator = f32(double(f32(ext[i])) * double(base_power(spec.base, i, d())));
      plan.inv_freq[i] = f32(1.0 / double(denominator));
    }
    if (s.attention_factor) {
      plan.cos_sin_scale = *s.attention_factor;
    } else if (s.factor <= 1.0) {
      plan.cos_sin_scale = 1.0;
    } else {
      plan.cos_sin_scale = std::sqrt(1.0 + std::log(s.factor) / std::log(double(s.original_max_position_embeddings)));
    }
  }

  // HF _compute_proportional_rope_parameters: the exponent's denominator is head_dim and pairs past
  // floor(partial_rotary_factor·head_dim/2) get frequency 0; then inv_freq / factor.
  void operator()(const scaling::Proportional& s) const {
    const int rotated = static_cast<int>(std::floor(s.partial_rotary_factor * spec.head_dim / 2.0));
    const std::vector<double> inv = default_inv_freq(spec.base, spec.head_dim, pairs());
    plan.inv_freq.assign(pairs(), 0.0);
    for (int i = 0; i < rotated && i < pairs(); ++i) plan.inv_freq[i] = f32(inv[i] / double(f32(s.factor)));
  }

  // llama.cpp's rope_freqs: theta / freq_factor in float32 on top of the default frequencies.
  void operator()(const scaling::FreqFactors& s) const {
    plan.inv_freq = default_inv_freq(spec.base, d(), pairs());
    for (int i = 0; i < pairs(); ++i) plan.inv_freq[i] = f32(plan.inv_freq[i] / double(f32(s.divisors[i])));
  }
};

}  // namespace

double yarn_ramp_end(double low, double high) { return low == high ? high + 0.001 : high; }

double yarn_get_mscale(double scale, double mscale) {
  return scale <= 1.0 ? 1.0 : 0.1 * mscale * std::log(scale) + 1.0;
}

Plan make_plan(const Spec& spec, std::optional<std::int64_t> current_length) {
  spec.validate();
  if (current_length && (*current_length < 1 || *current_length >= kPositionLimit)) {
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

bool depends_on_length(const Spec& spec) {
  return std::holds_alternative<scaling::DynamicNtk>(spec.scaling) ||
         std::holds_alternative<scaling::QwenDynamicNtk>(spec.scaling) ||
         std::holds_alternative<scaling::HunyuanAlpha>(spec.scaling) ||
         std::holds_alternative<scaling::LongRope>(spec.scaling);
}

bool needs_rerotation(const Plan& cached, const Plan& next) {
  return cached.inv_freq != next.inv_freq || cached.cos_sin_scale != next.cos_sin_scale;
}

}  // namespace ropekit
