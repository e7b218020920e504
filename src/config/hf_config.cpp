// config.json → ModelPositions. The reader orchestrates: the family's row (model_table.cpp), the head
// widths and layer count, the family's layer rule (layer_rules.cpp), then one plan per distinct kind of
// layer — its window, encoding, softmax scale and query scaling here, its rotary embedding in
// rope_params.cpp. docs/config.md lists every key read, for users.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <optional>
#include <sstream>

#include "config/family.hpp"
#include "config/json.hpp"
#include "config/model_table.hpp"
#include "config/positions_builder.hpp"
#include "config/rope_params.hpp"
#include "ropekit/config.hpp"
#include "ropekit/encodings.hpp"
#include "ropekit/error.hpp"

namespace ropekit {
namespace {

using detail::json;
using detail::LayerKind;
using detail::LayerKinds;
using detail::ModelInfo;
using detail::Reader;
using detail::Value;

class ModelReader {
 public:
  ModelReader(const json& root, const ConfigOptions& options, std::string origin)
      : r_(root, std::move(origin)), root_(root), options_(options) {}

  ModelPositions read() {
    out_.source = r_.origin();
    identify_model();
    read_head_dims();
    // The spellings transformers' attribute_map gives max_position_embeddings: GPT-2's n_positions, ChatGLM's
    // seq_length, DBRX's and MPT's max_seq_len.
    if (Value v = r_.model_key_any({"max_position_embeddings", "n_positions", "seq_length", "max_seq_len"})) {
      out_.max_position_embeddings = r_.integer(v);
      if (out_.max_position_embeddings <= 0) r_.fail(v.path, *v.node, "must be > 0");
    }
    read_layer_count();
    rope_->read_params();
    const LayerKinds layers = info_->layers(detail::FamilyView(r_, *info_, num_layers_));
    num_layers_ = layers.num_layers;
    const std::vector<LayerKind>& kinds = layers.kinds;
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
    if (flag(detail::kIndexerHalf) || flag(detail::kIndexerInterleaved)) add_indexers(plans);
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
    // A remote-code config may leave model_type out: transformers then finds the class through auto_map, and
    // `architectures` names it.
    if (!info_ && !top && !text) identify_by_class();
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
    rope_.emplace(r_, *info_, out_);
    pairing_ = options_.pairing ? *options_.pairing : info_->pairing;
    if (!options_.pairing && flag(detail::kRopeInterleaveKey)) {
      // HF DeepseekV3Config: rope_interleave defaults to true (weights in GPT-J order).
      if (Value v = r_.model_key("rope_interleave")) pairing_ = r_.boolean(v) ? Pairing::Interleaved : Pairing::Half;
    }
  }

  // The model table's row for the class `architectures` or auto_map's AutoModel* entries name, first match.
  void identify_by_class() {
    std::vector<Value> classes;
    if (const json* a = Reader::member(root_, "architectures"); a && a->is_array()) {
      for (std::size_t i = 0; i < a->size(); ++i) classes.push_back({&(*a)[i], fmt::format("architectures[{}]", i)});
    }
    if (const json* m = Reader::member(root_, "auto_map"); m && m->is_object()) {
      for (const auto& [key, value] : m->items()) {
        if (key.starts_with("AutoModel")) classes.push_back({&value, fmt::format("auto_map.{}", key)});
      }
    }
    for (const Value& c : classes) {
      if (!c.node->is_string()) continue;  // auto_map entries may be [slow, fast] pairs (tokenizers), never models
      const std::string name = r_.string(c);
      if (const detail::ModelInfo* info = detail::find_model_by_class(name)) {
        info_ = info;
        out_.model_type = std::string(info->model_type);
        out_.warnings.push_back(fmt::format("{}: model_type is missing: read as {} ({} = {})", r_.origin(),
                                            info->model_type, c.path, name));
        return;
      }
    }
  }

  bool flag(unsigned f) const { return (info_->flags & f) != 0; }

  // ---- head widths --------------------------------------------------------------------------
  int positive_int(const Value& v) const {
    const int x = r_.small_int(v);
    if (x <= 0) r_.fail(v.path, *v.node, "must be > 0");
    return x;
  }

  void read_head_dims() {
    if (info_->head == detail::HeadRule::Mla) {
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
    if (info_->head == detail::HeadRule::KvChannels) explicit_dim = r_.model_key("kv_channels");
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

  // ---- the DSA indexer's rotary ---------------------------------------------------------------
  // DeepseekV32Indexer / GlmMoeDsaIndexer: index_head_dim lanes (default 128), the first qk_rope_head_dim rotated
  // with the layer's cos/sin. GLM-5 runs it only where indexer_types[i] == "full" — HF GlmMoeDsaConfig derives the
  // list from index_topk_pattern ("F"/"S" per layer) or index_topk_freq (1) and index_skip_topk_offset (2).
  void add_indexers(std::vector<LayerPositions>& plans) const {
    int width = 128;  // DeepseekV32Config / GlmMoeDsaConfig index_head_dim default
    if (Value v = r_.model_key("index_head_dim")) width = positive_int(v);
    std::vector<bool> full(plans.size(), true);
    if (flag(detail::kIndexerInterleaved) && num_layers_ > 0) {
      if (Value types = r_.model_key("indexer_types")) {
        if (!types.node->is_array() || types.node->size() != plans.size()) {
          r_.fail(types.path, *types.node,
                  fmt::format("must list \"full\" or \"shared\" for each of {} layers", plans.size()));
        }
        for (std::size_t i = 0; i < plans.size(); ++i) {
          const Value entry{&(*types.node)[i], fmt::format("{}[{}]", types.path, i)};
          const std::string t = r_.string(entry);
          if (t != "full" && t != "shared") r_.fail(entry.path, *entry.node, "must be \"full\" or \"shared\"");
          full[i] = t == "full";
        }
      } else if (Value pattern = r_.model_key("index_topk_pattern")) {
        const std::string p = r_.string(pattern);
        if (p.size() != plans.size() || p.find_first_not_of("FS") != std::string::npos) {
          r_.fail(pattern.path, *pattern.node, fmt::format("must be one F or S per layer ({})", plans.size()));
        }
        for (std::size_t i = 0; i < plans.size(); ++i) full[i] = p[i] == 'F';
      } else {
        std::int64_t freq = 1, offset = 2;
        if (Value v = r_.model_key("index_topk_freq")) freq = std::max<std::int64_t>(r_.integer(v), 1);
        if (Value v = r_.model_key("index_skip_topk_offset")) offset = r_.integer(v);
        for (std::size_t i = 0; i < plans.size(); ++i) {
          full[i] = std::max<std::int64_t>(std::int64_t(i) - offset + 1, 0) % freq == 0;
        }
      }
    }
    for (std::size_t i = 0; i < plans.size(); ++i) {
      LayerPositions& g = plans[i];
      if (!full[i] || g.encoding != PositionEncoding::Rope) continue;
      if (g.spec.head_dim > width) {
        throw Error(fmt::format("{}: index_head_dim = {}: narrower than the {} rotary lanes it must hold", r_.origin(),
                                width, g.spec.head_dim));
      }
      IndexerRope ir{g.spec, 0, width};
      ir.spec.pairing = flag(detail::kIndexerHalf) ? Pairing::Half : Pairing::Interleaved;
      g.indexer = ir;
    }
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
      // Found by config_fuzz: a chunked_attention layer type with no chunk size read a null node.
      if (!v) r_.missing("attention_chunk_size (layer_types has chunked_attention layers)");
      g.attention_chunk = r_.integer(v);
      if (*g.attention_chunk <= 0) r_.fail(v.path, *v.node, "must be > 0");
    }
    g.encoding = k.encoding;
    if (k.encoding == PositionEncoding::Rope) {
      rope_->read_rope(k, g, pairing_, head_dim_, rope_offset_);
      // YaRN's mscale² on the softmax scale is the family's attention code, not the rope's (kMscaleSoftmax).
      if (auto* yarn = std::get_if<scaling::Yarn>(&g.spec.scaling)) yarn->mscale_softmax = flag(detail::kMscaleSoftmax);
    } else if (k.encoding == PositionEncoding::Alibi) {
      const std::vector<float> s = alibi_slopes(num_heads());
      g.alibi_slopes.assign(s.begin(), s.end());
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

  // The layer's query scaling: the family's (its layer rule's: Llama 4, Qwen v1), or Mistral's
  // llama_4_scaling_beta from the layer's rope parameters (kQueryBeta).
  QueryScaling query_scaling(const LayerKind& k, const LayerPositions& g) const {
    if (k.query.kind != QueryScaling::Kind::None) return k.query;
    QueryScaling q;
    if (flag(detail::kQueryBeta) && g.encoding == PositionEncoding::Rope) {
      const detail::RopeParams p = rope_->params_for(k);
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

  Reader r_;
  const json& root_;
  const ConfigOptions& options_;
  const ModelInfo* info_ = nullptr;
  Pairing pairing_{};
  int head_dim_ = 0;
  int rope_offset_ = 0;
  int num_layers_ = 0;
  ModelPositions out_;
  std::optional<detail::RopeReader> rope_;  // once the family is known
};

}  // namespace

ModelPositions read_config(std::string_view json_text, const ConfigOptions& options, std::string_view origin) {
  const detail::Document document = detail::parse_json(json_text, origin);
  const json& root = *document;
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
