// ropekit/variants.hpp — every scaling variant (ropekit/spec.hpp's scaling:: structs) described once:
// its name, its formula in words, and its fields — the config key each is read from, whether the key is
// required, what a field's value must be. A field's default is its struct's own initializer (spec.hpp),
// written nowhere else: readers take `scaling::Yarn{}.beta_fast`.
//
// Who reads this table: Spec::validate (each field's rule), rope_type_name, the config.json reader
// (which keys a rope_type reads, which are required), the GGUF reader (defaults), `ropekit inspect`
// and `ropekit freqs --json` (each field with its value), the Python module (Spec.to_dict and
// ropekit.scaling_variants()). make_plan (src/rope/plan.cpp) implements each formula and pair_bands
// (src/analysis/bands.cpp) each band rule: those are code, one function per variant.
//
// A new variant: its struct in spec.hpp (added to Scaling), its row in src/rope/variants.cpp, its
// formula in plan.cpp and its band rule in bands.cpp; the config reader reads it by this description
// unless the variant needs a rule Hugging Face applies to one key only.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string_view>
#include <variant>
#include <vector>

#include "ropekit/spec.hpp"

namespace ropekit {

// Where a field's value comes from in a Hugging Face config.json.
enum class FieldSource : std::uint8_t {
  Rope,   // the rope dictionary: rope_parameters.<key> (legacy rope_scaling.<key>)
  Model,  // a top-level key of the model's config (max_position_embeddings, seq_length)
  File,   // neither: GGUF tensors (rope_freqs)
};

enum class Presence : std::uint8_t {
  Required,  // the reader fails without it
  Default,   // absent: the struct's initializer (Hugging Face's default)
  Optional,  // absent: unset (std::optional), with a meaning of its own (yarn.attention_factor)
};

// What Spec::validate requires of a field's value.
enum class FieldRule : std::uint8_t {
  Positive,      // a finite number > 0 (lengths: an integer > 0)
  NonNegative,   // a finite number >= 0 (0 means what Hugging Face's "unset" means)
  UnitInterval,  // a finite number in (0, 1]
  PerPair,       // rotary_dim/2 finite numbers > 0
  Any,           // booleans
};

struct FieldInfo {
  std::string_view key;    // the config key: rope_parameters.<key>, or the top-level <key> (FieldSource)
  std::string_view label;  // how `ropekit inspect` names it ("original" for original_max_position_embeddings)
  FieldSource source;
  Presence presence;
  FieldRule rule;
};

struct VariantInfo {
  std::string_view name;     // Hugging Face's rope_type ("freq_factors", "qwen_dynamic": ropekit's own)
  bool config_rope_type;     // a rope_type config.json may name (the reader's list)
  std::string_view formula;  // in words, for inspect and the docs
  std::span<const FieldInfo> fields;
};

// A field's value as generic code sees it: double, std::int64_t, bool, a per-pair list, or nothing (an
// unset optional).
using FieldValue = std::variant<std::monostate, double, std::int64_t, bool, std::vector<double>>;

// The description of `scaling`'s variant; of every variant, in Scaling's order; of the variant called
// `name` (nullptr when none is).
const VariantInfo& variant_info(const Scaling& scaling);
std::span<const VariantInfo* const> variant_infos();
const VariantInfo* find_variant(std::string_view name);

// f(field, value) for each field of `scaling`, in its description's order.
void for_each_field(const Scaling& scaling, const std::function<void(const FieldInfo&, const FieldValue&)>& f);

}  // namespace ropekit
