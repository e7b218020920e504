// ropekit/model_positions.hpp — what a model does with positions, layer by layer.
//
//   ropekit::ModelPositions m = ropekit::read_config_file("config.json");   // config.hpp
//   for (const ropekit::LayerPositions& g : m.groups)                          // layers with one plan
//     if (g.encoding == ropekit::PositionEncoding::Rope) ropekit::Rope rope(g.spec);
//   const ropekit::LayerPositions& l7 = m.at_layer(7);                         // one layer's plan
//
// A model's positional encoding is a per-layer story: Gemma 3 alternates local and global RoPE
// bases, EXAONE 4 and Cohere 2 rotate only in their sliding-window layers (the global layers have
// no positional encoding), Llama 4 and SmolLM3 leave every fourth layer without RoPE, hybrid
// models (LFM2, Qwen3-Next, Jamba, Nemotron-H) have layers without attention at all, Baichuan-13B
// and BLOOM use ALiBi. ModelPositions records, for every layer index, the encoding and the
// attention facts that change the logits by position or by layer; layers whose plans are identical
// form one group (LayerPositions), named by the model's layer type.
//
// Numerics: the readers compute nothing beyond what is stated here — softmax_scale is the
// reference's expression in double (e.g. head_dim^-0.5), QueryScaling::factor is its formula in
// double (the references evaluate it in float32 tensors: they agree to float32 rounding, ≤ 2^-23
// relative). Specs are make_plan's contract (ropekit/plan.hpp).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "ropekit/spec.hpp"

namespace ropekit {

// How a layer makes its attention position-aware.
enum class PositionEncoding {
  Rope = 1,  // rotary: q and k rotate with `spec` in lanes [rope_offset, rope_offset + spec.head_dim)
  None,      // no positional encoding (NoPE layers; also layers without attention, see `attention`)
  Alibi,     // a linear bias −slope_h·(i − j) per head h added to the logits (alibi_slopes)
  Learned,   // absolute position embeddings added to the input once (GPT-2, OPT): nothing per layer
};
std::string_view encoding_name(PositionEncoding e);  // "rope", "none", "alibi", "learned"

// A multiplier of the query that depends on the query's absolute position p (0-based), applied
// before the dot product — long-context "temperature" corrections. factor(p) in double, valid for
// 0 ≤ p < kPositionLimit; ≥ 1 everywhere.
struct QueryScaling {
  enum class Kind {
    None = 0,
    // Qwen (v1) `use_logn_attn`: log_L(p + 1) when p + 1 > L, else 1; L = config seq_length.
    LogN,
    // Llama 4 `attn_temperature_tuning` (NoPE layers only): ln(1 + ⌊(p + 1)/floor_scale⌋)·attn_scale + 1.
    Llama4,
    // Ministral 3 / Devstral / Mistral `llama_4_scaling_beta`: 1 + beta·ln(1 + ⌊p / length⌋),
    // length = rope_parameters.original_max_position_embeddings.
    Beta,
  };
  Kind kind = Kind::None;
  std::int64_t length = 0;   // LogN: seq_length; Beta: original_max_position_embeddings
  double floor_scale = 0.0;  // Llama4 (config floor_scale, HF default 8192)
  double scale = 0.0;        // Llama4: attn_scale (HF default 0.1); Beta: beta

  double factor(std::int64_t position) const;
  std::string formula() const;  // e.g. "1 + 0.1·ln(1 + floor(p / 16384))"; "" for None
  bool operator==(const QueryScaling&) const = default;
};

// The plan shared by one group of layers.
// A second rotary inside a layer: DeepSeek V3.2's and GLM-5's sparse-attention indexer rotates its own q/k heads
// (index_head_dim lanes) with the layer's cos/sin — the same plan as the attention's spec — at its own lanes and
// with its own pairing (V3.2: rotate_half although its MLA attention is interleaved; GLM-5: interleaved).
struct IndexerRope {
  Spec spec;            // the layer's spec with the indexer's pairing
  int rope_offset = 0;  // lanes before the rotary slice in an indexer head (0: the slice comes first)
  int qk_head_dim = 0;  // index_head_dim
  bool operator==(const IndexerRope&) const = default;
};

struct LayerPositions {
  std::string layer_type;   // the model's name for these layers ("full_attention", "nope", ...);
                            // "" when every layer shares one plan
  std::vector<int> layers;  // layer indices, ascending; empty when the config gives no layer count
  PositionEncoding encoding = PositionEncoding::Rope;
  bool attention = true;  // false: the layer mixes tokens without attention (conv, Mamba, linear
                          // attention); its encoding is None

  // RoPE only.
  Spec spec;
  // Lanes before the rotary slice in each q/k head: 0 except MLA models (DeepSeek V2/V3, MiniCPM3,
  // Kimi K2: the rope part follows qk_nope_head_dim lanes) and DeepSeek V4 (the last 64 of 512).
  int rope_offset = 0;
  int qk_head_dim = 0;                 // full width of a q/k head in these layers (Gemma 4 global: 512)
  std::optional<IndexerRope> indexer;  // the layer's sparse-attention indexer rotary, when it has one
  // The entry of the config's per-layer-type rope_parameters this RoPE was read from: the layer type itself
  // (Gemma 3/4, OLMo 3, ...) or a parameter set's name (DeepSeek V4's "main" / "compress"); "" when the config
  // has one set for every layer.
  std::string rope_parameters;

  std::vector<double> alibi_slopes;  // ALiBi only: one per query head (ropekit::alibi_slopes)

  // Attention facts that change the logits.
  std::optional<std::int64_t> sliding_window;   // keys within this many positions (config's number)
  std::optional<std::int64_t> attention_chunk;  // Llama 4: attend only within aligned chunks
  // The model's softmax scale before the rope's plan.softmax_scale_mult (DeepSeek's mscale²), i.e.
  // logits = softmax_scale · plan.softmax_scale_mult · q·k: head_dim^-0.5 unless the family says
  // otherwise (Gemma 2/3 query_pre_attn_scalar^-0.5, Gemma 3n/4 1, Granite attention_multiplier).
  double softmax_scale = 0.0;
  std::optional<double> logit_softcap;  // Gemma 2: logits = cap·tanh(logits/cap)
  QueryScaling query_scaling;

  bool operator==(const LayerPositions&) const = default;
};

struct ModelPositions {
  std::string source;                        // "config.json FILE", "preset NAME", "gguf FILE"
  std::string model_type;                    // HF model_type, or the GGUF general.architecture
  std::string family;                        // the model table row that was applied (docs/config.md)
  int num_layers = 0;                        // 0 when the config gives no layer count (a fragment)
  int qk_head_dim = 0;                       // full width of a q/k head (DeepSeek: nope + rope lanes)
  std::int64_t max_position_embeddings = 0;  // the context length the config declares
  std::vector<LayerPositions> groups;        // in first-use order over the layers
  std::vector<std::string> layer_types;      // per layer, the group's layer_type (when known)
  std::vector<std::string> warnings;         // what Hugging Face would warn about, assumptions made

  // The group named `layer_type`; "" selects the only group, or the only RoPE group. Throws
  // ropekit::Error listing the layer types when the name is unknown or "" is ambiguous.
  const LayerPositions& layer(std::string_view layer_type = {}) const;
  // layer(0) would name a layer type by a null pointer (a crash): a layer's group by index is at_layer(index).
  const LayerPositions& layer(int index) const = delete;
  // The group that layer `index` belongs to. Throws ropekit::Error naming the index and the layer
  // count when it is out of range or the config gives no layer count.
  const LayerPositions& at_layer(int index) const;
  // The RoPE groups, in order.
  std::vector<const LayerPositions*> rope_groups() const;
};

}  // namespace ropekit
