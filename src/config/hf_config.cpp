// config.json → Spec, resolving parameters the way Hugging Face transformers v5 does
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
#include "ropekit/config.hpp"
#include "ropekit/error.hpp"

namespace ropekit {
namespace {

using detail::json;
using detail::ModelInfo;
using detail::ModelQuirk;
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

// Keys each rope type reads (HF's validation lists), for the unrecognised-key warning. Built once,
// immutable afterwards (read_config may run on several threads).
const std::set<std::string_view>& known_keys(std::string_view rope_type) {
  static const std::map<std::string_view, std::set<std::string_view>> merged = [] {
    const std::set<std::string_view> common{"rope_type", "type", "rope_theta", "partial_rotary_factor",
                                            "mrope_section", "mrope_interleaved"};
    std::map<std::string_view, std::set<std::string_view>> by_type{
        {"default", {}},
        {"linear", {"factor"}},
        {"dynamic", {"factor"}},
        {"ntk", {"factor"}},
        {"yarn", {"factor", "original_max_position_embeddings", "attention_factor", "beta_fast",
                  "beta_slow", "mscale", "mscale_all_dim", "truncate"}},
        {"llama3", {"factor", "original_max_position_embeddings", "low_freq_factor", "high_freq_factor"}},
        {"longrope", {"short_factor", "long_factor", "factor", "attention_factor",
                      "original_max_position_embeddings"}},
        {"proportional", {"factor"}},
    };
    for (auto& [type, keys] : by_type) keys.insert(common.begin(), common.end());
    return by_type;
  }();
  return merged.at(rope_type);
}

class ModelReader {
 public:
  ModelReader(const json& root, const ConfigOptions& options, std::string origin)
      : r_(root, std::move(origin)), root_(root), options_(options) {}

  ModelRope read() {
    out_.source = r_.origin();
    identify_model();
    read_head_dims();
    if (Value v = r_.model_key_any({"max_position_embeddings", "n_positions"})) {
      out_.max_position_embeddings = r_.integer(v);
      if (out_.max_position_embeddings <= 0) r_.fail(v.path, *v.node, "must be > 0");
    }
    read_layer_types();
    for (auto& [layer_type, params] : layer_params()) {
      out_.layers.push_back(read_layer(layer_type, params));
    }
    return std::move(out_);
  }

 private:
  void identify_model() {
    Value type = r_.model_key("model_type");
    if (const json* top = Reader::member(root_, "model_type")) type = {top, "model_type"};
    if (type) out_.model_type = r_.string(type);
    info_ = detail::find_model(out_.model_type);
    if (options_.pairing) {
      pairing_ = *options_.pairing;
    } else if (info_) {
      pairing_ = info_->pairing;
      if (info_->quirk == ModelQuirk::DeepSeek) {
        // HF DeepseekV3Config: rope_interleave defaults to true (weights in GPT-J order).
        if (Value v = r_.model_key("rope_interleave"); v && !r_.boolean(v)) pairing_ = Pairing::Half;
      }
    } else if (type) {
      r_.fail(type.path, *type.node,
              "not in ropekit's model table (docs/config.md), so the lane pairing is unknown: pass "
              "--pairing half|interleaved (ConfigOptions::pairing)");
    } else {
      throw Error(fmt::format("{}: model_type is missing, so the lane pairing is unknown: pass "
                              "--pairing half|interleaved (ConfigOptions::pairing)",
                              r_.origin()));
    }
  }

  bool quirk(ModelQuirk q) const { return info_ && info_->quirk == q; }

  void read_head_dims() {
    if (Value rope = r_.model_key("qk_rope_head_dim")) {  // DeepSeek MLA
      head_dim_ = r_.small_int(rope);
      if (head_dim_ <= 0) r_.fail(rope.path, *rope.node, "must be > 0");
      int nope = 0;
      if (Value v = r_.model_key("qk_nope_head_dim")) {
        nope = r_.small_int(v);
        if (nope < 0) r_.fail(v.path, *v.node, "must be >= 0");  // names text_config.* when nested
      }
      rope_offset_ = nope;
      out_.qk_head_dim = nope + head_dim_;
      return;
    }
    if (Value v = r_.model_key("head_dim")) {
      head_dim_ = r_.small_int(v);
      if (head_dim_ <= 0) r_.fail(v.path, *v.node, "must be > 0");
    } else {
      const Value hidden = r_.model_key_any({"hidden_size", "n_embd", "d_model"});
      const Value heads = r_.model_key_any({"num_attention_heads", "n_head"});
      if (!hidden) r_.missing("head_dim (and hidden_size, to derive it as hidden_size / num_attention_heads)");
      if (!heads) r_.missing("num_attention_heads (needed for head_dim = hidden_size / num_attention_heads)");
      const std::int64_t h = r_.integer(hidden);
      const std::int64_t n = r_.integer(heads);
      if (n <= 0) r_.fail(heads.path, *heads.node, "must be > 0");
      if (h <= 0 || h % n != 0) {
        r_.fail(hidden.path, *hidden.node,
                fmt::format("must be a positive multiple of {} = {}", heads.path, n));
      }
      if (h / n > (1 << 16)) r_.fail(hidden.path, *hidden.node, "gives a head_dim above 65536");
      head_dim_ = static_cast<int>(h / n);
    }
    out_.qk_head_dim = head_dim_;
  }

  void read_layer_types() {
    if (Value v = r_.model_key("layer_types")) {
      if (!v.node->is_array()) r_.fail(v.path, *v.node, "expected an array of strings");
      for (std::size_t i = 0; i < v.node->size(); ++i) {
        out_.layer_types.push_back(r_.string({&(*v.node)[i], fmt::format("{}[{}]", v.path, i)}));
      }
    } else if (quirk(ModelQuirk::Gemma3)) {
      // Older Gemma 3 configs: every sliding_window_pattern-th layer is global.
      if (Value layers = r_.model_key("num_hidden_layers")) {
        const std::int64_t n = r_.integer(layers);
        std::int64_t pattern = 6;  // Gemma3TextConfig default
        if (Value p = r_.model_key("sliding_window_pattern")) pattern = r_.integer(p);
        if (n < 0 || n > 100000) r_.fail(layers.path, *layers.node, "must be in [0, 100000]");
        if (pattern <= 0) r_.fail("sliding_window_pattern", pattern, "must be > 0");
        for (std::int64_t i = 0; i < n; ++i) {
          out_.layer_types.push_back((i + 1) % pattern == 0 ? "full_attention" : "sliding_attention");
        }
      }
    }
  }

  // The parameter dictionaries, one per layer type ("" when the model has one).
  std::vector<std::pair<std::string, RopeParams>> layer_params() {
    std::vector<std::pair<std::string, RopeParams>> out;
    // HF: rope_parameters = rope_scaling or rope_parameters (the legacy key wins when truthy).
    RopeParams params;
    if (Value v = r_.model_key("rope_scaling"); v && !(v.node->is_object() && v.node->empty())) {
      if (!v.node->is_object()) r_.fail(v.path, *v.node, "expected a JSON object");
      params = {v.node, v.path};
    } else if (Value p = r_.model_key("rope_parameters")) {
      if (!p.node->is_object()) r_.fail(p.path, *p.node, "expected a JSON object");
      params = {p.node, p.path};
    }
    // v5 nests one dictionary per layer type: {"full_attention": {...}, "sliding_attention": {...}}.
    const bool nested = params.dict && !params.dict->empty() &&
                        std::all_of(params.dict->begin(), params.dict->end(),
                                    [](const json& v) { return v.is_object(); });
    if (nested) {
      std::vector<std::string> order;
      for (const std::string& t : out_.layer_types) {
        if (std::find(order.begin(), order.end(), t) == order.end()) order.push_back(t);
      }
      for (const auto& [key, value] : params.dict->items()) {
        if (std::find(order.begin(), order.end(), key) == order.end()) order.push_back(key);
      }
      for (const std::string& t : order) {
        const json* dict = Reader::member(*params.dict, t);
        if (!dict) r_.missing(fmt::format("{}.{} (layer_types uses it)", params.path, t));
        out.push_back({t, RopeParams{dict, fmt::format("{}.{}", params.path, t)}});
      }
      return out;
    }
    if (quirk(ModelQuirk::Gemma3)) {
      // Legacy Gemma 3: global layers use rope_theta + rope_scaling; sliding layers
      // rope_local_base_freq with no scaling.
      sliding_base_ = 10000.0;  // Gemma3TextConfig default
      if (Value v = r_.model_key("rope_local_base_freq")) sliding_base_ = r_.number(v);
      out.push_back({"full_attention", params});
      out.push_back({"sliding_attention", RopeParams{nullptr, "rope_local_base_freq"}});
      return out;
    }
    out.push_back({"", params});
    return out;
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
    static const std::set<std::string> known{"default", "linear", "dynamic", "ntk", "yarn",
                                             "llama3", "longrope", "proportional"};
    if (!known.contains(type)) {
      r_.fail(v.path, *v.node,
              fmt::format("unknown rope type (known: {}, and the aliases su, mrope)",
                          fmt::join(known, ", ")));
    }
    return type;
  }

  LayerRope read_layer(const std::string& layer_type, const RopeParams& p) {
    LayerRope layer;
    layer.layer_type = layer_type;
    layer.rope_offset = rope_offset_;
    std::string alias;
    const std::string type = rope_type(p, alias);
    warn_unknown_keys(p, type);

    Spec& spec = layer.spec;
    spec.head_dim = head_dim_;
    spec.pairing = pairing_;
    spec.base = theta(p, layer_type);
    spec.rotary_dim = rotary_dim(p, type);
    spec.scaling = scaling(p, type, spec);
    read_mrope(p, spec);
    try {
      spec.validate();
    } catch (const Error& e) {
      throw Error(fmt::format("{}{}: {}", r_.origin(),
                              layer_type.empty() ? "" : fmt::format(" (layer type {})", layer_type),
                              e.what()));
    }
    return layer;
  }

  double theta(const RopeParams& p, const std::string& layer_type) const {
    if (layer_type == "sliding_attention" && sliding_base_) return *sliding_base_;
    for (Value v : {p.get("rope_theta"), r_.model_key("rope_theta"), r_.model_key("rotary_emb_base")}) {
      if (v) return r_.number(v);
    }
    return info_ ? info_->default_theta : 10000.0;  // RotaryEmbeddingConfigMixin.default_theta
  }

  int rotary_dim(const RopeParams& p, const std::string& type) {
    if (Value v = r_.model_key("rotary_dim")) {  // GPT-J, CodeGen: an absolute lane count
      const int dim = r_.small_int(v);
      if (dim <= 0 || dim > head_dim_) {
        r_.fail(v.path, *v.node, fmt::format("must be in [1, head_dim = {}]", head_dim_));
      }
      return dim;
    }
    Value prf = p.get("partial_rotary_factor");
    if (!prf) prf = r_.model_key("partial_rotary_factor");
    if (!prf) prf = r_.model_key("rotary_pct");  // GPT-NeoX's name
    if (!prf) return head_dim_;
    const double factor = r_.number(prf);
    if (!(factor > 0.0 && factor <= 1.0)) r_.fail(prf.path, *prf.node, "must be in (0, 1]");
    if (type == "proportional") return head_dim_;  // the factor selects pairs, not lanes
    if (type == "default" && info_ && info_->default_ignores_partial_rotary) {
      if (factor != 1.0) {
        out_.warnings.push_back(fmt::format(
            "{}: {} = {} is ignored: model_type {}'s default RoPE rotates the whole head (as in "
            "Hugging Face)",
            r_.origin(), prf.path, factor, out_.model_type));
      }
      return head_dim_;
    }
    const int dim = static_cast<int>(head_dim_ * factor);  // HF: int(head_dim * factor)
    if (dim % 2 != 0 || dim == 0) {
      r_.fail(prf.path, *prf.node,
              fmt::format("gives rotary_dim = int({} * {}) = {}: must be even and > 0", head_dim_,
                          factor, dim));
    }
    return dim;
  }

  double required_number(const RopeParams& p, std::string_view key, std::string_view type) const {
    if (Value v = p.get(key)) return r_.number(v);
    r_.missing(fmt::format("{}.{} (required by rope_type {})", p.path.empty() ? "rope_parameters" : p.path,
                           key, type));
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

  Scaling scaling(const RopeParams& p, const std::string& type, const Spec& spec) {
    if (type == "default") return scaling::None{};
    if (type == "linear") return scaling::Linear{required_number(p, "factor", type)};
    if (type == "ntk") return scaling::Ntk{required_number(p, "factor", type)};
    if (type == "dynamic") {
      return scaling::DynamicNtk{required_number(p, "factor", type),
                                 max_position("dynamic NTK scales past it")};
    }
    if (type == "yarn") {
      const std::int64_t l0 = original_length(p, type);
      std::optional<double> factor = optional_number(p, "factor");
      const double implicit = out_.max_position_embeddings > 0
                                  ? double(out_.max_position_embeddings) / double(l0)
                                  : 1.0;
      if (!factor) {
        // An explicit null falls back to the ratio (with HF's warning); an absent key is an error.
        if (!(p.dict && p.dict->contains("factor"))) required_number(p, "factor", type);
        out_.warnings.push_back(fmt::format(
            "{}: {}.factor is null: using max_position_embeddings / original_max_position_embeddings "
            "= {} (as Hugging Face)",
            r_.origin(), p.path, implicit));
        factor = implicit;
      } else if (implicit != 1.0 && *factor != implicit) {
        out_.warnings.push_back(fmt::format(
            "{}: {}.factor = {} differs from max_position_embeddings / "
            "original_max_position_embeddings = {}: using the explicit factor (as Hugging Face)",
            r_.origin(), p.path, *factor, implicit));
      }
      scaling::Yarn y{};
      y.factor = *factor;
      y.original_max_position_embeddings = l0;
      y.beta_fast = or_default(p, "beta_fast", 32.0);
      y.beta_slow = or_default(p, "beta_slow", 1.0);
      if (Value v = p.get("truncate")) y.truncate = r_.boolean(v);
      y.attention_factor = optional_number(p, "attention_factor");
      y.mscale = optional_number(p, "mscale");
      y.mscale_all_dim = optional_number(p, "mscale_all_dim");
      return y;
    }
    if (type == "llama3") {
      return scaling::Llama3{required_number(p, "factor", type),
                             required_number(p, "low_freq_factor", type),
                             required_number(p, "high_freq_factor", type), original_length(p, type)};
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
      } else {
        lr.factor = double(max_position("LongRoPE's default factor is its ratio to the original")) /
                    double(l0);
      }
      lr.attention_factor = optional_number(p, "attention_factor");
      if (int(lr.short_factor.size()) != spec.num_pairs() ||
          int(lr.long_factor.size()) != spec.num_pairs()) {
        const Value& bad = int(lr.short_factor.size()) != spec.num_pairs() ? short_f : long_f;
        r_.fail(bad.path, *bad.node,
                fmt::format("has {} entries: must have rotary_dim/2 = {}", bad.node->size(),
                            spec.num_pairs()));
      }
      return lr;
    }
    if (type == "proportional") {
      Value prf = p.get("partial_rotary_factor");
      if (!prf) prf = r_.model_key("partial_rotary_factor");
      return scaling::Proportional{prf ? r_.number(prf) : 1.0,
                                   optional_number(p, "factor").value_or(1.0)};
    }
    throw Error(fmt::format("{}: rope type {} has no reader", r_.origin(), type));  // unreachable
  }

  void read_mrope(const RopeParams& p, Spec& spec) const {
    const Value section = p.get("mrope_section");
    if (!section) return;
    MRope mrope{r_.ints(section), MRopeLayout::Sectioned};
    if (mrope.sections.size() != 3) {
      r_.fail(section.path, *section.node, "expected 3 entries (t, h, w)");
    }
    if (Value v = p.get("mrope_interleaved"); v && r_.boolean(v)) mrope.layout = MRopeLayout::Interleaved;
    if (quirk(ModelQuirk::Qwen3VL)) mrope.layout = MRopeLayout::Interleaved;
    spec.mrope = std::move(mrope);
  }

  void warn_unknown_keys(const RopeParams& p, const std::string& type) {
    if (!p.dict || !p.dict->is_object()) return;
    const auto& known = known_keys(type);
    std::vector<std::string> unknown;
    for (const auto& [key, value] : p.dict->items()) {
      if (!known.contains(key)) unknown.push_back(key);
    }
    if (!unknown.empty()) {
      out_.warnings.push_back(fmt::format("{}: {}: unrecognized key(s) {} for rope_type {} (ignored, as "
                                          "in Hugging Face)",
                                          r_.origin(), p.path, fmt::join(unknown, ", "), type));
    }
  }

  Reader r_;
  const json& root_;
  const ConfigOptions& options_;
  const ModelInfo* info_ = nullptr;
  Pairing pairing_{};
  int head_dim_ = 0;
  int rope_offset_ = 0;
  std::optional<double> sliding_base_;
  ModelRope out_;
};

}  // namespace

const LayerRope& ModelRope::layer(std::string_view name) const {
  if (name.empty() && layers.size() == 1) return layers.front();
  std::vector<std::string_view> names;
  for (const LayerRope& l : layers) {
    if (!name.empty() && l.layer_type == name) return l;
    names.push_back(l.layer_type.empty() ? "\"\"" : std::string_view(l.layer_type));
  }
  if (name.empty()) {
    throw Error(fmt::format("{}: the model has several layer types ({}): choose one with --layer-type",
                            source, fmt::join(names, ", ")));
  }
  throw Error(fmt::format("{}: layer type = {}: not in this model (layer types: {})", source, name,
                          fmt::join(names, ", ")));
}

ModelRope read_config(std::string_view json_text, const ConfigOptions& options,
                      std::string_view origin) {
  const json root = detail::parse_json(json_text, origin);
  return ModelReader(root, options, std::string(origin)).read();
}

ModelRope read_config_file(const std::filesystem::path& path, const ConfigOptions& options) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(fmt::format("config = {}: cannot open the file", path.string()));
  std::ostringstream text;
  text << in.rdbuf();
  return read_config(text.str(), options, path.string());
}

}  // namespace ropekit

