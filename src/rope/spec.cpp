// Spec validation: every rejected value is named with its field, so a bad config.json line is easy
// to find. Bounds are what the formulas need to stay finite and meaningful, nothing stricter.
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <algorithm>
#include <cmath>
#include <functional>

#include "ropekit/error.hpp"
#include "ropekit/spec.hpp"
#include "ropekit/variants.hpp"

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

// Each field by its description's rule (ropekit/variants.hpp), then what relates fields to each other
// or to the spec.
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

  void fields(const Scaling& scaling) const {
    const std::string_view variant = variant_info(scaling).name;
    for_each_field(scaling, [&](const FieldInfo& field, const FieldValue& value) {
      const std::string name = fmt::format("{}.{}", variant, field.key);
      if (const auto* x = std::get_if<double>(&value)) {
        switch (field.rule) {
          case FieldRule::Positive: require_positive_finite(name, *x); break;
          case FieldRule::NonNegative:
            // 0 is meaningful (HF treats it as "unset"), negatives and non-finite values are not.
            if (!std::isfinite(*x) || *x < 0.0) fail(name, *x, "must be a finite number >= 0");
            break;
          case FieldRule::UnitInterval:
            if (!std::isfinite(*x) || *x <= 0.0 || *x > 1.0) fail(name, *x, "must be in (0, 1]");
            break;
          default: break;
        }
      } else if (const auto* n = std::get_if<std::int64_t>(&value)) {
        require_positive_length(name, *n);
      } else if (const auto* list = std::get_if<std::vector<double>>(&value)) {
        require_factor_list(name, *list, spec.num_pairs());
      }
    });
  }

  void operator()(const scaling::None&) const {}
  void operator()(const scaling::Linear&) const {}
  void operator()(const scaling::Ntk&) const { require_ntk_exponent("ntk"); }
  void operator()(const scaling::DynamicNtk&) const { require_ntk_exponent("dynamic"); }
  void operator()(const scaling::QwenDynamicNtk&) const { require_ntk_exponent("qwen_dynamic"); }
  void operator()(const scaling::HunyuanAlpha&) const { require_ntk_exponent("hunyuan_alpha"); }
  void operator()(const scaling::Yarn& s) const {
    if (s.beta_fast < s.beta_slow) {
      throw Error(
          fmt::format("yarn.beta_fast = {} is below yarn.beta_slow = {}: beta_fast must be "
                      ">= beta_slow",
                      s.beta_fast, s.beta_slow));
    }
  }
  void operator()(const scaling::Llama3& s) const {
    // Equal factors are a hard step at L0/low_freq_factor with no smoothing band (Llama 4 ships
    // 1 and 1); below it the band would be inverted.
    if (s.high_freq_factor < s.low_freq_factor) {
      throw Error(
          fmt::format("llama3.high_freq_factor = {} is below llama3.low_freq_factor = {}: "
                      "the smoothing band would be inverted",
                      s.high_freq_factor, s.low_freq_factor));
    }
  }
  void operator()(const scaling::LongRope&) const {}
  void operator()(const scaling::FreqFactors&) const {}
  void operator()(const scaling::Proportional&) const {
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
  const ScalingValidator validator{*this};
  validator.fields(scaling);
  std::visit(validator, scaling);
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
  if (axial) validate_axial();
}

void Spec::validate_axial() const {
  if (mrope) throw Error("spec.axial and spec.mrope are both set: a spec has one kind of position streams");
  const std::vector<int>& s = axial->sections;
  if (s.empty() || s.size() > static_cast<std::size_t>(kMaxAxialAxes)) {
    throw Error(
        fmt::format("spec.axial.sections has {} entries: must have 1 to {} (one per axis)", s.size(), kMaxAxialAxes));
  }
  long sum = 0;
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (s[i] < 1) throw Error(fmt::format("spec.axial.sections[{}] = {}: must be >= 1", i, s[i]));
    sum += s[i];
  }
  if (sum != num_pairs()) {
    throw Error(fmt::format("spec.axial.sections = [{}] sum to {}: must sum to rotary_dim/2 = {}", fmt::join(s, ", "),
                            sum, num_pairs()));
  }
  if (axial->frequencies != AxialFrequencies::PerAxis && axial->frequencies != AxialFrequencies::Strided) {
    fail("spec.axial.frequencies", static_cast<int>(axial->frequencies), "is not a known schedule");
  }
  if (axial->frequencies == AxialFrequencies::Strided &&
      std::adjacent_find(s.begin(), s.end(), std::not_equal_to<>()) != s.end()) {
    throw Error(
        fmt::format("spec.axial.sections = [{}]: strided frequencies (Pixtral) deal one list round-robin, "
                    "so every axis needs the same number of pairs",
                    fmt::join(s, ", ")));
  }
  if (!std::holds_alternative<scaling::None>(scaling)) {
    throw Error(fmt::format("spec.scaling = {} with spec.axial: axial (vision) RoPE takes no scaling variant",
                            rope_type_name(scaling)));
  }
}

}  // namespace ropekit
