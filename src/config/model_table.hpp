// What ropekit must know about a model family beyond its config keys: the lane pairing its
// attention code uses and the quirks of its RoPE set-up. One row per Hugging Face model_type and
// per llama.cpp architecture; docs/config.md renders the same tables.
#pragma once

#include <optional>
#include <string_view>

#include "ropekit/spec.hpp"

namespace ropekit::detail {

enum class ModelQuirk {
  None,
  Gemma3,    // per-layer-type RoPE: sliding layers use rope_local_base_freq, unscaled
  DeepSeek,  // MLA: the rope part (qk_rope_head_dim) follows the nope part; rope_interleave
  Qwen3VL,   // M-RoPE is always interleaved (HF's modeling code ignores mrope_interleaved)
};

struct ModelInfo {
  std::string_view model_type;
  Pairing pairing;
  // Llama-style models' compute_default_rope_parameters rotates the whole head whatever
  // partial_rotary_factor says (HF); the scaled variants in modeling_rope_utils still apply it.
  bool default_ignores_partial_rotary;
  double default_theta;  // the config class's rope_theta default (HF: 10000 unless overridden)
  ModelQuirk quirk = ModelQuirk::None;
};

// nullptr when the model_type is not in the table.
const ModelInfo* find_model(std::string_view model_type);

struct GgufArchInfo {
  std::string_view arch;
  Pairing pairing;  // llama.cpp's LLAMA_ROPE_TYPE_NORM = Interleaved, NEOX/MROPE/IMROPE = Half
  std::optional<MRopeLayout> mrope;
  ModelQuirk quirk = ModelQuirk::None;
};

const GgufArchInfo* find_gguf_arch(std::string_view arch);

}  // namespace ropekit::detail
