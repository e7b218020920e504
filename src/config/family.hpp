// src/config/family.hpp — the per-family rules of the config.json reader. A family is a row of the model
// table (model_table.cpp) naming, where its modeling code needs one, a layer rule (which layers attend,
// slide, rotate) and a rope rule (a rotary embedding not described by rope_parameters): one function
// each (layer_rules.cpp, rope_params.cpp), reading the config through a FamilyView and returning values.
// A new family is a table row plus, at most, a rule function.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "config/json.hpp"
#include "ropekit/model_positions.hpp"

namespace ropekit::detail {

struct ModelInfo;

// What one layer is, before its plan is formed: the layer type's name and how it attends.
struct LayerKind {
  std::string type;       // the model's layer type ("" when it has one kind of layer)
  bool attention = true;  // false: conv / Mamba / linear-attention mixer
  // Rope: rotates (with the layer's rope parameters); None, Alibi or Learned: does not.
  PositionEncoding encoding = PositionEncoding::Rope;
  bool sliding = false;  // sliding_window applies
  bool chunked = false;  // Llama 4 chunked attention
  std::string params;    // which rope parameter set ("" = the model's; a layer type; "main"/"compress")
  QueryScaling query;    // the family's query scaling of this layer (Llama 4 temperature, Qwen log-n)
  bool rotates() const { return attention && encoding == PositionEncoding::Rope; }
  bool operator==(const LayerKind&) const = default;
};

// One kind per layer (or, when the config gives no layer count, one per kind the family has), and the
// layer count the rule read (a layer pattern may be the count: Nemotron-H).
struct LayerKinds {
  std::vector<LayerKind> kinds;
  int num_layers = 0;
};

// The config as a family's rules read it: typed keys, the row, the layer count read so far, and the
// readings several families share. Every method throws ropekit::Error naming the key and the file.
class FamilyView {
 public:
  FamilyView(const Reader& r, const ModelInfo& info, int num_layers) : r(r), info(info), num_layers(num_layers) {}

  const Reader& r;
  const ModelInfo& info;
  const int num_layers;  // 0: the config gives no count

  Value key(std::string_view name) const { return r.model_key(name); }
  bool flag(unsigned f) const;
  int positive_int(const Value& v) const;
  std::vector<std::string> strings(const Value& v) const;
  // A per-layer list must have one entry per layer.
  void check_length(const Value& v, std::size_t size) const;
  // layer_types when the config lists them (checked against the layer count).
  std::optional<std::vector<std::string>> listed_types() const;
  // Whether each layer slides: every period-th layer is full attention. sliding_window_pattern (an
  // integer, or a string of L and G letters: EXAONE 4's "LLLG") or the row's default period.
  std::vector<bool> sliding_pattern(int default_period) const;
  // Whether each layer rotates: no_rope_layers (1 = rotate), else every no_rope_layer_interval-th
  // layer (default 4) without RoPE (Llama 4, SmolLM3).
  std::vector<bool> rope_layers() const;
  bool has_window() const { return bool(key("sliding_window")); }
  // Qwen (v1)'s seq_length: where its dynamic NTK and log-n scaling start.
  std::int64_t qwen_seq_length() const;
  // `count` copies of one kind, or one when the config gives no layer count.
  LayerKinds every_layer(const LayerKind& kind) const;
};

// Layer rules (layer_rules.cpp), each named in the rows of the families whose modeling code it follows.
using LayerRule = LayerKinds (*)(const FamilyView& family);
LayerKinds plain_layers(const FamilyView& family);    // RoPE everywhere; layer_types / windows / pattern
LayerKinds qwen_v1_layers(const FamilyView& family);  // plain, with log-n query scaling (use_logn_attn)
LayerKinds cohere2_layers(const FamilyView& family);  // only sliding layers rotate
LayerKinds exaone4_layers(const FamilyView& family);  // only sliding layers rotate, unless no window
LayerKinds llama4_layers(const FamilyView& family);   // NoPE every 4th layer, chunked RoPE layers
LayerKinds smollm3_layers(const FamilyView& family);  // NoPE every 4th layer
LayerKinds mllama_layers(const FamilyView& family);   // cross-attention layers without positions
// Hybrids: layer_types name attention and other mixers, else full_attn_idxs / attn_layer_indices (the
// other layers Mamba, or conv for LFM2), else attn_type_list (0 linear, 1 softmax), else (Qwen3-Next)
// every full_attention_interval-th layer attends.
LayerKinds hybrid_layers(const FamilyView& family);
LayerKinds lfm2_layers(const FamilyView& family);
LayerKinds qwen3_next_layers(const FamilyView& family);
LayerKinds jamba_layers(const FamilyView& family);         // attention every attn_layer_period, no RoPE
LayerKinds nemotron_h_layers(const FamilyView& family);    // hybrid_override_pattern
LayerKinds nemotron_nas_layers(const FamilyView& family);  // block_configs: no_op / linear layers
LayerKinds deepseek_v4_layers(const FamilyView& family);   // sliding "main" layers, compressed layers
LayerKinds baichuan_layers(const FamilyView& family);      // 40 layers (13B): ALiBi
LayerKinds falcon_layers(const FamilyView& family);        // alibi: true → ALiBi
LayerKinds mpt_layers(const FamilyView& family);           // attn_config.alibi → ALiBi, else learned
LayerKinds alibi_layers(const FamilyView& family);         // BLOOM
LayerKinds learned_layers(const FamilyView& family);       // absolute learned embeddings
LayerKinds no_attention_layers(const FamilyView& family);  // Mamba, RWKV

}  // namespace ropekit::detail
