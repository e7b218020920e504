// The scaling variants' descriptions (ropekit/variants.hpp): one row per variant, its fields in the
// order the struct declares them, each paired with the struct member it describes.
#include "ropekit/variants.hpp"

#include <array>
#include <optional>
#include <tuple>
#include <type_traits>

namespace ropekit {
namespace {

using enum FieldSource;
using enum Presence;
using enum FieldRule;

template <class S>
struct Describe;

template <>
struct Describe<scaling::None> {
  static constexpr std::array<FieldInfo, 0> fields{};
  static constexpr auto members = std::make_tuple();
  static constexpr VariantInfo info{"default", true, "inv_freq[i] = base^(-2i/d)", fields};
};

template <>
struct Describe<scaling::Linear> {
  static constexpr std::array fields{FieldInfo{"factor", "factor", Rope, Required, Positive}};
  static constexpr auto members = std::make_tuple(&scaling::Linear::factor);
  static constexpr VariantInfo info{"linear", true, "position interpolation: inv_freq[i] = base^(-2i/d) / factor",
                                    fields};
};

template <>
struct Describe<scaling::Ntk> {
  static constexpr std::array fields{FieldInfo{"factor", "factor", Rope, Required, Positive}};
  static constexpr auto members = std::make_tuple(&scaling::Ntk::factor);
  static constexpr VariantInfo info{"ntk", true, "NTK-aware base change: base' = base * factor^(d/(d-2))", fields};
};

template <>
struct Describe<scaling::DynamicNtk> {
  static constexpr std::array fields{
      FieldInfo{"factor", "factor", Rope, Required, Positive},
      FieldInfo{"max_position_embeddings", "max_position_embeddings", Model, Required, Positive}};
  static constexpr auto members =
      std::make_tuple(&scaling::DynamicNtk::factor, &scaling::DynamicNtk::max_position_embeddings);
  static constexpr VariantInfo info{
      "dynamic", true,
      "dynamic NTK: base' = base * ((factor * L / Lmax) - (factor - 1))^(d/(d-2)) for the current length "
      "L = max(L, Lmax)",
      fields};
};

template <>
struct Describe<scaling::Yarn> {
  static constexpr std::array fields{
      FieldInfo{"factor", "factor", Rope, Required, Positive},
      FieldInfo{"original_max_position_embeddings", "original", Rope, Required, Positive},
      FieldInfo{"beta_fast", "beta_fast", Rope, Default, Positive},
      FieldInfo{"beta_slow", "beta_slow", Rope, Default, Positive},
      FieldInfo{"truncate", "truncate", Rope, Default, Any},
      FieldInfo{"attention_factor", "attention_factor", Rope, Optional, Positive},
      FieldInfo{"mscale", "mscale", Rope, Optional, NonNegative},
      FieldInfo{"mscale_all_dim", "mscale_all_dim", Rope, Optional, NonNegative}};
  static constexpr auto members =
      std::make_tuple(&scaling::Yarn::factor, &scaling::Yarn::original_max_position_embeddings,
                      &scaling::Yarn::beta_fast, &scaling::Yarn::beta_slow, &scaling::Yarn::truncate,
                      &scaling::Yarn::attention_factor, &scaling::Yarn::mscale, &scaling::Yarn::mscale_all_dim);
  static constexpr VariantInfo info{
      "yarn", true,
      "YaRN: a linear ramp from original to interpolated (/ factor) frequencies over the pairs whose "
      "wavelengths make beta_fast .. beta_slow turns over the original length; cos and sin times "
      "attention_factor, else mscale(factor, mscale) / mscale(factor, mscale_all_dim), else 0.1 ln(factor) + 1",
      fields};
};

template <>
struct Describe<scaling::Llama3> {
  static constexpr std::array fields{
      FieldInfo{"factor", "factor", Rope, Required, Positive},
      FieldInfo{"low_freq_factor", "low_freq_factor", Rope, Required, Positive},
      FieldInfo{"high_freq_factor", "high_freq_factor", Rope, Required, Positive},
      FieldInfo{"original_max_position_embeddings", "original", Rope, Required, Positive}};
  static constexpr auto members =
      std::make_tuple(&scaling::Llama3::factor, &scaling::Llama3::low_freq_factor, &scaling::Llama3::high_freq_factor,
                      &scaling::Llama3::original_max_position_embeddings);
  static constexpr VariantInfo info{
      "llama3", true,
      "Llama 3: wavelengths above original / low_freq_factor divided by factor, below original / "
      "high_freq_factor kept, a smooth blend between",
      fields};
};

template <>
struct Describe<scaling::LongRope> {
  static constexpr std::array fields{
      FieldInfo{"short_factor", "short_factor", Rope, Required, PerPair},
      FieldInfo{"long_factor", "long_factor", Rope, Required, PerPair},
      FieldInfo{"original_max_position_embeddings", "original", Rope, Required, Positive},
      FieldInfo{"factor", "factor", Rope, Default, Positive},
      FieldInfo{"attention_factor", "attention_factor", Rope, Optional, Positive}};
  static constexpr auto members = std::make_tuple(&scaling::LongRope::short_factor, &scaling::LongRope::long_factor,
                                                  &scaling::LongRope::original_max_position_embeddings,
                                                  &scaling::LongRope::factor, &scaling::LongRope::attention_factor);
  static constexpr VariantInfo info{
      "longrope", true,
      "LongRoPE: inv_freq[i] = base^(-2i/d) / long_factor[i] when the current length exceeds the original, "
      "else / short_factor[i]; cos and sin times attention_factor, else sqrt(1 + ln(factor) / ln(original))",
      fields};
};

template <>
struct Describe<scaling::Proportional> {
  static constexpr std::array fields{
      FieldInfo{"partial_rotary_factor", "partial_rotary_factor", Rope, Default, UnitInterval},
      FieldInfo{"factor", "factor", Rope, Default, Positive}};
  static constexpr auto members =
      std::make_tuple(&scaling::Proportional::partial_rotary_factor, &scaling::Proportional::factor);
  static constexpr VariantInfo info{
      "proportional", true,
      "proportional: the first floor(partial_rotary_factor * head_dim / 2) pairs base^(-2i/head_dim) / factor, "
      "the rest angle 0",
      fields};
};

template <>
struct Describe<scaling::FreqFactors> {
  static constexpr std::array fields{FieldInfo{"divisors", "divisors", File, Required, PerPair}};
  static constexpr auto members = std::make_tuple(&scaling::FreqFactors::divisors);
  static constexpr VariantInfo info{
      "freq_factors", false, "per-pair divisors (GGUF rope_freqs): inv_freq[i] = base^(-2i/d) / divisors[i]", fields};
};

template <>
struct Describe<scaling::QwenDynamicNtk> {
  static constexpr std::array fields{FieldInfo{"seq_length", "seq_length", Model, Required, Positive}};
  static constexpr auto members = std::make_tuple(&scaling::QwenDynamicNtk::seq_length);
  static constexpr VariantInfo info{
      "qwen_dynamic", false,
      "Qwen dynamic NTK: base' = base * alpha^(d/(d-2)), alpha = 2^ceil(log2(L / seq_length) + 1) - 1 past "
      "seq_length, else 1",
      fields};
};

template <>
struct Describe<scaling::HunyuanAlpha> {
  static constexpr std::array fields{
      FieldInfo{"alpha", "alpha", Rope, Required, Positive}, FieldInfo{"factor", "factor", Rope, Required, Positive},
      FieldInfo{"max_position_embeddings", "max_position_embeddings", Model, Required, Positive}};
  static constexpr auto members = std::make_tuple(&scaling::HunyuanAlpha::alpha, &scaling::HunyuanAlpha::factor,
                                                  &scaling::HunyuanAlpha::max_position_embeddings);
  static constexpr VariantInfo info{
      "hunyuan_alpha", false,
      "HunYuan NTK-alpha: base' = base * alpha^(d/(d-2)) up to max_position_embeddings; past it HF's dynamic NTK on "
      "the unscaled base (alpha dropped, as HF's dynamic_rope_update does)",
      fields};
};

// Every description lists its struct's members, one field each.
template <class S>
constexpr bool kDescribed = Describe<S>::fields.size() == std::tuple_size_v<decltype(Describe<S>::members)>;

template <class... S>
constexpr std::array<const VariantInfo*, sizeof...(S)> infos_of(std::variant<S...>*) {
  static_assert((kDescribed<S> && ...), "a variant's description must list each of its fields");
  return {&Describe<S>::info...};
}
constexpr auto kInfos = infos_of(static_cast<Scaling*>(nullptr));

template <class T>
FieldValue value_of(const T& v) {
  if constexpr (std::is_same_v<T, std::optional<double>>) {
    return v ? FieldValue(*v) : FieldValue();
  } else {
    return FieldValue(v);
  }
}

}  // namespace

const VariantInfo& variant_info(const Scaling& scaling) { return *kInfos[scaling.index()]; }

std::span<const VariantInfo* const> variant_infos() { return kInfos; }

const VariantInfo* find_variant(std::string_view name) {
  for (const VariantInfo* info : kInfos) {
    if (info->name == name) return info;
  }
  return nullptr;
}

void for_each_field(const Scaling& scaling, const std::function<void(const FieldInfo&, const FieldValue&)>& f) {
  std::visit(
      [&](const auto& s) {
        using D = Describe<std::decay_t<decltype(s)>>;
        std::size_t i = 0;
        std::apply([&](auto... member) { ((f(D::fields[i], value_of(s.*member)), ++i), ...); }, D::members);
      },
      scaling);
}

std::string_view rope_type_name(const Scaling& scaling) { return variant_info(scaling).name; }

}  // namespace ropekit
