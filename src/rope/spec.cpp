// Spec validation: every rejected value is named with its field, so a bad config.json line is easy
// to find. Bounds are what the formulas need to stay finite and meaningful, nothing stricter.
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <cmath>

#include "ropekit/error.hpp"
#include "ropekit/spec.hpp"

namespace ropekit {
namespace {

constexpr int kMaxHeadDim = 1 << 16;

[[noreturn]] void fail(std::string_view field, const auto& value, std::string_view rule) {
  throw Error(fmt::format("{} = {}: {}", field, value, rule));
}

void require_positive_finite(std::string_view field, double value) {
  if (!std::isfinite(value) || value <= 0.0) fail(field, value, "must be a finite number > 0");
}

void require_positive_length(std::string_view field, std::int64_t value) {
  if (value <= 0) fail(field, value, "must be > 0");
}

void require_optional_positive(std::string_view field, const std::optional<double>& value) {
  if (value) require_positive_finite(field, *value);
}

void require_optional_nonnegative(std::string_view field, const std::optional<double>& value) {
  if (value && (!std::isfinite(*value) || *value < 0.0)) {
    fail(field, *value, "must be a finite number >= 0");
  }
}

void require_factor_list(std::string_view field, const std::vector<double>& list, int num_pairs) {
  if (static_cast<int>(list.size()) != num_pairs) {
    throw Error(fmt::format("{} has {} entries: must have rotary_dim/2 = {}", field, list.size(), num_pairs));
  }
  for (std::size_t i = 0; i < list.size(); ++i) {
    if (!std::isfinite(list[i]) || list[i] <= 0.0) {
      throw Error(fmt::format("{}[{}] = {}: must be a finite number > 0", field, i, list[i]));
    }
  }
}

struct ScalingValidator {
  const Spec& spec;

  // The NTK exponent d/(d−2) is undefined for a single pair.
  void require_ntk_exponent(std::string_view variant) const {
    if (spec.rotary_dim < 4) {
      throw Error(
          fmt::format("spec.rotary_dim = {}: {} scaling needs rotary_dim >= 4 (its exponent is "
                      "d/(d-2))",
                      spec.rotary_dim, variant));
    }
  }

  void operator()(const scaling::None&) const {}
  void operator()(const scaling::Linear& s) const { require_positive_finite("linear.factor", s.factor); }
  void operator()(const scaling::Ntk& s) const {
    require_positive_finite("ntk.factor", s.factor);
    require_ntk_exponent("ntk");
  }
  void operator()(const scaling::DynamicNtk& s) const {
    require_positive_finite("dynamic.factor", s.factor);
    require_ntk_exponent("dynamic");
    require_positive_length("dynamic.max_position_embeddings", s.max_position_embeddings);
  }
  void operator()(const scaling::QwenDynamicNtk& s) const {
    require_ntk_exponent("qwen_dynamic");
    require_positive_length("qwen_dynamic.seq_length", s.seq_length);
  }
  void operator()(const scaling::Yarn& s) const {
    require_positive_finite("yarn.factor", s.factor);
    require_positive_length("yarn.original_max_position_embeddings", s.original_max_position_embeddings);
    require_positive_finite("yarn.beta_fast", s.beta_fast);
    require_positive_finite("yarn.beta_slow", s.beta_slow);
    if (s.beta_fast < s.beta_slow) {
      throw Error(
          fmt::format("yarn.beta_fast = {} is below yarn.beta_slow = {}: beta_fast must be "
                      ">= beta_slow",
                      s.beta_fast, s.beta_slow));
    }
    require_optional_positive("yarn.attention_factor", s.attention_factor);
    // 0 is meaningful for both (HF treats it as "unset"), negatives and non-finite values are not.
    require_optional_nonnegative("yarn.mscale", s.mscale);
    require_optional_nonnegative("yarn.mscale_all_dim", s.mscale_all_dim);
  }
  void operator()(const scaling::Llama3& s) const {
    require_positive_finite("llama3.factor", s.factor);
    require_positive_finite("llama3.low_freq_factor", s.low_freq_factor);
    require_positive_finite("llama3.high_freq_factor", s.high_freq_factor);
    require_positive_length("llama3.original_max_position_embeddings", s.original_max_position_embeddings);
    // Equal factors are a hard step at L0/low_freq_factor with no smoothing band (Llama 4 ships
    // 1 and 1); below it the band would be inverted.
    if (s.high_freq_factor < s.low_freq_factor) {
      throw Error(
          fmt::format("llama3.high_freq_factor = {} is below llama3.low_freq_factor = {}: "
                      "the smoothing band would be inverted",
                      s.high_freq_factor, s.low_freq_factor));
    }
  }
  void operator()(const scaling::LongRope& s) const {
    require_factor_list("longrope.short_factor", s.short_factor, spec.num_pairs());
    require_factor_list("longrope.long_factor", s.long_factor, spec.num_pairs());
    require_positive_length("longrope.original_max_position_embeddings", s.original_max_position_embeddings);
    require_positive_finite("longrope.factor", s.factor);
    require_optional_positive("longrope.attention_factor", s.attention_factor);
  }
  void operator()(const scaling::FreqFactors& s) const {
    require_factor_list("freq_factors.divisors", s.divisors, spec.num_pairs());
  }
  void operator()(const scaling::Proportional& s) const {
    if (!std::isfinite(s.partial_rotary_factor) || s.partial_rotary_factor <= 0.0 || s.partial_rotary_factor > 1.0) {
      fail("proportional.partial_rotary_factor", s.partial_rotary_factor, "must be in (0, 1]");
    }
    require_positive_finite("proportional.factor", s.factor);
    if (spec.rotary_dim != spec.head_dim) {
      throw Error(
          fmt::format("spec.rotary_dim = {} differs from spec.head_dim = {}: proportional RoPE "
                      "spans the whole head (unrotated pairs get angle 0)",
                      spec.rotary_dim, spec.head_dim));
    }
  }
};

}  // namespace

std::string_view to_string(Pairing pairing) {
  switch (pairing) {
    case Pairing::Interleaved: return "interleaved";
    case Pairing::Half: return "half";
  }
  return "unset";
}

std::string_view rope_type_name(const Scaling& scaling) {
  struct Namer {
    std::string_view operator()(const scaling::None&) const { return "default"; }
    std::string_view operator()(const scaling::Linear&) const { return "linear"; }
    std::string_view operator()(const scaling::Ntk&) const { return "ntk"; }
    std::string_view operator()(const scaling::DynamicNtk&) const { return "dynamic"; }
    std::string_view operator()(const scaling::Yarn&) const { return "yarn"; }
    std::string_view operator()(const scaling::Llama3&) const { return "llama3"; }
    std::string_view operator()(const scaling::LongRope&) const { return "longrope"; }
    std::string_view operator()(const scaling::Proportional&) const { return "proportional"; }
    std::string_view operator()(const scaling::FreqFactors&) const { return "freq_factors"; }
    std::string_view operator()(const scaling::QwenDynamicNtk&) const { return "qwen_dynamic"; }
  };
  return std::visit(Namer{}, scaling);
}

void Spec::validate() const {
  if (pairing != Pairing::Interleaved && pairing != Pairing::Half) {
    fail("spec.pairing", static_cast<int>(pairing),
         "must be set to Pairing::Interleaved (GPT-J) or Pairing::Half (NeoX/Llama rotate_half)");
  }
  if (head_dim <= 0 || head_dim > kMaxHeadDim) {
    fail("spec.head_dim", head_dim, fmt::format("must be in [1, {}]", kMaxHeadDim));
  }
  if (rotary_dim <= 0) fail("spec.rotary_dim", rotary_dim, "must be > 0");
  if (rotary_dim % 2 != 0) fail("spec.rotary_dim", rotary_dim, "must be even (lanes rotate in pairs)");
  if (rotary_dim > head_dim) {
    throw Error(fmt::format("spec.rotary_dim = {}: must not exceed spec.head_dim = {}", rotary_dim, head_dim));
  }
  if (!std::isfinite(base) || base <= 1.0) fail("spec.base", base, "must be a finite number > 1");
  std::visit(ScalingValidator{*this}, scaling);
  if (mrope) {
    if (mrope->sections.size() != 3) {
      throw Error(fmt::format("spec.mrope.sections has {} entries: must have 3 (t, h, w)", mrope->sections.size()));
    }
    long sum = 0;
    for (std::size_t i = 0; i < mrope->sections.size(); ++i) {
      if (mrope->sections[i] < 0) {
        throw Error(fmt::format("spec.mrope.sections[{}] = {}: must be >= 0", i, mrope->sections[i]));
      }
      sum += mrope->sections[i];
    }
    if (sum != num_pairs()) {
      throw Error(fmt::format("spec.mrope.sections = [{}] sum to {}: must sum to rotary_dim/2 = {}",
                              fmt::join(mrope->sections, ", "), sum, num_pairs()));
    }
    if (mrope->layout != MRopeLayout::Sectioned && mrope->layout != MRopeLayout::Interleaved) {
      fail("spec.mrope.layout", static_cast<int>(mrope->layout), "is not a known layout");
    }
  }
}

}  // namespace ropekit
