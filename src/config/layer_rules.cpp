// The families' layer rules (family.hpp): which layers attend, slide and rotate, one function per
// rule, each read from the modeling file its table rows name.
#include <fmt/format.h>

#include <algorithm>

#include "config/family.hpp"
#include "config/model_table.hpp"
#include "config/positions_builder.hpp"

namespace ropekit::detail {

// ---- what several rules read ------------------------------------------------------------------------

bool FamilyView::flag(unsigned f) const { return (info.flags & f) != 0; }

int FamilyView::positive_int(const Value& v) const {
  const int x = r.small_int(v);
  if (x <= 0) r.fail(v.path, *v.node, "must be > 0");
  return x;
}

std::vector<std::string> FamilyView::strings(const Value& v) const {
  if (!v.node->is_array()) r.fail(v.path, *v.node, "expected an array of strings");
  std::vector<std::string> out;
  for (std::size_t i = 0; i < v.node->size(); ++i)
    out.push_back(r.string({&(*v.node)[i], fmt::format("{}[{}]", v.path, i)}));
  return out;
}

void FamilyView::check_length(const Value& v, std::size_t size) const {
  if (num_layers > 0 && size != std::size_t(num_layers)) {
    r.fail(v.path, *v.node, fmt::format("has {} entries: must have num_hidden_layers = {}", size, num_layers));
  }
}

std::optional<std::vector<std::string>> FamilyView::listed_types() const {
  const Value v = key("layer_types");
  if (!v) return std::nullopt;
  std::vector<std::string> t = strings(v);
  check_length(v, t.size());
  return t;
}

std::vector<bool> FamilyView::sliding_pattern(int default_period) const {
  std::vector<bool> sliding(std::size_t(num_layers), false);
  if (const Value p = key("sliding_window_pattern")) {
    if (p.node->is_string()) {
      const std::string s = r.string(p);
      if (s.empty() || s.find_first_not_of("LG") != std::string::npos) {
        r.fail(p.path, *p.node, "expected an integer or a string of L (sliding) and G (global)");
      }
      for (int i = 0; i < num_layers; ++i) sliding[std::size_t(i)] = s[std::size_t(i) % s.size()] == 'L';
      return sliding;
    }
    default_period = positive_int(p);
  }
  for (int i = 0; i < num_layers; ++i) sliding[std::size_t(i)] = default_period > 0 && (i + 1) % default_period != 0;
  return sliding;
}

std::vector<bool> FamilyView::rope_layers() const {
  std::vector<bool> rope(std::size_t(num_layers), true);
  if (const Value v = key("no_rope_layers"); v && v.node->is_array() && !v.node->empty()) {
    const std::vector<int> flags = r.ints(v);
    check_length(v, flags.size());
    for (std::size_t i = 0; i < flags.size() && i < rope.size(); ++i) {
      if (flags[i] != 0 && flags[i] != 1) r.fail(fmt::format("{}[{}]", v.path, i), (*v.node)[i], "must be 0 or 1");
      rope[i] = flags[i] == 1;
    }
    return rope;
  }
  int interval = 4;  // Llama4TextConfig / SmolLM3Config no_rope_layer_interval
  if (const Value v = key("no_rope_layer_interval")) interval = positive_int(v);
  for (int i = 0; i < num_layers; ++i) rope[std::size_t(i)] = (i + 1) % interval != 0;
  return rope;
}

std::int64_t FamilyView::qwen_seq_length() const {
  const Value v = key("seq_length");
  if (!v) r.missing("seq_length (Qwen's dynamic NTK and log-n scaling start past it)");
  const std::int64_t l = r.integer(v);
  if (l <= 1) r.fail(v.path, *v.node, "must be > 1");
  return l;
}

LayerKinds FamilyView::every_layer(const LayerKind& kind) const {
  return {std::vector<LayerKind>(std::size_t(num_layers > 0 ? num_layers : 1), kind), num_layers};
}

namespace {

constexpr PositionEncoding kRope = PositionEncoding::Rope;
constexpr PositionEncoding kNoPE = PositionEncoding::None;

LayerKind sliding_kind(bool sliding) {
  const std::string type = sliding ? "sliding_attention" : "full_attention";
  return LayerKind{type, true, kRope, sliding, false, type};
}

// One kind per layer from f(i), or `unindexed` when the config gives no layer count.
template <class F>
LayerKinds per_layer(const FamilyView& family, std::vector<LayerKind> unindexed, F f) {
  if (family.num_layers <= 0) return {std::move(unindexed), 0};
  LayerKinds out{{}, family.num_layers};
  for (int i = 0; i < family.num_layers; ++i) out.kinds.push_back(f(i));
  return out;
}

// Cohere 2 and EXAONE 4 rotate only where a window applies; EXAONE 4 also everywhere when the model
// has no window at all.
LayerKinds sliding_rope_only(const FamilyView& family, bool rope_without_window) {
  const bool windowed = family.has_window();
  const auto kind = [&](bool sliding) {
    LayerKind k = sliding_kind(sliding && windowed);
    k.encoding = k.sliding || (rope_without_window && !windowed) ? kRope : kNoPE;
    return k;
  };
  if (family.num_layers <= 0) return {{kind(true), kind(false)}, 0};
  if (const auto listed = family.listed_types()) {
    return per_layer(family, {}, [&](int i) { return kind((*listed)[std::size_t(i)] == "sliding_attention"); });
  }
  const std::vector<bool> sliding =
      windowed ? family.sliding_pattern(family.info.pattern) : std::vector<bool>(std::size_t(family.num_layers), false);
  return per_layer(family, {}, [&](int i) { return kind(sliding[std::size_t(i)]); });
}

// Llama 4 and SmolLM3: no_rope_layers; Llama 4's RoPE layers chunked, its NoPE layers temperature-tuned.
LayerKinds no_rope_every_few(const FamilyView& family, bool llama4) {
  QueryScaling temperature;
  if (llama4) {
    // Python truthiness: some configs carry a number here (HF only tests it).
    bool on = true;
    if (const Value tuning = family.key("attn_temperature_tuning")) {
      on = tuning.node->is_number() ? family.r.number(tuning) != 0.0 : family.r.boolean(tuning);
    }
    if (on) {
      temperature.kind = QueryScaling::Kind::Llama4;
      temperature.floor_scale = 8192.0;  // Llama4TextConfig defaults
      temperature.scale = 0.1;
      if (const Value v = family.key("floor_scale")) temperature.floor_scale = family.r.number(v);
      if (const Value v = family.key("attn_scale")) temperature.scale = family.r.number(v);
      if (!(temperature.floor_scale > 0)) family.r.fail("floor_scale", temperature.floor_scale, "must be > 0");
    }
  }
  const auto kind = [&](bool rope, const std::string& type) {
    LayerKind k{type, true, rope ? kRope : kNoPE};
    if (llama4) {
      k.chunked = rope && family.key("attention_chunk_size");
      if (type.empty()) k.type = rope ? "chunked_attention" : "full_attention";
      if (!rope) k.query = temperature;
    }
    k.sliding = type == "sliding_attention";
    return k;
  };
  if (family.num_layers <= 0) return {{kind(true, ""), kind(false, "")}, 0};
  const std::vector<bool> rope = family.rope_layers();
  const auto listed = family.listed_types();
  return per_layer(family, {}, [&](int i) {
    return kind(rope[std::size_t(i)], listed ? (*listed)[std::size_t(i)] : std::string());
  });
}

// The hybrids' shared reading (family.hpp): `other` names the non-attention mixers of an index list;
// `interval` (Qwen3-Next) is the rule when nothing lists the layers.
LayerKinds hybrid(const FamilyView& family, const std::string& other, bool interval) {
  const int n = family.num_layers;
  const auto attends = [](const std::string& t) {
    return t == "full_attention" || t == "attention" || t == "sliding_attention";
  };
  bool rope_named = !family.flag(kRopeOnlyIfNamed);
  if (!rope_named) {
    const Value v = family.key("position_embedding_type");
    rope_named = v && family.r.string(v) == "rope";
  }
  const auto kind = [&](const std::string& t) {
    if (!attends(t)) return LayerKind{t, false, kNoPE};
    return LayerKind{t, true, rope_named ? kRope : kNoPE, t == "sliding_attention"};
  };
  std::vector<std::string> types;
  if (const auto listed = family.listed_types()) {
    types = *listed;
  } else if (const Value v = family.r.model_key_any({"full_attn_idxs", "attn_layer_indices"})) {
    const std::vector<int> idx = family.r.ints(v);
    for (int i = 0; i < n; ++i)
      types.push_back(std::find(idx.begin(), idx.end(), i) != idx.end() ? "full_attention" : other);
  } else if (const Value v = family.key("attn_type_list")) {  // MiniMax: 0 linear, 1 softmax
    const std::vector<int> t = family.r.ints(v);
    family.check_length(v, t.size());
    for (int x : t) types.push_back(x == 1 ? "full_attention" : "linear_attention");
  } else if (interval && n > 0) {
    int every = 4;  // Qwen3NextConfig full_attention_interval
    if (const Value v = family.key("full_attention_interval")) every = family.positive_int(v);
    for (int i = 0; i < n; ++i) types.push_back((i + 1) % every != 0 ? "linear_attention" : "full_attention");
  } else {
    return {{kind("full_attention")}, n};
  }
  LayerKinds out{{}, n};
  for (const std::string& t : types) out.kinds.push_back(kind(t));
  return out;
}

}  // namespace

// ---- the rules ---------------------------------------------------------------------------------------

LayerKinds plain_layers(const FamilyView& family) {
  const int n = family.num_layers;
  if (const auto listed = family.listed_types()) {
    LayerKinds out{{}, n};
    for (const std::string& t : *listed) {
      out.kinds.push_back(LayerKind{t, true, kRope, t == "sliding_attention", t == "chunked_attention", t});
    }
    if (!out.kinds.empty() && family.flag(kLastLayerFull)) out.kinds.back() = sliding_kind(false);
    if (n > 0 || !out.kinds.empty()) return out;
  }
  if (family.flag(kQwenWindow)) {
    const Value use = family.key("use_sliding_window");
    const bool on = use && family.r.boolean(use) && family.has_window();
    int first = 28;  // Qwen2Config max_window_layers
    if (const Value v = family.key("max_window_layers")) first = family.r.small_int(v);
    if (!on) return family.every_layer(LayerKind{});
    return per_layer(family, {sliding_kind(false), sliding_kind(true)},
                     [&](int i) { return sliding_kind(i >= first); });
  }
  if (family.info.pattern > 0) {
    if (n <= 0) return {{sliding_kind(false), sliding_kind(true)}, 0};
    std::vector<bool> sliding = family.sliding_pattern(family.info.pattern);
    if (family.flag(kLastLayerFull)) sliding.back() = false;
    return per_layer(family, {}, [&](int i) { return sliding_kind(sliding[std::size_t(i)]); });
  }
  LayerKind all{};
  all.sliding = family.has_window();
  return family.every_layer(all);
}

LayerKinds qwen_v1_layers(const FamilyView& family) {
  LayerKinds out = plain_layers(family);
  if (const Value v = family.key("use_logn_attn"); v && family.r.boolean(v)) {
    const QueryScaling logn{.kind = QueryScaling::Kind::LogN, .length = family.qwen_seq_length()};
    for (LayerKind& k : out.kinds) k.query = logn;
  }
  return out;
}

LayerKinds cohere2_layers(const FamilyView& family) { return sliding_rope_only(family, false); }
LayerKinds exaone4_layers(const FamilyView& family) { return sliding_rope_only(family, true); }
LayerKinds llama4_layers(const FamilyView& family) { return no_rope_every_few(family, true); }
LayerKinds smollm3_layers(const FamilyView& family) { return no_rope_every_few(family, false); }

LayerKinds mllama_layers(const FamilyView& family) {
  std::vector<int> cross;
  if (const Value v = family.key("cross_attention_layers")) cross = family.r.ints(v);
  const LayerKind self{"self_attention"}, cross_kind{"cross_attention", true, kNoPE};
  return per_layer(family, {self, cross_kind},
                   [&](int i) { return std::find(cross.begin(), cross.end(), i) != cross.end() ? cross_kind : self; });
}

LayerKinds hybrid_layers(const FamilyView& family) { return hybrid(family, "mamba", false); }
LayerKinds lfm2_layers(const FamilyView& family) { return hybrid(family, "conv", false); }
LayerKinds qwen3_next_layers(const FamilyView& family) { return hybrid(family, "mamba", true); }

LayerKinds jamba_layers(const FamilyView& family) {
  const LayerKind attention{"attention", true, kNoPE}, mamba{"mamba", false, kNoPE};
  int period = 8, offset = 4;  // JambaConfig defaults
  if (family.num_layers > 0) {
    if (const Value v = family.key("attn_layer_period")) period = family.positive_int(v);
    if (const Value v = family.key("attn_layer_offset")) offset = family.r.small_int(v);
  }
  return per_layer(family, {attention, mamba}, [&](int i) { return i % period == offset ? attention : mamba; });
}

LayerKinds nemotron_h_layers(const FamilyView& family) {
  // transformers 5.15 writes the list layers_block_type (its attribute layer_types): full_attention,
  // linear_attention (Mamba), moe, mlp — with the legacy names attention / mamba remapped; older configs the
  // pattern string, which wins when both are present as in NemotronHConfig.
  Value v = family.key("hybrid_override_pattern");
  if (!v) {
    Value list = family.key("layers_block_type");
    if (!list) list = family.key("layer_types");
    if (!list) family.r.missing("hybrid_override_pattern or layers_block_type (which layers attend)");
    const std::vector<std::string> blocks = family.strings(list);
    LayerKinds out{{}, int(blocks.size())};
    for (std::size_t i = 0; i < blocks.size(); ++i) {
      const std::string& b = blocks[i];
      if (b == "full_attention" || b == "attention") {
        out.kinds.push_back(LayerKind{"attention", true, kNoPE});
      } else if (b == "linear_attention" || b == "mamba" || b == "moe" || b == "mlp") {
        out.kinds.push_back(LayerKind{b == "linear_attention" ? "mamba" : b, false, kNoPE});
      } else {
        family.r.fail(fmt::format("{}[{}]", list.path, i), (*list.node)[i],
                      "expected full_attention, linear_attention, moe or mlp");
      }
    }
    return out;
  }
  const std::string pattern = family.r.string(v);
  if (pattern.find_first_not_of("M*-E") != std::string::npos) {
    family.r.fail(v.path, *v.node, "expected letters M (Mamba), * (attention), - (MLP), E (MoE)");
  }
  if (family.num_layers > 0) family.check_length(v, pattern.size());
  LayerKinds out{{}, int(pattern.size())};
  for (char c : pattern) {
    out.kinds.push_back(c == '*' ? LayerKind{"attention", true, kNoPE}
                                 : LayerKind{c == 'M'   ? "mamba"
                                             : c == 'E' ? "moe"
                                                        : "mlp",
                                             false, kNoPE});
  }
  return out;
}

LayerKinds nemotron_nas_layers(const FamilyView& family) {
  const Value v = family.key("block_configs");
  if (!v || !v.node->is_array()) return family.every_layer(LayerKind{});
  family.check_length(v, v.node->size());
  LayerKinds out{{}, int(v.node->size())};
  for (std::size_t i = 0; i < v.node->size(); ++i) {
    const json& block = (*v.node)[i];
    const json* attn = block.is_object() ? Reader::member(block, "attention") : nullptr;
    const auto flag_of = [&](std::string_view key) {
      const json* f = attn && attn->is_object() ? Reader::member(*attn, key) : nullptr;
      return f && family.r.boolean({f, fmt::format("{}[{}].attention.{}", v.path, i, key)});
    };
    if (flag_of("no_op")) {
      out.kinds.push_back(LayerKind{"no_op", false, kNoPE});
    } else if (flag_of("replace_with_linear")) {
      out.kinds.push_back(LayerKind{"linear", false, kNoPE});
    } else {
      out.kinds.push_back(LayerKind{"attention"});
    }
  }
  return out;
}

LayerKinds deepseek_v4_layers(const FamilyView& family) {
  const auto kind = [](const std::string& type) {
    return LayerKind{type, true, kRope, true, false, type == "sliding_attention" ? "main" : "compress"};
  };
  // HF DeepseekV4Config keeps the first num_hidden_layers entries of layer_types / compress_ratios: real configs
  // list one more, for the multi-token-prediction layer (DeepSeek-V4-Flash: 44 ratios for 43 layers). Fewer entries
  // than layers is an error; without a layer count every entry is a layer.
  const auto first_layers = [&](const Value& v, std::size_t size) {
    if (family.num_layers > 0 && size < std::size_t(family.num_layers)) family.check_length(v, size);
    return family.num_layers > 0 ? std::size_t(family.num_layers) : size;
  };
  if (const Value v = family.key("layer_types")) {
    const std::vector<std::string> listed = family.strings(v);
    LayerKinds out{{}, family.num_layers};
    for (std::size_t i = 0; i < first_layers(v, listed.size()); ++i) out.kinds.push_back(kind(listed[i]));
    return out;
  }
  if (const Value v = family.key("compress_ratios")) {
    const std::vector<int> ratios = family.r.ints(v);
    LayerKinds out{{}, family.num_layers};
    const std::size_t layers = first_layers(v, ratios.size());
    for (std::size_t i = 0; i < ratios.size(); ++i) {
      const int m = ratios[i];  // every entry, the MTP layer's too: HF maps each through its table
      if (m != 0 && m != 4 && m != 128)
        family.r.fail(fmt::format("{}[{}]", v.path, i), (*v.node)[i], "must be 0, 4 or 128");
      if (i >= layers) continue;
      out.kinds.push_back(kind(m == 0   ? "sliding_attention"
                               : m == 4 ? "compressed_sparse_attention"
                                        : "heavily_compressed_attention"));
    }
    return out;
  }
  return per_layer(family, {kind("heavily_compressed_attention"), kind("compressed_sparse_attention")}, [&](int i) {
    return kind(i < 2 || i % 2 == 0 ? "heavily_compressed_attention" : "compressed_sparse_attention");
  });
}

LayerKinds baichuan_layers(const FamilyView& family) {
  // Baichuan(2)-13B (40 layers) uses ALiBi; the 7B models (32 layers) rotate.
  return family.every_layer(LayerKind{"", true, family.num_layers == 40 ? PositionEncoding::Alibi : kRope});
}

LayerKinds falcon_layers(const FamilyView& family) {
  const Value v = family.key("alibi");
  return family.every_layer(LayerKind{"", true, v && family.r.boolean(v) ? PositionEncoding::Alibi : kRope});
}

LayerKinds mpt_layers(const FamilyView& family) {
  bool alibi = false;
  if (const Value cfg = family.key("attn_config")) {
    const json* a = cfg.node->is_object() ? Reader::member(*cfg.node, "alibi") : nullptr;
    alibi = a && family.r.boolean({a, cfg.path + ".alibi"});
  }
  return family.every_layer(LayerKind{"", true, alibi ? PositionEncoding::Alibi : PositionEncoding::Learned});
}

LayerKinds alibi_layers(const FamilyView& family) {
  return family.every_layer(LayerKind{"", true, PositionEncoding::Alibi});
}

LayerKinds learned_layers(const FamilyView& family) {
  return family.every_layer(LayerKind{"", true, PositionEncoding::Learned});
}

LayerKinds no_attention_layers(const FamilyView& family) { return family.every_layer(LayerKind{"", false, kNoPE}); }

}  // namespace ropekit::detail
