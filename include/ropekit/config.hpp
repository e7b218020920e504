// ropekit/config.hpp — a model's positional plan (ropekit/model_positions.hpp) from its Hugging Face
// config.json, a llama.cpp GGUF file or a built-in preset.
//
//   ropekit::ModelPositions model = ropekit::read_config_file("config.json");
//   ropekit::Rope rope(model.layer("full_attention").spec);   // or model.at_layer(7).spec
//
// The reader resolves parameters as Hugging Face transformers does (v5 `rope_parameters`, legacy
// `rope_theta` + `rope_scaling`, key aliases, per-layer-type parameters, defaults filled the way HF
// fills them) and adds what HF leaves to model code, from the model table in docs/config.md (one
// row per model family, each citing the modeling file it was read from): the lane pairing, which
// layers rotate and which have no positional encoding or no attention, ALiBi, the rotary slice's
// place in the head, windows, softmax scales and position-dependent query scaling. An unknown
// model_type is read as a Llama, with a warning saying so. Errors (ropekit::Error) name the key and
// the value: invalid JSON, a wrong type, a missing required key, an unknown rope type. What HF would
// warn about, and every assumption made, is a warning in ModelPositions::warnings.
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

#include "ropekit/model_positions.hpp"
#include "ropekit/spec.hpp"

namespace ropekit {

struct ConfigOptions {
  // Overrides the pairing that the model table gives (for a model_type or GGUF architecture the
  // table does not know, whose pairing is otherwise assumed: rotate_half for config.json).
  std::optional<Pairing> pairing;
};

// Hugging Face config.json text (a whole config, or a fragment with the RoPE keys and model_type).
// `origin` names the input in error messages.
ModelPositions read_config(std::string_view json_text, const ConfigOptions& options = {},
                           std::string_view origin = "config.json");
ModelPositions read_config_file(const std::filesystem::path& path, const ConfigOptions& options = {});

// llama.cpp GGUF (versions 2 and 3): the header, the key/value metadata and, when present, the small
// rope_freqs / rope_factors_long / rope_factors_short tensors (F32). The pairing is llama.cpp's for
// the architecture: Interleaved for "llama" (its converter permutes HF's q/k rows so that the
// interleaved kernel reproduces rotate_half), Half for NeoX-style architectures.
ModelPositions read_gguf(std::span<const std::byte> bytes, const ConfigOptions& options = {},
                         std::string_view origin = "gguf");
ModelPositions read_gguf_file(const std::filesystem::path& path, const ConfigOptions& options = {});

// A vision encoder's rotary (axial RoPE, Spec::axial) from a multimodal model's config.json — its vision_config —
// or a vision config alone, as each family's modeling file (transformers v5.15.0) builds it:
//   qwen2_vl / qwen2_5_vl / qwen3_vl(_moe) / glm4v(_moe) / glm_ocr: VisionRotaryEmbedding(head_dim / 2), θ = 10000
//     (fixed in the module), axes (h, w), frequencies per axis, rotate_half (Half); head_dim = embed_dim (Qwen2-VL)
//     or hidden_size, over num_heads; positions from vision_position_ids (+ window_order for Qwen2.5-VL).
//   pixtral (alone, or as the vision_config of llava / mistral3): θ = rope_theta, axes (row, column) taking
//     alternate frequencies (Strided), rotate_half; positions from pixtral_position_ids.
//   llama4: θ = rope_theta, axes (x, y), frequencies per axis, complex pairs (Interleaved); positions from
//     llama4_vision_position_ids.
// Keys HF gives defaults to (spatial_merge_size 2, patch_size 14, window_size 112, rope_theta 10000) take them;
// the width and head count are required. Errors (ropekit::Error naming the key and value): no known vision
// family, a missing or non-integer key, a head_dim not divisible by 4 (two axes of whole pairs), an image_size
// that is not one integer, a rope type other than default.
enum class VisionFamily { Qwen2Vl, Qwen25Vl, Qwen3Vl, Glm4v, Pixtral, Llama4 };
std::string_view to_string(VisionFamily family);
struct VisionRope {
  VisionFamily family = VisionFamily::Qwen2Vl;
  std::string model_type;  // as the config names it
  Spec spec;               // axial; head_dim = rotary_dim = the encoder's head width
  int num_heads = 0;
  std::int64_t spatial_merge_size = 1;  // Qwen-VL / GLM-4V merge block side; 1 for the others
  std::int64_t patch_size = 0;
  std::int64_t window_size = 0;       // Qwen2.5-VL's window attention (vision_window_index); 0 for the others
  std::int64_t patches_per_side = 0;  // Pixtral: max_patches_per_side; Llama 4: the fixed grid's side; else 0
};
VisionRope read_vision_config(std::string_view json_text, std::string_view origin = "config.json");

// The model table (docs/config.md): the Hugging Face model_types read_config knows, each read with its family's rules
// (pairing, which layers rotate, ...). A config whose model_type is absent is matched to a row by the class its
// `architectures` or `auto_map` names (transformers' naming: Qwen2ForCausalLM is qwen2); one not in the table is read
// as a Llama, with a warning.
struct ModelFamily {
  std::string_view model_type;  // e.g. "qwen2"
  std::string_view family;      // the row's name in docs/config.md: "llama-style", "gemma 3", "gpt-j-style", ...
  Pairing pairing;              // its attention code's lane pairing (DeepSeek MLA: rope_interleave may change it)
  std::string_view source;      // the modeling file the row was read from
  bool remote_code = false;     // the model repository ships the modeling code (trust_remote_code)
};
std::span<const ModelFamily> model_families();

// Built-in presets: real models' config.json RoPE fragments, embedded at build time from presets/
// and read by read_config.
struct Preset {
  std::string_view name;         // e.g. "llama-3.1-8b"
  std::string_view model;        // the Hugging Face repository it comes from
  std::string_view config_json;  // the fragment
};
std::span<const Preset> presets();
// Throws ropekit::Error naming the preset and listing the known ones.
ModelPositions read_preset(std::string_view name, const ConfigOptions& options = {});

}  // namespace ropekit
