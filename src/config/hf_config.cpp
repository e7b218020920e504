// config.json → ModelPositions: the family's per-layer rules (model_table.cpp) and each RoPE layer's
// Spec, resolving parameters the way Hugging Face transformers v5 does
// (RotaryEmbeddingConfigMixin / standardize_rope_params and the _compute_*_parameters functions in
// modeling_rope_utils.py). docs/config.md lists every key read, for users.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "config/json.hpp"
#include "config/model_table.hpp"
#include "config/positions_builder.hpp"
#include "ropekit/config.hpp"
#include "ropekit/encodings.hpp"
#include "ropekit/error.hpp"
#include "ropekit/variants.hpp"

namespace ropekit {
namespace {

using detail::json;
using detail::LayerRule;
using detail::ModelInfo;
using detail::Reader;
using detail::Value;

// One RoPE parameter dictionary (legacy rope_scaling, v5 rope_parameters, or one layer type's).
struct RopeParams {
  const json* dict = nullptr;  // may be nullptr: no parameters beyond the defaults
  std::string path;            // "rope_scaling", "rope_parameters", "rope_parameters.full_attention"
  Value get(std::string_view key) const {
    if (!dict) return {};
    if (const json* v = Reader::member(*dict, key)) return {v, fmt::format("{}.{}", path, key)};
    return {};
  }
};

// Keys each rope type reads from the rope dictionary (its description's Rope fields, ropekit/variants.hpp)
// and the keys every dictionary may hold, for the unrecognised-key warning. Built once, immutable
// afterwards (read_config may run on several threads).
const std::set<std::string_view>& known_keys(std::string_view rope_type) {
  static const std::map<std::string_view, std::set<std::string_view>> merged = [] {
    const std::set<std::string_view> common{
        "rope_type", "type", "rope_theta", "partial_rotary_factor", "mrope_section", "mrope_interleaved"};
    std::map<std::string_view, std::set<std::string_view>> by_type;
    for (const VariantInfo* variant : variant_infos()) {
      if (!variant->config_rope_type) continue;
      std::set<std::string_view>& keys = by_type[variant->name];
      keys.insert(common.begin(), common.end());
      for (const FieldInfo& field : variant->fields) {
        if (field.source == FieldSource::Rope) keys.insert(field.key);
      }
    }
    return by_type;
  }();
  return merged.at(rope_type);
}

// What one layer is, before its plan is formed: the layer type's name and how it attends.
struct LayerKind {
  std::string type;       // the model's layer type ("" when it has one kind of layer)
  bool attention = true;  // false: conv / Mamba / linear-attention mixer
  bool rope = true;       // false: NoPE (or ALiBi / learned, by the family)
  bool sliding = false;   // sliding_window applies
  bool chunked = false;   // Llama 4 chunked attention
  std::string params;     // which rope parameter set ("" = the model's; a layer type; "main"/"compress")
  bool operator==(const LayerKind&) const = default;
};

class ModelReader {
 public:
  ModelReader(const json& root, const ConfigOptions& options, std::string origin)
      : r_(root, std::move(origin)), root_(root), options_(options) {}

  ModelPositions read() {
    out_.source = r_.origin();
    identify_model();
    read_head_dims();
    if (Value v = r_.model_key_any({"max_position_embeddings", "n_positions", "seq_length"})) {
      out_.max_position_embeddings = r_.integer(v);
      if (out_.max_position_embeddings <= 0) r_.fail(v.path, *v.node, "must be > 0");
    }
    read_layer_count();
    read_params();
    const std::vector<LayerKind> kinds = layer_kinds();
    std::vector<LayerPositions> plans;
    std::vector<std::pair<LayerKind, LayerPositions>> memo;
    for (const LayerKind& k : kinds) {
      auto it = std::find_if(memo.begin(), memo.end(), [&](const auto& m) { return m.first == k; });
      if (it == memo.end()) {
        memo.emplace_back(k, plan_for(k));
        it = memo.end() - 1;
      }
      plans.push_back(it->second);
    }
    detail::assemble_groups(out_, plans, num_layers_ > 0);
    return std::move(out_);
  }

 private:
  // ---- the family ---------------------------------------------------------------------------
  void identify_model() {
    Value top;
    if (const json* t = Reader::member(root_, "model_type")) top = {t, "model_type"};
    Value text = r_.model_key("model_type");  // text_config.model_type when nested
    if (top)
      out_.model_type = r_.string(top);
    else if (text)
      out_.model_type = r_.string(text);
    info_ = detail::find_model(out_.model_type);
    // Multimodal wrappers (llava, mistral3, voxtral, ...) describe their language model in text_config.
    if (!info_ && text && text.path != "model_type") info_ = detail::find_model(r_.string(text));
    if (!info_) {
      const bool llama_keys = r_.model_key("num_attention_heads") || r_.model_key("head_dim") ||
                              r_.model_key("rope_theta") || r_.model_key("rope_scaling") ||
                              r_.model_key("rope_parameters");
      if (!llama_keys && !options_.pairing) {
        if (top || text) {
          const Value& t = top ? top : text;
          r_.fail(t.path, *t.node,
                  "not in ropekit's model table (docs/config.md) and the config has no Llama-style keys "
                  "(num_attention_heads, head_dim, rope_theta): pass --pairing half|interleaved to read it "
                  "as a Llama");
        }
        throw Error(
            fmt::format("{}: model_type is missing and the config has no Llama-style keys "
                        "(num_attention_heads, head_dim, rope_theta)",
                        r_.origin()));
      }
      info_ = &detail::llama_fallback();
      out_.warnings.push_back(
          fmt::format("{}: model_type {} is not in ropekit's model table (docs/config.md): read as Hugging Face reads "
                      "a Llama (RoPE on every layer, {} pairing{}, default RoPE over the whole head)",
                      r_.origin(), out_.model_type.empty() ? "(missing)" : out_.model_type,
                      options_.pairing ? to_string(*options_.pairing) : "rotate_half",
                      options_.pairing ? " from --pairing" : "; --pairing overrides it"));
    }
    out_.family = std::string(info_->family);
    pairing_ = options_.pairing ? *options_.pairing : info_->pairing;
    if (!options_.pairing && rule() == LayerRule::DeepSeek) {
      // HF DeepseekV3Config: rope_interleave defaults to true (weights in GPT-J order).
      if (Value v = r_.model_key("rope_interleave")) pairing_ = r_.boolean(v) ? Pairing::Interleaved : Pairing::Half;
    }
  }

  LayerRule rule() const { return info_->rule; }
  bool flag(unsigned f) const { return (info_->flags & f) != 0; }

  // ---- head widths --------------------------------------------------------------------------
  int positive_int(const Value& v) const {
    const int x = r_.small_int(v);
    if (x <= 0) r_.fail(v.path, *v.node, "must be > 0");
    return x;
  }

  void read_head_dims() {
    if (rule() == LayerRule::DeepSeek) {
      if (Value rope = r_.model_key("qk_rope_head_dim")) {
        head_dim_ = positive_int(rope);
        int nope = 0;
        if (Value v = r_.model_key("qk_nope_head_dim")) {
          nope = r_.small_int(v);
          if (nope < 0) r_.fail(v.path, *v.node, "must be >= 0");
        }
        rope_offset_ = nope;
        out_.qk_head_dim = nope + head_dim_;
        return;
      }
    }
    Value explicit_dim = r_.model_key("head_dim");
    if (rule() == LayerRule::ChatGLM || rule() == LayerRule::QwenV1) explicit_dim = r_.model_key("kv_channels");
    if (explicit_dim) {
      head_dim_ = positive_int(explicit_dim);
    } else {
      const Value hidden = r_.model_key_any({"hidden_size", "n_embd", "d_model"});
      const Value heads = r_.model_key_any({"num_attention_heads", "n_head", "n_heads"});
      if (!hidden) r_.missing("head_dim (and hidden_size, to derive it as hidden_size / num_attention_heads)");
      if (!heads) r_.missing("num_attention_heads (needed for head_dim = hidden_size / num_attention_heads)");
      const std::int64_t h = r_.integer(hidden);
      const std::int64_t n = r_.integer(heads);
      if (n <= 0) r_.fail(heads.path, *heads.node, "must be > 0");
      if (h <= 0 || h % n != 0) {
        r_.fail(hidden.path, *hidden.node, fmt::format("must be a positive multiple of {} = {}", heads.path, n));
      }
      if (h / n > (1 << 16)) r_.fail(hidden.path, *hidden.node, "gives a head_dim above 65536");
      head_dim_ = static_cast<int>(h / n);
    }
    out_.qk_head_dim = head_dim_;
  }

  int num_heads() const {
    const Value heads = r_.model_key_any({"num_attention_heads", "n_head", "n_heads"});
    if (!heads) r_.missing("num_attention_heads (ALiBi has one slope per head)");
    const int n = positive_int(heads);
    if (n > 65536) r_.fail(heads.path, *heads.node, "must be <= 65536");
    return n;
  }

  // ---- layers -------------------------------------------------------------------------------
  void read_layer_count() {
    Value v = r_.model_key_any({"num_hidden_layers", "num_layers", "n_layer", "n_layers"});
    if (!v) {
      if (Value types = r_.model_key("layer_types"); types && types.node->is_array()) {
        num_layers_ = int(types.node->size());
        if (num_layers_ > detail::kMaxLayers)
          r_.fail(types.path, *types.node, fmt::format("has more than {} entries", detail::kMaxLayers));
      }
      return;
    }
    const std::int64_t n = r_.integer(v);
    if (n < 0 || n > detail::kMaxLayers)
      r_.fail(v.path, *v.node, fmt::format("must be in [0, {}]", detail::kMaxLayers));
    num_layers_ = int(n);
  }

  std::vector<std::string> strings(const Value& v) const {
    if (!v.node->is_array()) r_.fail(v.path, *v.node, "expected an array of strings");
    std::vector<std::string> out;
    for (std::size_t i = 0; i < v.node->size(); ++i)
      out.push_back(r_.string({&(*v.node)[i], fmt::format("{}[{}]", v.path, i)}));
    return out;
  }

  // A per-layer list must have one entry per layer.
  void check_length(const Value& v, std::size_t size) const {
    if (num_layers_ > 0 && size != std::size_t(num_layers_)) {
      r_.fail(v.path, *v.node, fmt::format("has {} entries: must have num_hidden_layers = {}", size, num_layers_));
    }
  }

  // layer_types when the config lists them (checked against the layer count).
  std::optional<std::vector<std::string>> listed_types() const {
    Value v = r_.model_key("layer_types");
    if (!v) return std::nullopt;
    std::vector<std::string> t = strings(v);
    check_length(v, t.size());
    return t;
  }

  // The period of the sliding pattern: every period-th layer is full attention. An integer, or a
  // string of L (local) and G (global) letters (EXAONE 4's "LLLG").
  std::vector<bool> sliding_pattern(int default_period) const {
    std::vector<bool> sliding(std::size_t(num_layers_), false);
    if (Value p = r_.model_key("sliding_window_pattern")) {
      if (p.node->is_string()) {
        const std::string s = r_.string(p);
        if (s.empty() || s.find_first_not_of("LG") != std::string::npos) {
          r_.fail(p.path, *p.node, "expected an integer or a string of L (sliding) and G (global)");
        }
        for (int i = 0; i < num_layers_; ++i) sliding[std::size_t(i)] = s[std::size_t(i) % s.size()] == 'L';
        return sliding;
      }
      default_period = positive_int(p);
    }
    for (int i = 0; i < num_layers_; ++i) sliding[std::size_t(i)] = default_period > 0 && (i + 1) % default_period != 0;
    return sliding;
  }

  // 1 = the layer rotates (Llama 4, SmolLM3); default every interval-th layer without RoPE.
  std::vector<bool> rope_layers() const {
    std::vector<bool> rope(std::size_t(num_layers_), true);
    if (Value v = r_.model_key("no_rope_layers"); v && v.node->is_array() && !v.node->empty()) {
      const std::vector<int> flags = r_.ints(v);
      check_length(v, flags.size());
      for (std::size_t i = 0; i < flags.size() && i < rope.size(); ++i) {
        if (flags[i] != 0 && flags[i] != 1) r_.fail(fmt::format("{}[{}]", v.path, i), (*v.node)[i], "must be 0 or 1");
        rope[i] = flags[i] == 1;
      }
      return rope;
    }
    int interval = 4;  // Llama4TextConfig / SmolLM3Config no_rope_layer_interval
    if (Value v = r_.model_key("no_rope_layer_interval")) interval = positive_int(v);
    for (int i = 0; i < num_layers_; ++i) rope[std::size_t(i)] = (i + 1) % interval != 0;
    return rope;
  }

  bool has_window() const { return bool(r_.model_key("sliding_window")); }

  // One LayerKind per layer (or, without a layer count, one per kind the family has).
  std::vector<LayerKind> layer_kinds() {
    const int n = num_layers_;
    const bool indexed = n > 0;
    std::vector<LayerKind> kinds;
    auto each = [&](auto&& make) {
      for (int i = 0; i < n; ++i) kinds.push_back(make(i));
    };
    const std::optional<std::vector<std::string>> listed = listed_types();
    auto sliding_kind = [](bool sliding) {
      return LayerKind{sliding ? "sliding_attention" : "full_attention", true, true, sliding, false,
                       sliding ? "sliding_attention" : "full_attention"};
    };
    switch (rule()) {
      case LayerRule::NoAttention: kinds.assign(indexed ? n : 1, LayerKind{"", false, false}); return kinds;
      case LayerRule::Learned:
      case LayerRule::Alibi: kinds.assign(indexed ? n : 1, LayerKind{"", true, false}); return kinds;
      case LayerRule::Mpt:
      case LayerRule::Falcon:
      case LayerRule::Baichuan:
        // Falcon and Baichuan rotate unless they use ALiBi; MPT never rotates (ALiBi or learned).
        kinds.assign(indexed ? n : 1, LayerKind{"", true, rule() != LayerRule::Mpt && !uses_alibi()});
        return kinds;
      case LayerRule::Jamba: {
        if (!indexed) return {LayerKind{"attention", true, false}, LayerKind{"mamba", false, false}};
        int period = 8, offset = 4;  // JambaConfig defaults
        if (Value v = r_.model_key("attn_layer_period")) period = positive_int(v);
        if (Value v = r_.model_key("attn_layer_offset")) offset = r_.small_int(v);
        each([&](int i) {
          return i % period == offset ? LayerKind{"attention", true, false} : LayerKind{"mamba", false, false};
        });
        return kinds;
      }
      case LayerRule::NemotronH: {
        const Value v = r_.model_key("hybrid_override_pattern");
        if (!v) r_.missing("hybrid_override_pattern (which layers attend)");
        const std::string pattern = r_.string(v);
        if (pattern.find_first_not_of("M*-E") != std::string::npos) {
          r_.fail(v.path, *v.node, "expected letters M (Mamba), * (attention), - (MLP), E (MoE)");
        }
        if (indexed) check_length(v, pattern.size());
        for (char c : pattern) {
          kinds.push_back(c == '*' ? LayerKind{"attention", true, false}
                                   : LayerKind{c == 'M'   ? "mamba"
                                               : c == 'E' ? "moe"
                                                          : "mlp",
                                               false, false});
        }
        num_layers_ = int(pattern.size());
        return kinds;
      }
      case LayerRule::NemotronNas: {
        const Value v = r_.model_key("block_configs");
        if (!v || !v.node->is_array()) {
          kinds.assign(indexed ? n : 1, LayerKind{});
          return kinds;
        }
        check_length(v, v.node->size());
        for (std::size_t i = 0; i < v.node->size(); ++i) {
          const json& block = (*v.node)[i];
          const json* attn = block.is_object() ? Reader::member(block, "attention") : nullptr;
          auto flag_of = [&](std::string_view key) {
            const json* f = attn && attn->is_object() ? Reader::member(*attn, key) : nullptr;
            return f && r_.boolean({f, fmt::format("{}[{}].attention.{}", v.path, i, key)});
          };
          if (flag_of("no_op"))
            kinds.push_back(LayerKind{"no_op", false, false});
          else if (flag_of("replace_with_linear"))
            kinds.push_back(LayerKind{"linear", false, false});
          else
            kinds.push_back(LayerKind{"attention"});
        }
        num_layers_ = int(v.node->size());
        return kinds;
      }
      case LayerRule::Mllama: {
        std::vector<int> cross;
        if (Value v = r_.model_key("cross_attention_layers")) cross = r_.ints(v);
        if (!indexed) return {LayerKind{"self_attention"}, LayerKind{"cross_attention", true, false}};
        each([&](int i) {
          return std::find(cross.begin(), cross.end(), i) != cross.end() ? LayerKind{"cross_attention", true, false}
                                                                         : LayerKind{"self_attention"};
        });
        return kinds;
      }
      case LayerRule::Hybrid: return hybrid_kinds(listed);
      case LayerRule::Llama4:
      case LayerRule::SmolLM3: {
        const bool llama4 = rule() == LayerRule::Llama4;
        auto kind = [&](bool rope, const std::string& type) {
          LayerKind k{type, true, rope};
          if (llama4) k.chunked = rope && r_.model_key("attention_chunk_size");
          if (llama4 && type.empty()) k.type = rope ? "chunked_attention" : "full_attention";
          k.sliding = type == "sliding_attention";
          return k;
        };
        if (!indexed) return {kind(true, ""), kind(false, "")};
        const std::vector<bool> rope = rope_layers();
        each([&](int i) { return kind(rope[std::size_t(i)], listed ? (*listed)[std::size_t(i)] : std::string()); });
        return kinds;
      }
      case LayerRule::SlidingRopeOnly: {
        // Cohere 2 rotates only where a window applies; EXAONE 4 too, unless the model has no window.
        const bool windowed = has_window();
        auto kind = [&](bool sliding) {
          LayerKind k = sliding_kind(sliding && windowed);
          k.rope = k.sliding || (info_->model_type == "exaone4" && !windowed);
          return k;
        };
        if (!indexed) return {kind(true), kind(false)};
        if (listed) {
          each([&](int i) { return kind((*listed)[std::size_t(i)] == "sliding_attention"); });
        } else {
          const std::vector<bool> sliding =
              windowed ? sliding_pattern(info_->pattern) : std::vector<bool>(std::size_t(n), false);
          each([&](int i) { return kind(sliding[std::size_t(i)]); });
        }
        return kinds;
      }
      case LayerRule::DeepSeekV4: {
        auto kind = [&](const std::string& type) {
          return LayerKind{type, true, true, true, false, type == "sliding_attention" ? "main" : "compress"};
        };
        if (listed) {
          for (const std::string& t : *listed) kinds.push_back(kind(t));
          return kinds;
        }
        if (Value v = r_.model_key("compress_ratios")) {
          const std::vector<int> ratios = r_.ints(v);
          check_length(v, ratios.size());
          for (std::size_t i = 0; i < ratios.size(); ++i) {
            const int m = ratios[i];
            if (m != 0 && m != 4 && m != 128)
              r_.fail(fmt::format("{}[{}]", v.path, i), (*v.node)[i], "must be 0, 4 or 128");
            kinds.push_back(kind(m == 0   ? "sliding_attention"
                                 : m == 4 ? "compressed_sparse_attention"
                                          : "heavily_compressed_attention"));
          }
          return kinds;
        }
        if (!indexed) return {kind("heavily_compressed_attention"), kind("compressed_sparse_attention")};
        each([&](int i) {
          return kind(i < 2 || i % 2 == 0 ? "heavily_compressed_attention" : "compressed_sparse_attention");
        });
        return kinds;
      }
      default: break;
    }
    // Plain: RoPE everywhere; which layers slide.
    if (listed) {
      for (const std::string& t : *listed) {
        LayerKind k{t, true, true, t == "sliding_attention", t == "chunked_attention", t};
        kinds.push_back(k);
      }
      if (!kinds.empty() && flag(detail::kLastLayerFull)) kinds.back() = sliding_kind(false);
      if (indexed || !kinds.empty()) return kinds;
    }
    if (flag(detail::kQwenWindow)) {
      const Value use = r_.model_key("use_sliding_window");
      const bool on = use && r_.boolean(use) && has_window();
      int first = 28;  // Qwen2Config max_window_layers
      if (Value v = r_.model_key("max_window_layers")) first = r_.small_int(v);
      if (!on) {
        kinds.assign(indexed ? n : 1, LayerKind{});
        return kinds;
      }
      if (!indexed) return {sliding_kind(false), sliding_kind(true)};
      each([&](int i) { return sliding_kind(i >= first); });
      return kinds;
    }
    if (info_->pattern > 0) {
      if (!indexed) return {sliding_kind(false), sliding_kind(true)};
      std::vector<bool> sliding = sliding_pattern(info_->pattern);
      if (flag(detail::kLastLayerFull)) sliding.back() = false;
      each([&](int i) { return sliding_kind(sliding[std::size_t(i)]); });
      return kinds;
    }
    LayerKind all{};
    all.sliding = has_window();
    kinds.assign(indexed ? n : 1, all);
    return kinds;
  }

  std::vector<LayerKind> hybrid_kinds(const std::optional<std::vector<std::string>>& listed) {
    const int n = num_layers_;
    auto attention_type = [](const std::string& t) {
      return t == "full_attention" || t == "attention" || t == "sliding_attention";
    };
    const bool rope_named =
        !flag(detail::kRopeOnlyIfNamed) ||
        (r_.model_key("position_embedding_type") && r_.string(r_.model_key("position_embedding_type")) == "rope");
    auto kind = [&](const std::string& t) {
      if (!attention_type(t)) return LayerKind{t, false, false};
      return LayerKind{t, true, rope_named, t == "sliding_attention"};
    };
    std::vector<std::string> types;
    if (listed) {
      types = *listed;
    } else if (Value v = r_.model_key_any({"full_attn_idxs", "attn_layer_indices"})) {  // LFM2, Bamba
      const std::vector<int> idx = r_.ints(v);
      const std::string other = info_->model_type.starts_with("lfm2") ? "conv" : "mamba";
      for (int i = 0; i < n; ++i) {
        types.push_back(std::find(idx.begin(), idx.end(), i) != idx.end() ? "full_attention" : other);
      }
    } else if (Value v = r_.model_key("attn_type_list")) {  // MiniMax: 0 linear, 1 softmax
      const std::vector<int> t = r_.ints(v);
      check_length(v, t.size());
      for (int x : t) types.push_back(x == 1 ? "full_attention" : "linear_attention");
    } else if (n > 0 && info_->model_type.starts_with("qwen3")) {
      int interval = 4;  // Qwen3NextConfig full_attention_interval
      if (Value v = r_.model_key("full_attention_interval")) interval = positive_int(v);
      for (int i = 0; i < n; ++i) types.push_back((i + 1) % interval != 0 ? "linear_attention" : "full_attention");
    } else {
      return {kind("full_attention")};
    }
    std::vector<LayerKind> kinds;
    for (const std::string& t : types) kinds.push_back(kind(t));
    return kinds;
  }

  bool uses_alibi() const {
    switch (rule()) {
      case LayerRule::Alibi: return true;
      case LayerRule::Falcon:
        if (Value v = r_.model_key("alibi")) return r_.boolean(v);
        return false;
      case LayerRule::Mpt: {
        const Value cfg = r_.model_key("attn_config");
        if (!cfg) return false;
        const json* a = cfg.node->is_object() ? Reader::member(*cfg.node, "alibi") : nullptr;
        return a && r_.boolean({a, cfg.path + ".alibi"});
      }
      case LayerRule::Baichuan: return num_layers_ == 40;  // Baichuan(2)-13B; 7B (32 layers) rotates
      default: return false;
    }
  }

  // ---- rope parameter sets -------------------------------------------------------------------
  void read_params() {
    // HF: rope_parameters = rope_scaling or rope_parameters (the legacy key wins when truthy).
    if (Value v = r_.model_key("rope_scaling"); v && !(v.node->is_object() && v.node->empty())) {
      if (!v.node->is_object()) r_.fail(v.path, *v.node, "expected a JSON object");
      params_ = {v.node, v.path};
    } else if (Value p = r_.model_key("rope_parameters")) {
      if (!p.node->is_object()) r_.fail(p.path, *p.node, "expected a JSON object");
      params_ = {p.node, p.path};
    }
    // v5 nests one dictionary per layer type: {"full_attention": {...}, "sliding_attention": {...}}.
    nested_ = params_.dict && !params_.dict->empty() &&
              std::all_of(params_.dict->begin(), params_.dict->end(), [](const json& v) { return v.is_object(); });
    if (rule() == LayerRule::DeepSeekV4 && !nested_) synthesize_deepseek_v4();
    if (flag(detail::kGlobalHeadDim) && !params_.dict) {
      // Gemma4TextConfig's default rope_parameters.
      synthesized_ = json::parse(R"({"sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
        "full_attention": {"rope_type": "proportional", "partial_rotary_factor": 0.25, "rope_theta": 1000000.0}})");
      params_ = {&synthesized_, "rope_parameters (Gemma4TextConfig default)"};
      nested_ = true;
    }
  }

  // DeepseekV4Config.__post_init__: "main" = default RoPE at rope_theta; "compress" = the config's
  // rope_scaling (YaRN, attention_factor 1 unless given) at compress_rope_theta.
  void synthesize_deepseek_v4() {
    json main = json::object(), compress = json::object();
    main["rope_type"] = "default";
    if (params_.dict) {
      for (const auto& [k, v] : params_.dict->items()) compress[k] = v;
    }
    double theta = 10000.0, compress_theta = 160000.0;
    if (Value v = r_.model_key("rope_theta")) theta = r_.number(v);
    if (Value v = r_.model_key("compress_rope_theta")) compress_theta = r_.number(v);
    main["rope_theta"] = theta;
    compress["rope_theta"] = compress_theta;
    const json* type = Reader::member(compress, "rope_type");
    if (!type) type = Reader::member(compress, "type");
    if (!type)
      compress["rope_type"] = "default";
    else if (type->is_string() && type->get<std::string>() == "yarn" && !compress.contains("attention_factor")) {
      compress["attention_factor"] = 1.0;
    }
    synthesized_ = json::object({{"main", main}, {"compress", compress}});
    params_ = {&synthesized_, params_.dict ? params_.path : std::string("rope_parameters")};
    nested_ = true;
  }

  RopeParams params_for(const LayerKind& k) const {
    if (!nested_) return params_;
    std::string key = k.params.empty() ? k.type : k.params;
    if (const json* d = Reader::member(*params_.dict, key)) return {d, fmt::format("{}.{}", params_.path, key)};
    // A layer type the nesting does not name: HF indexes rope_parameters[layer_type] and fails.
    std::vector<std::string> keys;
    for (const auto& [name, v] : params_.dict->items()) keys.push_back(name);
    r_.missing(fmt::format("{}.{} (layer type {} uses it; the dictionary has {})", params_.path,
                           key.empty() ? "\"\"" : key, key.empty() ? "\"\"" : key, fmt::join(keys, ", ")));
  }

  // ---- one plan ------------------------------------------------------------------------------
  LayerPositions plan_for(const LayerKind& k) {
    LayerPositions g;
    g.layer_type = k.type;
    g.attention = k.attention;
    g.qk_head_dim = out_.qk_head_dim;
    if (!k.attention) {
      g.encoding = PositionEncoding::None;
      return g;
    }
    if (k.sliding) {
      if (Value v = r_.model_key("sliding_window")) {
        g.sliding_window = r_.integer(v);
        if (*g.sliding_window <= 0) r_.fail(v.path, *v.node, "must be > 0");
      }
    }
    if (k.chunked) {
      const Value v = r_.model_key("attention_chunk_size");
      g.attention_chunk = r_.integer(v);
      if (*g.attention_chunk <= 0) r_.fail(v.path, *v.node, "must be > 0");
    }
    if (k.rope) {
      g.encoding = PositionEncoding::Rope;
      read_rope(k, g);
    } else if (rule() == LayerRule::Learned || (rule() == LayerRule::Mpt && !uses_alibi())) {
      g.encoding = PositionEncoding::Learned;
    } else if (uses_alibi()) {
      g.encoding = PositionEncoding::Alibi;
      {
        const std::vector<float> s = alibi_slopes(num_heads());
        g.alibi_slopes.assign(s.begin(), s.end());
      }
    } else {
      g.encoding = PositionEncoding::None;
    }
    g.softmax_scale = softmax_scale(g.qk_head_dim);
    if (flag(detail::kSoftcap)) {
      const json* text = Reader::member(root_, "text_config");
      const json& where = text && text->is_object() && text->contains("attn_logit_softcapping") ? *text : root_;
      if (!where.contains("attn_logit_softcapping"))
        g.logit_softcap = 50.0;  // Gemma2Config default
      else if (Value v = r_.model_key("attn_logit_softcapping"))
        g.logit_softcap = r_.number(v);
    }
    g.query_scaling = query_scaling(k, g);
    return g;
  }

  double softmax_scale(int qk_head_dim) const {
    switch (info_->softmax) {
      case detail::SoftmaxRule::HeadDim: return 1.0 / std::sqrt(double(qk_head_dim));
      case detail::SoftmaxRule::QueryPreAttnScalar: {
        double s = 256.0;  // Gemma2Config / Gemma3TextConfig default
        if (Value v = r_.model_key("query_pre_attn_scalar")) {
          s = r_.number(v);
          if (!(s > 0)) r_.fail(v.path, *v.node, "must be > 0");
        }
        return 1.0 / std::sqrt(s);
      }
      case detail::SoftmaxRule::One: return 1.0;
      case detail::SoftmaxRule::AttentionMultiplier:
        if (Value v = r_.model_key("attention_multiplier")) return r_.number(v);
        return 1.0;
    }
    return 1.0;
  }

  QueryScaling query_scaling(const LayerKind& k, const LayerPositions& g) const {
    QueryScaling q;
    if (rule() == LayerRule::Llama4 && !k.rope) {
      // Python truthiness: some configs carry a number here (HF only tests it).
      if (const Value tuning = r_.model_key("attn_temperature_tuning")) {
        const bool on = tuning.node->is_number() ? r_.number(tuning) != 0.0 : r_.boolean(tuning);
        if (!on) return q;
      }
      q.kind = QueryScaling::Kind::Llama4;
      q.floor_scale = 8192.0;  // Llama4TextConfig defaults
      q.scale = 0.1;
      if (Value v = r_.model_key("floor_scale")) q.floor_scale = r_.number(v);
      if (Value v = r_.model_key("attn_scale")) q.scale = r_.number(v);
      if (!(q.floor_scale > 0)) r_.fail("floor_scale", q.floor_scale, "must be > 0");
      return q;
    }
    if (rule() == LayerRule::QwenV1) {
      if (Value v = r_.model_key("use_logn_attn"); v && r_.boolean(v)) {
        q.kind = QueryScaling::Kind::LogN;
        q.length = qwen_seq_length();
      }
      return q;
    }
    if (flag(detail::kQueryBeta) && g.encoding == PositionEncoding::Rope) {
      const RopeParams p = params_for(k);
      if (Value beta = p.get("llama_4_scaling_beta")) {
        q.kind = QueryScaling::Kind::Beta;
        q.scale = r_.number(beta);
        const Value l = p.get("original_max_position_embeddings");
        if (!l)
          r_.missing(fmt::format("{}.original_max_position_embeddings (llama_4_scaling_beta divides positions by it)",
                                 p.path));
        q.length = r_.integer(l);
        if (q.length <= 0) r_.fail(l.path, *l.node, "must be > 0");
      }
    }
    return q;
  }

  std::int64_t qwen_seq_length() const {
    const Value v = r_.model_key("seq_length");
    if (!v) r_.missing("seq_length (Qwen's dynamic NTK and log-n scaling start past it)");
    const std::int64_t l = r_.integer(v);
    if (l <= 1) r_.fail(v.path, *v.node, "must be > 1");
    return l;
  }

  void read_rope(const LayerKind& k, LayerPositions& g) {
    RopeParams p = params_for(k);
    const bool sliding_unscaled =
        (flag(detail::kLocalBase) || flag(detail::kSlidingUnscaled)) && !nested_ && k.type == "sliding_attention";
    Spec& spec = g.spec;
    spec.pairing = pairing_;
    int head_dim = head_dim_;
    g.rope_offset = rope_offset_;
    if (flag(detail::kGlobalHeadDim) && k.type == "full_attention") {
      head_dim = 512;  // Gemma4TextConfig global_head_dim default
      if (Value v = r_.model_key("global_head_dim")) head_dim = positive_int(v);
      g.qk_head_dim = head_dim;
    }
    spec.head_dim = head_dim;

    if (rule() == LayerRule::ChatGLM) {
      if (Value v = r_.model_key("position_encoding_2d"); v && r_.boolean(v)) {
        r_.fail(v.path, *v.node, "ChatGLM-6B (v1)'s two-dimensional positions are not modelled");
      }
      double ratio = 1.0;
      if (Value v = r_.model_key("rope_ratio")) ratio = r_.number(v);
      spec.base = 10000.0 * ratio;  // modeling_chatglm.py: base = 10000 * rope_ratio
      spec.rotary_dim = head_dim / 2;
      if (spec.rotary_dim % 2 != 0)
        r_.fail("kv_channels", head_dim, "must be a multiple of 4 (ChatGLM rotates kv_channels/2 lanes)");
      spec.scaling = scaling::None{};
      validate(spec, g.layer_type);
      return;
    }
    if (rule() == LayerRule::QwenV1) {
      spec.base = 10000.0;
      if (Value v = r_.model_key("rotary_emb_base")) spec.base = r_.number(v);
      double pct = 1.0;
      Value pv = r_.model_key("rotary_pct");
      if (pv) pct = r_.number(pv);
      if (!(pct > 0.0 && pct <= 1.0)) r_.fail(pv.path, *pv.node, "must be in (0, 1]");
      spec.rotary_dim = int(head_dim * pct);
      if (spec.rotary_dim % 2 != 0 || spec.rotary_dim == 0) {
        const std::string why = fmt::format("gives rotary_dim = {}: must be even and > 0", spec.rotary_dim);
        if (pv) r_.fail(pv.path, *pv.node, why);
        r_.fail("kv_channels", head_dim, why);  // no rotary_pct: the head itself is odd
      }
      spec.scaling = scaling::None{};
      if (Value v = r_.model_key("use_dynamic_ntk"); v && r_.boolean(v)) {
        spec.scaling = scaling::QwenDynamicNtk{qwen_seq_length()};
      }
      validate(spec, g.layer_type);
      return;
    }

    std::string alias;
    const std::string type = sliding_unscaled ? "default" : rope_type(p, alias);
    if (!sliding_unscaled) warn_unknown_keys(p, type);
    spec.base = theta(p, k);
    if (rule() == LayerRule::DeepSeekV4) {
      double prf = 64.0 / 512.0;  // DeepseekV4Config: qk_rope_head_dim / head_dim
      if (Value v = p.get("partial_rotary_factor"))
        prf = r_.number(v);
      else if (Value v = r_.model_key("partial_rotary_factor"))
        prf = r_.number(v);
      else if (Value v = r_.model_key("qk_rope_head_dim"))
        prf = double(positive_int(v)) / double(head_dim);
      const int rope_dim = int(head_dim * prf);
      if (rope_dim <= 0 || rope_dim % 2 != 0 || rope_dim > head_dim) {
        r_.fail(
            "partial_rotary_factor", prf,
            fmt::format("gives {} rotary lanes of head_dim {}: must be even and in (0, head_dim]", rope_dim, head_dim));
      }
      g.rope_offset = head_dim - rope_dim;  // V4 rotates the trailing lanes
      spec.head_dim = rope_dim;
      spec.rotary_dim = rope_dim;
      spec.scaling = scaling(p, type, spec);
      validate(spec, g.layer_type);
      return;
    }
    spec.rotary_dim = rotary_dim(p, type, head_dim);
    spec.scaling = sliding_unscaled ? Scaling{scaling::None{}} : scaling(p, type, spec);
    read_mrope(p, spec);
    validate(spec, g.layer_type);
  }

  void validate(const Spec& spec, const std::string& layer_type) const {
    try {
      spec.validate();
    } catch (const Error& e) {
      throw Error(fmt::format("{}{}: {}", r_.origin(),
                              layer_type.empty() ? "" : fmt::format(" (layer type {})", layer_type), e.what()));
    }
  }

  // The rope_type, with HF's legacy aliases resolved.
  std::string rope_type(const RopeParams& p, std::string& alias_note) const {
    Value v = p.get("rope_type");
    if (!v) v = p.get("type");
    if (!v) return "default";
    std::string type = r_.string(v);
    if (type == "su") {
      alias_note = "su";
      return "longrope";
    }
    if (type == "mrope") {  // Qwen2-VL's legacy spelling: default RoPE with mrope_section
      alias_note = "mrope";
      return "default";
    }
    static const std::set<std::string> known = [] {
      std::set<std::string> names;
      for (const VariantInfo* variant : variant_infos()) {
        if (variant->config_rope_type) names.emplace(variant->name);
      }
      return names;
    }();
    if (!known.contains(type)) {
      r_.fail(v.path, *v.node,
              fmt::format("unknown rope type (known: {}, and the aliases su, mrope)", fmt::join(known, ", ")));
    }
    return type;
  }

  double theta(const RopeParams& p, const LayerKind& k) const {
    if (flag(detail::kLocalBase) && !nested_ && k.type == "sliding_attention") {
      if (Value v = r_.model_key("rope_local_base_freq")) return r_.number(v);
      return 10000.0;  // Gemma3TextConfig default
    }
    Value v = p.get("rope_theta");
    if (!v && flag(detail::kSlidingUnscaled) && params_.dict) v = params_.get("rope_theta");
    for (Value w : {v, r_.model_key("rope_theta"), r_.model_key("rotary_emb_base")}) {
      if (w) {
        const double base = r_.number(w);
        if (!(base > 1.0)) r_.fail(w.path, *w.node, "must be > 1");
        return base;
      }
    }
    return info_->default_theta;  // the config class's default
  }

  int rotary_dim(const RopeParams& p, const std::string& type, int head_dim) {
    if (Value v = r_.model_key("rotary_dim")) {  // GPT-J, CodeGen, MiniMax: an absolute lane count
      const int dim = r_.small_int(v);
      if (dim <= 0 || dim > head_dim || dim % 2 != 0) {
        r_.fail(v.path, *v.node, fmt::format("must be even and in [2, head_dim = {}]", head_dim));
      }
      return dim;
    }
    Value prf = p.get("partial_rotary_factor");
    if (!prf) prf = r_.model_key_any({"partial_rotary_factor", "rotary_pct", "rope_pct"});
    if (!prf) return head_dim;
    const double factor = r_.number(prf);
    if (!(factor > 0.0 && factor <= 1.0)) r_.fail(prf.path, *prf.node, "must be in (0, 1]");
    if (type == "proportional") return head_dim;  // the factor selects pairs, not lanes
    if (type == "default" && info_->default_ignores_partial_rotary) {
      if (factor != 1.0) {
        out_.warnings.push_back(fmt::format(
            "{}: {} = {} is ignored: model_type {}'s default RoPE rotates the whole head (as in Hugging Face)",
            r_.origin(), prf.path, factor, out_.model_type));
      }
      return head_dim;
    }
    const int dim = static_cast<int>(head_dim * factor);  // HF: int(head_dim * factor)
    if (dim % 2 != 0 || dim == 0) {
      r_.fail(prf.path, *prf.node,
              fmt::format("gives rotary_dim = int({} * {}) = {}: must be even and > 0", head_dim, factor, dim));
    }
    return dim;
  }

  double required_number(const RopeParams& p, std::string_view key, std::string_view type) const {
    if (Value v = p.get(key)) return r_.number(v);
    r_.missing(fmt::format("{}.{} (required by rope_type {})", p.path.empty() ? "rope_parameters" : p.path, key, type));
  }

  std::int64_t max_position(std::string_view why) const {
    if (out_.max_position_embeddings > 0) return out_.max_position_embeddings;
    r_.missing(fmt::format("max_position_embeddings ({})", why));
  }

  // HF: a top-level original_max_position_embeddings (Phi-3) takes priority for llama3 / yarn /
  // longrope, then the rope dictionary's, then max_position_embeddings.
  std::int64_t original_length(const RopeParams& p, std::string_view type) const {
    Value v = r_.model_key("original_max_position_embeddings");
    if (!v) v = p.get("original_max_position_embeddings");
    if (v) {
      const std::int64_t l0 = r_.integer(v);
      if (l0 <= 0) r_.fail(v.path, *v.node, "must be > 0");
      return l0;
    }
    return max_position(fmt::format("the default original_max_position_embeddings of rope_type {}", type));
  }

  // HF `rope_parameters.get(key) or default`: 0 and null mean the default.
  double or_default(const RopeParams& p, std::string_view key, double fallback) const {
    if (Value v = p.get(key)) {
      const double x = r_.number(v);
      return x != 0.0 ? x : fallback;
    }
    return fallback;
  }
  std::optional<double> optional_number(const RopeParams& p, std::string_view key) const {
    if (Value v = p.get(key)) return r_.number(v);
    return std::nullopt;
  }

  // HF's _validate_*_rope_parameters log a warning (and go on) for a factor below 1.
  void warn_factor_below_one(const RopeParams& p, std::string_view type, double factor) {
    if (factor < 1.0) {
      out_.warnings.push_back(
          fmt::format("{}: {}.factor = {}: rope_type {} expects a factor >= 1 (Hugging "
                      "Face warns and goes on; so does ropekit)",
                      r_.origin(), p.path, factor, type));
    }
  }

  Scaling scaling(const RopeParams& p, const std::string& type, const Spec& spec) {
    if (type == "default") return scaling::None{};
    if (type == "linear") {
      const double f = required_number(p, "factor", type);
      warn_factor_below_one(p, type, f);
      return scaling::Linear{f};
    }
    if (type == "ntk") return scaling::Ntk{required_number(p, "factor", type)};
    if (type == "dynamic") {
      const double f = required_number(p, "factor", type);
      warn_factor_below_one(p, type, f);
      return scaling::DynamicNtk{f, max_position("dynamic NTK scales past it")};
    }
    if (type == "yarn") {
      const std::int64_t l0 = original_length(p, type);
      std::optional<double> factor = optional_number(p, "factor");
      const double implicit =
          out_.max_position_embeddings > 0 ? double(out_.max_position_embeddings) / double(l0) : 1.0;
      if (!factor) {
        // An explicit null falls back to the ratio (with HF's warning); an absent key is an error.
        if (!(p.dict && p.dict->contains("factor"))) required_number(p, "factor", type);
        out_.warnings.push_back(
            fmt::format("{}: {}.factor is null: using max_position_embeddings / original_max_position_embeddings "
                        "= {} (as Hugging Face)",
                        r_.origin(), p.path, implicit));
        factor = implicit;
      } else if (implicit != 1.0 && *factor != implicit) {
        out_.warnings.push_back(
            fmt::format("{}: {}.factor = {} differs from max_position_embeddings / "
                        "original_max_position_embeddings = {}: using the explicit factor (as Hugging Face)",
                        r_.origin(), p.path, *factor, implicit));
      }
      warn_factor_below_one(p, type, *factor);
      scaling::Yarn y{};
      y.factor = *factor;
      y.original_max_position_embeddings = l0;
      y.beta_fast = or_default(p, "beta_fast", y.beta_fast);
      y.beta_slow = or_default(p, "beta_slow", y.beta_slow);
      if (Value v = p.get("truncate")) y.truncate = r_.boolean(v);
      y.attention_factor = optional_number(p, "attention_factor");
      y.mscale = optional_number(p, "mscale");
      y.mscale_all_dim = optional_number(p, "mscale_all_dim");
      return y;
    }
    if (type == "llama3") {
      const scaling::Llama3 l{required_number(p, "factor", type), required_number(p, "low_freq_factor", type),
                              required_number(p, "high_freq_factor", type), original_length(p, type)};
      warn_factor_below_one(p, type, l.factor);
      if (l.high_freq_factor <= l.low_freq_factor) {
        out_.warnings.push_back(
            fmt::format("{}: {}.high_freq_factor = {} is not above low_freq_factor = {} "
                        "(Hugging Face warns; equal factors leave no smoothing band: a "
                        "hard step at original_max_position_embeddings / low_freq_factor)",
                        r_.origin(), p.path, l.high_freq_factor, l.low_freq_factor));
      }
      return l;
    }
    if (type == "longrope") {
      const Value short_f = p.get("short_factor");
      const Value long_f = p.get("long_factor");
      if (!short_f) required_number(p, "short_factor", type);
      if (!long_f) required_number(p, "long_factor", type);
      const std::int64_t l0 = original_length(p, type);
      scaling::LongRope lr{r_.numbers(short_f), r_.numbers(long_f), l0, 0.0, std::nullopt};
      if (std::optional<double> f = optional_number(p, "factor")) {
        lr.factor = *f;
        warn_factor_below_one(p, type, lr.factor);
      } else {
        lr.factor = double(max_position("LongRoPE's default factor is its ratio to the original")) / double(l0);
      }
      lr.attention_factor = optional_number(p, "attention_factor");
      if (int(lr.short_factor.size()) != spec.num_pairs() || int(lr.long_factor.size()) != spec.num_pairs()) {
        const Value& bad = int(lr.short_factor.size()) != spec.num_pairs() ? short_f : long_f;
        r_.fail(bad.path, *bad.node,
                fmt::format("has {} entries: must have rotary_dim/2 = {}", bad.node->size(), spec.num_pairs()));
      }
      return lr;
    }
    if (type == "proportional") {
      Value prf = p.get("partial_rotary_factor");
      if (!prf) prf = r_.model_key("partial_rotary_factor");
      scaling::Proportional proportional;  // HF's defaults: the struct's
      if (prf) proportional.partial_rotary_factor = r_.number(prf);
      if (std::optional<double> f = optional_number(p, "factor")) proportional.factor = *f;
      return proportional;
    }
    throw Error(fmt::format("{}: rope type {} has no reader", r_.origin(), type));  // unreachable
  }

  void read_mrope(const RopeParams& p, Spec& spec) const {
    const Value section = p.get("mrope_section");
    if (!section) return;
    MRope mrope{r_.ints(section), MRopeLayout::Sectioned};
    if (mrope.sections.size() != 3) r_.fail(section.path, *section.node, "expected 3 entries (t, h, w)");
    if (Value v = p.get("mrope_interleaved"); v && r_.boolean(v)) mrope.layout = MRopeLayout::Interleaved;
    if (flag(detail::kMropeInterleaved)) mrope.layout = MRopeLayout::Interleaved;
    spec.mrope = std::move(mrope);
  }

  void warn_unknown_keys(const RopeParams& p, const std::string& type) {
    if (!p.dict || !p.dict->is_object()) return;
    const auto& known = known_keys(type);
    std::vector<std::string> unknown;
    for (const auto& [key, value] : p.dict->items()) {
      if (key == "llama_4_scaling_beta" && flag(detail::kQueryBeta)) continue;  // read as a query scaling
      if (!known.contains(key)) unknown.push_back(key);
    }
    if (unknown.empty()) return;
    const bool beta = std::find(unknown.begin(), unknown.end(), "llama_4_scaling_beta") != unknown.end();
    out_.warnings.push_back(fmt::format(
        "{}: {}: unrecognized key(s) {} for rope_type {} (ignored: {})", r_.origin(), p.path, fmt::join(unknown, ", "),
        type,
        beta ? fmt::format("model_type {}'s attention code does not apply llama_4_scaling_beta", out_.model_type)
             : "as in Hugging Face"));
  }

  Reader r_;
  const json& root_;
  const ConfigOptions& options_;
  const ModelInfo* info_ = nullptr;
  Pairing pairing_{};
  int head_dim_ = 0;
  int rope_offset_ = 0;
  int num_layers_ = 0;
  RopeParams params_;
  bool nested_ = false;
  json synthesized_;
  ModelPositions out_;
};

}  // namespace

ModelPositions read_config(std::string_view json_text, const ConfigOptions& options, std::string_view origin) {
  const json root = detail::parse_json(json_text, origin);
  return ModelReader(root, options, std::string(origin)).read();
}

ModelPositions read_config_file(const std::filesystem::path& path, const ConfigOptions& options) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(fmt::format("config = {}: cannot open the file", path.string()));
  std::ostringstream text;
  text << in.rdbuf();
  return read_config(text.str(), options, path.string());
}

}  // namespace ropekit
