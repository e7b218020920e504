// ropekit/config.hpp — a model's RoPE from its Hugging Face config.json, a llama.cpp GGUF file or
// a built-in preset.
//
//   ropekit::ModelRope model = ropekit::read_config_file("config.json");
//   ropekit::Rope rope(model.layer("full_attention").spec);   // or model.layers[0].spec
//
// The reader resolves parameters as Hugging Face transformers does (v5 `rope_parameters`, legacy
// `rope_theta` + `rope_scaling`, key aliases, per-layer-type parameters, defaults filled the way HF
// fills them) and adds what HF leaves to model code: the lane pairing, from the model_type table in
// docs/config.md (overridable), and where the rotary slice sits in each head (DeepSeek MLA).
// Errors (ropekit::Error) name the key and the value: invalid JSON, a wrong type, a missing
// required key, an unknown rope type or model type. Keys HF would not use produce a warning in
// ModelRope::warnings, as HF logs one. docs/config.md lists every key read.
//
// Numerics of every reader: none of its own. Numbers are taken exactly as the file gives them (JSON
// numbers parsed to the nearest double, as Python's json does; GGUF values exactly as stored);
// integers must be exact (|x| ≤ 9e15 in JSON) and lengths lie in [1, 2^47) — checked before any
// conversion. What the numbers become is make_plan's contract (ropekit/plan.hpp). Valid input: any
// bytes — every malformed input is an Error, never a crash (each parser has a libFuzzer target).
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "ropekit/spec.hpp"

namespace ropekit {

// The RoPE of one attention layer type.
struct LayerRope {
  std::string layer_type;  // "" when the model has a single type; else e.g. "full_attention"
  Spec spec;
  // Lanes before the rotary slice in each q/k head: 0 except DeepSeek MLA, whose rope part follows
  // the qk_nope_head_dim lanes. The rotated slice is lanes [rope_offset, rope_offset + head_dim).
  int rope_offset = 0;
};

struct ModelRope {
  std::string source;      // "config.json FILE", "preset NAME", "gguf FILE"
  std::string model_type;  // HF model_type, or the GGUF general.architecture
  int qk_head_dim = 0;     // full width of a q/k head (DeepSeek: nope + rope lanes)
  std::int64_t max_position_embeddings = 0;  // the context length the config declares
  std::vector<LayerRope> layers;             // one per distinct layer type, in first-use order
  std::vector<std::string> layer_types;      // per layer, when the model lists them (Gemma 3)
  std::vector<std::string> warnings;         // keys HF would ignore, overridden defaults, ...

  // The layer type `name`; "" selects the only one. Throws ropekit::Error listing the layer types
  // when the name is unknown or when "" is ambiguous.
  const LayerRope& layer(std::string_view name = {}) const;
};

struct ConfigOptions {
  // Overrides the pairing that the model_type table gives (required for a model_type or GGUF
  // architecture the table does not know).
  std::optional<Pairing> pairing;
};

// Hugging Face config.json text (a whole config, or a fragment with the RoPE keys and model_type).
// `origin` names the input in error messages.
ModelRope read_config(std::string_view json_text, const ConfigOptions& options = {},
                      std::string_view origin = "config.json");
ModelRope read_config_file(const std::filesystem::path& path, const ConfigOptions& options = {});

// llama.cpp GGUF (versions 2 and 3): the header, the key/value metadata and, when present, the small
// rope_freqs / rope_factors_long / rope_factors_short tensors (F32). The pairing is llama.cpp's for
// the architecture: Interleaved for "llama" (its converter permutes HF's q/k rows so that the
// interleaved kernel reproduces rotate_half), Half for NeoX-style architectures.
ModelRope read_gguf(std::span<const std::byte> bytes, const ConfigOptions& options = {},
                    std::string_view origin = "gguf");
ModelRope read_gguf_file(const std::filesystem::path& path, const ConfigOptions& options = {});

// Built-in presets: real models' config.json RoPE fragments, embedded at build time from presets/
// and read by read_config.
struct Preset {
  std::string_view name;         // e.g. "llama-3.1-8b"
  std::string_view model;        // the Hugging Face repository it comes from
  std::string_view config_json;  // the fragment
};
std::span<const Preset> presets();
// Throws ropekit::Error naming the preset and listing the known ones.
ModelRope read_preset(std::string_view name, const ConfigOptions& options = {});

}  // namespace ropekit
