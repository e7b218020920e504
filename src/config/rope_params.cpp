// A RoPE layer's rotary embedding from config.json (see rope_params.hpp): the parameter dictionaries,
// rope_type, θ, rotary width, the scaling variants read by their descriptions (ropekit/variants.hpp),
// M-RoPE, and the families' own rope rules. docs/config.md lists every key read, for users.
#include "config/rope_params.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <map>
#include <set>

#include "config/model_table.hpp"
#include "ropekit/error.hpp"
#include "ropekit/variants.hpp"

namespace ropekit::detail {
namespace {

bool flag(const ModelInfo& info, unsigned f) { return (info.flags & f) != 0; }

int positive_int(const Reader& r, const Value& v) {
  const int x = r.small_int(v);
  if (x <= 0) r.fail(v.path, *v.node, "must be > 0");
  return x;
}

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

}  // namespace

Value RopeParams::get(std::string_view key) const {
  if (!dict) return {};
  if (const json* v = Reader::member(*dict, key)) return {v, fmt::format("{}.{}", path, key)};
  return {};
}

void RopeReader::read_params() {
  // HF: rope_parameters = rope_scaling or rope_parameters (the legacy key wins when truthy).
  if (Value v = r.model_key("rope_scaling"); v && !(v.node->is_object() && v.node->empty())) {
    if (!v.node->is_object()) r.fail(v.path, *v.node, "expected a JSON object");
    params_ = {v.node, v.path};
  } else if (Value p = r.model_key("rope_parameters")) {
    if (!p.node->is_object()) r.fail(p.path, *p.node, "expected a JSON object");
    params_ = {p.node, p.path};
  }
  // v5 nests one dictionary per layer type: {"full_attention": {...}, "sliding_attention": {...}}. Scalars beside them
  // are leftovers the modeling code never reads: transformers' standardize_rope_params treats a nesting whose keys are
  // not all the model's layer types (OLMo 3 with every layer sliding) as one global dictionary and adds "rope_type"
  // and "rope_theta": null to it, while the rotary module still reads rope_parameters[layer_type].
  nested_ = params_.dict && !params_.dict->empty() &&
            std::any_of(params_.dict->begin(), params_.dict->end(), [](const json& v) { return v.is_object(); });
  if ((info.flags & kMainCompressParams) != 0 && !nested_) synthesize_deepseek_v4();
  if (flag(info, kGlobalHeadDim) && !params_.dict) {
    // Gemma4TextConfig's default rope_parameters.
    synthesized_ = parse_json(R"({"sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
      "full_attention": {"rope_type": "proportional", "partial_rotary_factor": 0.25, "rope_theta": 1000000.0}})",
                              "Gemma4TextConfig's default rope_parameters");
    params_ = {&*synthesized_, "rope_parameters (Gemma4TextConfig default)"};
    nested_ = true;
  }
}

// DeepseekV4Config.__post_init__: "main" = default RoPE at rope_theta; "compress" = the config's
// rope_scaling (YaRN, attention_factor 1 unless given) at compress_rope_theta.
void RopeReader::synthesize_deepseek_v4() {
  Document main_doc(json::object()), compress_doc(json::object());
  json &main = *main_doc, &compress = *compress_doc;
  main["rope_type"] = "default";
  if (params_.dict) {
    for (const auto& [k, v] : params_.dict->items()) compress[k] = v;
  }
  double theta = 10000.0, compress_theta = 160000.0;
  if (Value v = r.model_key("rope_theta")) theta = r.number(v);
  if (Value v = r.model_key("compress_rope_theta")) compress_theta = r.number(v);
  main["rope_theta"] = theta;
  compress["rope_theta"] = compress_theta;
  const json* type = Reader::member(compress, "rope_type");
  if (!type) type = Reader::member(compress, "type");
  if (!type)
    compress["rope_type"] = "default";
  else if (type->is_string() && type->get<std::string>() == "yarn" && !compress.contains("attention_factor")) {
    compress["attention_factor"] = 1.0;
  }
  Document both(json::object());
  (*both)["main"] = std::move(main);  // moved: no copy to free
  (*both)["compress"] = std::move(compress);
  synthesized_ = std::move(both);
  params_ = {&*synthesized_, params_.dict ? params_.path : std::string("rope_parameters")};
  nested_ = true;
}

RopeParams RopeReader::params_for(const LayerKind& k) const {
  if (!nested_) return params_;
  std::string key = k.params.empty() ? k.type : k.params;
  if (const json* d = Reader::member(*params_.dict, key)) return {d, fmt::format("{}.{}", params_.path, key)};
  // A layer type the nesting does not name: HF indexes rope_parameters[layer_type] and fails.
  std::vector<std::string> keys;
  for (const auto& [name, v] : params_.dict->items()) keys.push_back(name);
  r.missing(fmt::format("{}.{} (layer type {} uses it; the dictionary has {})", params_.path,
                        key.empty() ? "\"\"" : key, key.empty() ? "\"\"" : key, fmt::join(keys, ", ")));
}

void RopeReader::read_rope(const LayerKind& k, LayerPositions& g, Pairing pairing, int head_dim, int rope_offset) {
  Spec& spec = g.spec;
  spec.pairing = pairing;
  g.rope_offset = rope_offset;
  if (nested_) g.rope_parameters = k.params.empty() ? k.type : k.params;
  if (flag(info, kGlobalHeadDim) && k.type == "full_attention") {
    head_dim = 512;  // Gemma4TextConfig global_head_dim default
    if (Value v = r.model_key("global_head_dim")) head_dim = positive_int(r, v);
    g.qk_head_dim = head_dim;
  }
  spec.head_dim = head_dim;
  if (info.rope != nullptr) return info.rope(*this, k, g);

  const RopeParams p = params_for(k);
  const bool sliding_unscaled =
      (flag(info, kLocalBase) || flag(info, kSlidingUnscaled)) && !nested_ && k.type == "sliding_attention";
  const std::string type = sliding_unscaled ? "default" : rope_type(p);
  if (!sliding_unscaled) warn_unknown_keys(p, type);
  spec.base = theta(p, k);
  spec.rotary_dim = rotary_dim(p, type, head_dim);
  spec.scaling = sliding_unscaled ? Scaling{scaling::None{}} : scaling(p, type, spec);
  read_mrope(p, spec);
  validate(spec, g.layer_type);
}

void RopeReader::validate(const Spec& spec, const std::string& layer_type) const {
  try {
    spec.validate();
  } catch (const Error& e) {
    throw Error(fmt::format("{}{}: {}", r.origin(),
                            layer_type.empty() ? "" : fmt::format(" (layer type {})", layer_type), e.what()));
  }
}

// The rope_type, with HF's legacy aliases resolved.
std::string RopeReader::rope_type(const RopeParams& p) const {
  Value v = p.get("rope_type");
  if (!v) v = p.get("type");
  if (!v) return "default";
  std::string type = r.string(v);
  if (type == "su") return "longrope";
  if (type == "mrope") return "default";  // Qwen2-VL's legacy spelling: default RoPE with mrope_section
  static const std::set<std::string> known = [] {
    std::set<std::string> names;
    for (const VariantInfo* variant : variant_infos()) {
      if (variant->config_rope_type) names.emplace(variant->name);
    }
    return names;
  }();
  if (!known.contains(type)) {
    r.fail(v.path, *v.node,
           fmt::format("unknown rope type (known: {}, and the aliases su, mrope)", fmt::join(known, ", ")));
  }
  return type;
}

double RopeReader::theta(const RopeParams& p, const LayerKind& k) const {
  if (flag(info, kLocalBase) && !nested_ && k.type == "sliding_attention") {
    if (Value v = r.model_key("rope_local_base_freq")) return r.number(v);
    return 10000.0;  // Gemma3TextConfig default
  }
  Value v = p.get("rope_theta");
  if (!v && flag(info, kSlidingUnscaled) && params_.dict) v = params_.get("rope_theta");
  for (const Value& w : {v, r.model_key("rope_theta"), r.model_key("rotary_emb_base")}) {
    if (w) {
      const double base = r.number(w);
      if (!(base > 1.0)) r.fail(w.path, *w.node, "must be > 1");
      return base;
    }
  }
  return info.default_theta;  // the config class's default
}

int RopeReader::rotary_dim(const RopeParams& p, const std::string& type, int head_dim) {
  if (Value v = r.model_key("rotary_dim")) {  // GPT-J, CodeGen, MiniMax: an absolute lane count
    const int dim = r.small_int(v);
    if (dim <= 0 || dim > head_dim || dim % 2 != 0) {
      r.fail(v.path, *v.node, fmt::format("must be even and in [2, head_dim = {}]", head_dim));
    }
    return dim;
  }
  Value prf = p.get("partial_rotary_factor");
  if (!prf) prf = r.model_key_any({"partial_rotary_factor", "rotary_pct", "rope_pct"});
  if (!prf) return head_dim;
  const double factor = r.number(prf);
  if (!(factor > 0.0 && factor <= 1.0)) r.fail(prf.path, *prf.node, "must be in (0, 1]");
  if (type == "proportional") return head_dim;  // the factor selects pairs, not lanes
  if (type == "default" && info.default_ignores_partial_rotary) {
    if (factor != 1.0) {
      out.warnings.push_back(fmt::format(
          "{}: {} = {} is ignored: model_type {}'s default RoPE rotates the whole head (as in Hugging Face)",
          r.origin(), prf.path, factor, out.model_type));
    }
    return head_dim;
  }
  const int dim = static_cast<int>(head_dim * factor);  // HF: int(head_dim * factor)
  if (dim % 2 != 0 || dim == 0) {
    r.fail(prf.path, *prf.node,
           fmt::format("gives rotary_dim = int({} * {}) = {}: must be even and > 0", head_dim, factor, dim));
  }
  return dim;
}

double RopeReader::required_number(const RopeParams& p, std::string_view key, std::string_view type) const {
  if (Value v = p.get(key)) return r.number(v);
  r.missing(fmt::format("{}.{} (required by rope_type {})", p.path.empty() ? "rope_parameters" : p.path, key, type));
}

std::int64_t RopeReader::max_position(std::string_view why) const {
  if (out.max_position_embeddings > 0) return out.max_position_embeddings;
  r.missing(fmt::format("max_position_embeddings ({})", why));
}

// HF: a top-level original_max_position_embeddings (Phi-3) takes priority for llama3 / yarn /
// longrope, then the rope dictionary's, then max_position_embeddings.
std::int64_t RopeReader::original_length(const RopeParams& p, std::string_view type) const {
  Value v = r.model_key("original_max_position_embeddings");
  if (!v) v = p.get("original_max_position_embeddings");
  if (v) {
    const std::int64_t l0 = r.integer(v);
    if (l0 <= 0) r.fail(v.path, *v.node, "must be > 0");
    return l0;
  }
  return max_position(fmt::format("the default original_max_position_embeddings of rope_type {}", type));
}

// HF `rope_parameters.get(key) or default`: 0 and null mean the default.
double RopeReader::or_default(const RopeParams& p, std::string_view key, double fallback) const {
  if (Value v = p.get(key)) {
    const double x = r.number(v);
    return x != 0.0 ? x : fallback;
  }
  return fallback;
}
std::optional<double> RopeReader::optional_number(const RopeParams& p, std::string_view key) const {
  if (Value v = p.get(key)) return r.number(v);
  return std::nullopt;
}

// HF's _validate_*_rope_parameters log a warning (and go on) for a factor below 1.
void RopeReader::warn_factor_below_one(const RopeParams& p, std::string_view type, double factor) {
  if (factor < 1.0) {
    out.warnings.push_back(
        fmt::format("{}: {}.factor = {}: rope_type {} expects a factor >= 1 (Hugging "
                    "Face warns and goes on; so does ropekit)",
                    r.origin(), p.path, factor, type));
  }
}

Scaling RopeReader::scaling(const RopeParams& p, const std::string& type, const Spec& spec) {
  if (type == "default") return scaling::None{};
  if (type == "linear") {
    const double f = required_number(p, "factor", type);
    warn_factor_below_one(p, type, f);
    return scaling::Linear{f};
  }
  if (type == "ntk") return scaling::Ntk{required_number(p, "factor", type)};
  if (type == "dynamic" && flag(info, kNtkAlpha)) {
    // HunYuan: a truthy alpha (HF: rope_parameters.get("alpha")) picks its NTK-alpha rotary.
    if (Value a = p.get("alpha"); a && !a.node->is_null() && r.number(a) != 0.0) {
      const double alpha = r.number(a);
      std::optional<double> f = optional_number(p, "factor");
      if (!f) {
        out.warnings.push_back(
            fmt::format("{}: {}.factor is absent: Hugging Face's HunYuan rotary fails past "
                        "max_position_embeddings without it; ropekit uses 1 there",
                        r.origin(), p.path));
      }
      const std::int64_t lmax = max_position("HunYuan's NTK-alpha scales past it");
      out.warnings.push_back(fmt::format(
          "{}: {}.alpha = {}: past max_position_embeddings = {} Hugging Face's HunYuan rotary switches to its plain "
          "dynamic-NTK formula without alpha (its dynamic_rope_update), so the frequencies jump up there; ropekit's "
          "plan does the same (hunyuan_alpha)",
          r.origin(), p.path, alpha, lmax));
      return scaling::HunyuanAlpha{alpha, f.value_or(1.0), lmax};
    }
  }
  if (type == "dynamic") {
    const double f = required_number(p, "factor", type);
    warn_factor_below_one(p, type, f);
    return scaling::DynamicNtk{f, max_position("dynamic NTK scales past it")};
  }
  if (type == "yarn") {
    const std::int64_t l0 = original_length(p, type);
    std::optional<double> factor = optional_number(p, "factor");
    const double implicit = out.max_position_embeddings > 0 ? double(out.max_position_embeddings) / double(l0) : 1.0;
    if (!factor) {
      // An explicit null falls back to the ratio (with HF's warning); an absent key is an error.
      if (!(p.dict && p.dict->contains("factor"))) required_number(p, "factor", type);
      out.warnings.push_back(
          fmt::format("{}: {}.factor is null: using max_position_embeddings / original_max_position_embeddings "
                      "= {} (as Hugging Face)",
                      r.origin(), p.path, implicit));
      factor = implicit;
    } else if (implicit != 1.0 && *factor != implicit) {
      out.warnings.push_back(
          fmt::format("{}: {}.factor = {} differs from max_position_embeddings / "
                      "original_max_position_embeddings = {}: using the explicit factor (as Hugging Face)",
                      r.origin(), p.path, *factor, implicit));
    }
    warn_factor_below_one(p, type, *factor);
    scaling::Yarn y{};
    y.factor = *factor;
    y.original_max_position_embeddings = l0;
    y.beta_fast = or_default(p, "beta_fast", y.beta_fast);
    y.beta_slow = or_default(p, "beta_slow", y.beta_slow);
    if (Value v = p.get("truncate")) y.truncate = r.boolean(v);
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
      out.warnings.push_back(
          fmt::format("{}: {}.high_freq_factor = {} is not above low_freq_factor = {} "
                      "(Hugging Face warns; equal factors leave no smoothing band: a "
                      "hard step at original_max_position_embeddings / low_freq_factor)",
                      r.origin(), p.path, l.high_freq_factor, l.low_freq_factor));
    }
    return l;
  }
  if (type == "longrope") {
    const Value short_f = p.get("short_factor");
    const Value long_f = p.get("long_factor");
    if (!short_f) required_number(p, "short_factor", type);
    if (!long_f) required_number(p, "long_factor", type);
    const std::int64_t l0 = original_length(p, type);
    scaling::LongRope lr{r.numbers(short_f), r.numbers(long_f), l0, 0.0, std::nullopt};
    if (std::optional<double> f = optional_number(p, "factor")) {
      lr.factor = *f;
      warn_factor_below_one(p, type, lr.factor);
    } else {
      lr.factor = double(max_position("LongRoPE's default factor is its ratio to the original")) / double(l0);
    }
    lr.attention_factor = optional_number(p, "attention_factor");
    if (int(lr.short_factor.size()) != spec.num_pairs() || int(lr.long_factor.size()) != spec.num_pairs()) {
      const Value& bad = int(lr.short_factor.size()) != spec.num_pairs() ? short_f : long_f;
      r.fail(bad.path, *bad.node,
             fmt::format("has {} entries: must have rotary_dim/2 = {}", bad.node->size(), spec.num_pairs()));
    }
    return lr;
  }
  if (type == "proportional") {
    Value prf = p.get("partial_rotary_factor");
    if (!prf) prf = r.model_key("partial_rotary_factor");
    scaling::Proportional proportional;  // HF's defaults: the struct's
    if (prf) proportional.partial_rotary_factor = r.number(prf);
    if (std::optional<double> f = optional_number(p, "factor")) proportional.factor = *f;
    return proportional;
  }
  throw Error(fmt::format("{}: rope type {} has no reader", r.origin(), type));  // unreachable
}

void RopeReader::read_mrope(const RopeParams& p, Spec& spec) const {
  const Value section = p.get("mrope_section");
  if (!section) return;
  MRope mrope{r.ints(section), MRopeLayout::Sectioned};
  if (mrope.sections.size() != 3) r.fail(section.path, *section.node, "expected 3 entries (t, h, w)");
  if (Value v = p.get("mrope_interleaved"); v && r.boolean(v)) mrope.layout = MRopeLayout::Interleaved;
  if (flag(info, kMropeInterleaved)) mrope.layout = MRopeLayout::Interleaved;
  spec.mrope = std::move(mrope);
}

void RopeReader::warn_unknown_keys(const RopeParams& p, const std::string& type) {
  if (!p.dict || !p.dict->is_object()) return;
  const auto& known = known_keys(type);
  std::vector<std::string> unknown;
  for (const auto& [key, value] : p.dict->items()) {
    if (key == "llama_4_scaling_beta" && flag(info, kQueryBeta)) continue;       // read as a query scaling
    if (key == "alpha" && type == "dynamic" && flag(info, kNtkAlpha)) continue;  // HunYuan's NTK-alpha
    if (!known.contains(key)) unknown.push_back(key);
  }
  if (unknown.empty()) return;
  const bool beta = std::find(unknown.begin(), unknown.end(), "llama_4_scaling_beta") != unknown.end();
  out.warnings.push_back(fmt::format(
      "{}: {}: unrecognized key(s) {} for rope_type {} (ignored: {})", r.origin(), p.path, fmt::join(unknown, ", "),
      type,
      beta ? fmt::format("model_type {}'s attention code does not apply llama_4_scaling_beta", out.model_type)
           : "as in Hugging Face"));
}

// ---- the families' own rotary embeddings (ModelInfo::rope) ----------------------------------------------

void chatglm_rope(RopeReader& reader, const LayerKind&, LayerPositions& g) {
  const Reader& r = reader.r;
  Spec& spec = g.spec;
  if (Value v = r.model_key("position_encoding_2d"); v && r.boolean(v)) {
    r.fail(v.path, *v.node, "ChatGLM-6B (v1)'s two-dimensional positions are not modelled");
  }
  double ratio = 1.0;
  if (Value v = r.model_key("rope_ratio")) ratio = r.number(v);
  spec.base = 10000.0 * ratio;  // modeling_chatglm.py: base = 10000 * rope_ratio
  spec.rotary_dim = spec.head_dim / 2;
  if (spec.rotary_dim % 2 != 0) {
    r.fail("kv_channels", spec.head_dim, "must be a multiple of 4 (ChatGLM rotates kv_channels/2 lanes)");
  }
  spec.scaling = scaling::None{};
  reader.validate(spec, g.layer_type);
}

void qwen_v1_rope(RopeReader& reader, const LayerKind&, LayerPositions& g) {
  const Reader& r = reader.r;
  Spec& spec = g.spec;
  spec.base = 10000.0;
  if (Value v = r.model_key("rotary_emb_base")) spec.base = r.number(v);
  double pct = 1.0;
  const Value pv = r.model_key("rotary_pct");
  if (pv) pct = r.number(pv);
  if (!(pct > 0.0 && pct <= 1.0)) r.fail(pv.path, *pv.node, "must be in (0, 1]");
  spec.rotary_dim = int(spec.head_dim * pct);
  if (spec.rotary_dim % 2 != 0 || spec.rotary_dim == 0) {
    const std::string why = fmt::format("gives rotary_dim = {}: must be even and > 0", spec.rotary_dim);
    if (pv) r.fail(pv.path, *pv.node, why);
    r.fail("kv_channels", spec.head_dim, why);  // no rotary_pct: the head itself is odd
  }
  spec.scaling = scaling::None{};
  if (Value v = r.model_key("use_dynamic_ntk"); v && r.boolean(v)) {
    spec.scaling = scaling::QwenDynamicNtk{FamilyView(r, reader.info, 0).qwen_seq_length()};
  }
  reader.validate(spec, g.layer_type);
}

void deepseek_v4_rope(RopeReader& reader, const LayerKind& k, LayerPositions& g) {
  const Reader& r = reader.r;
  Spec& spec = g.spec;
  const int head_dim = spec.head_dim;
  const RopeParams p = reader.params_for(k);
  const std::string type = reader.rope_type(p);
  reader.warn_unknown_keys(p, type);
  spec.base = reader.theta(p, k);
  double prf = 64.0 / 512.0;  // DeepseekV4Config: qk_rope_head_dim / head_dim
  if (Value v = p.get("partial_rotary_factor")) {
    prf = r.number(v);
  } else if (Value v = r.model_key("partial_rotary_factor")) {
    prf = r.number(v);
  } else if (Value v = r.model_key("qk_rope_head_dim")) {
    prf = double(positive_int(r, v)) / double(head_dim);
  }
  const int rope_dim = int(head_dim * prf);
  if (rope_dim <= 0 || rope_dim % 2 != 0 || rope_dim > head_dim) {
    r.fail("partial_rotary_factor", prf,
           fmt::format("gives {} rotary lanes of head_dim {}: must be even and in (0, head_dim]", rope_dim, head_dim));
  }
  g.rope_offset = head_dim - rope_dim;  // V4 rotates the trailing lanes
  spec.head_dim = rope_dim;
  spec.rotary_dim = rope_dim;
  spec.scaling = reader.scaling(p, type, spec);
  reader.validate(spec, g.layer_type);
}

}  // namespace ropekit::detail
