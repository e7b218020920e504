// src/config/rope_params.hpp — a RoPE layer's rotary embedding from config.json: which rope parameter
// dictionary a layer reads (legacy rope_scaling, v5 rope_parameters, or one layer type's), its rope_type,
// θ, rotary width, scaling variant (by its description, ropekit/variants.hpp) and M-RoPE sections, as
// Hugging Face transformers v5 resolves them (RotaryEmbeddingConfigMixin / standardize_rope_params and
// modeling_rope_utils.py's _compute_*_parameters); and the families' own rotary embeddings (rope rules)
// for models whose modeling code does not read rope_parameters.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "config/family.hpp"
#include "config/json.hpp"
#include "ropekit/model_positions.hpp"

namespace ropekit::detail {

// One RoPE parameter dictionary (legacy rope_scaling, v5 rope_parameters, or one layer type's).
struct RopeParams {
  const json* dict = nullptr;  // may be nullptr: no parameters beyond the defaults
  std::string path;            // "rope_scaling", "rope_parameters", "rope_parameters.full_attention"
  Value get(std::string_view key) const;
};

class RopeReader;
// A family's own rotary embedding (model_table.hpp's ModelInfo::rope): fills g.spec (its pairing and
// head_dim already set) and g.rope_offset for layer kind k.
using RopeRule = void (*)(RopeReader& reader, const LayerKind& k, LayerPositions& g);
void chatglm_rope(RopeReader& reader, const LayerKind& k, LayerPositions& g);      // rope_ratio, half the head
void qwen_v1_rope(RopeReader& reader, const LayerKind& k, LayerPositions& g);      // rotary_pct, its dynamic NTK
void deepseek_v4_rope(RopeReader& reader, const LayerKind& k, LayerPositions& g);  // the trailing lanes

class RopeReader {
 public:
  // out: the model being read (its warnings, max_position_embeddings and model_type).
  RopeReader(const Reader& r, const ModelInfo& info, ModelPositions& out) : r(r), info(info), out(out) {}

  // Finds the model's rope parameters (rope_scaling wins over rope_parameters when truthy, as in HF);
  // synthesizes the families' defaults (Gemma 4, DeepSeek V4's main/compress sets).
  void read_params();
  // The dictionary layer kind k reads (a nested one by its layer type).
  RopeParams params_for(const LayerKind& k) const;
  // g.spec and g.rope_offset of a RoPE layer: the family's rope rule, else rope_parameters.
  void read_rope(const LayerKind& k, LayerPositions& g, Pairing pairing, int head_dim, int rope_offset);

  // The pieces, for the rope rules.
  std::string rope_type(const RopeParams& p) const;  // HF's legacy aliases resolved (su, mrope)
  double theta(const RopeParams& p, const LayerKind& k) const;
  int rotary_dim(const RopeParams& p, const std::string& type, int head_dim);
  Scaling scaling(const RopeParams& p, const std::string& type, const Spec& spec);
  void read_mrope(const RopeParams& p, Spec& spec) const;
  void warn_unknown_keys(const RopeParams& p, const std::string& type);
  // Spec::validate with the file and layer type in the message.
  void validate(const Spec& spec, const std::string& layer_type) const;

  const Reader& r;
  const ModelInfo& info;
  ModelPositions& out;

 private:
  void synthesize_deepseek_v4();
  double required_number(const RopeParams& p, std::string_view key, std::string_view type) const;
  std::int64_t max_position(std::string_view why) const;
  std::int64_t original_length(const RopeParams& p, std::string_view type) const;
  double or_default(const RopeParams& p, std::string_view key, double fallback) const;
  std::optional<double> optional_number(const RopeParams& p, std::string_view key) const;
  void warn_factor_below_one(const RopeParams& p, std::string_view type, double factor);

  RopeParams params_;
  bool nested_ = false;
  Document synthesized_;  // freed without allocating (json.hpp)
};

}  // namespace ropekit::detail
