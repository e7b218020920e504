// Hugging Face model directories (config.json + safetensors, one file or shards with their index) for the runner:
// the safetensors container read from memory maps, every offset, length, dtype and shape checked against the file,
// the Llama architecture's F32 tensors copied, its F16/BF16 matrices kept packed in the maps (which the model then
// holds) and its norms and biases widened to float32.
#include <fcntl.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "config/json.hpp"
#include "lab/loader.hpp"
#include "ropekit/config.hpp"
#include "ropekit/dtype.hpp"
#include "ropekit/error.hpp"

namespace ropekit {
namespace detail {

SafetensorsFile parse_safetensors(std::span<const std::byte> bytes, std::string_view origin) {
  if (bytes.size() < 8) {
    throw Error(
        fmt::format("{}: {} bytes: a safetensors file starts with an 8-byte header length", origin, bytes.size()));
  }
  std::uint64_t header_size = 0;
  for (int i = 7; i >= 0; --i) header_size = header_size << 8 | std::to_integer<std::uint64_t>(bytes[std::size_t(i)]);
  if (header_size > bytes.size() - 8) {
    throw Error(fmt::format("{}: the header length at byte 0 is {}: past the file's {} bytes", origin, header_size,
                            bytes.size()));
  }
  const std::string_view text(reinterpret_cast<const char*>(bytes.data()) + 8, static_cast<std::size_t>(header_size));
  detail::Document document;  // freed without allocating (config/json.hpp)
  try {
    document = detail::parse_json(text, "the header");
  } catch (const Error& e) {
    throw Error(
        fmt::format("{}: the JSON header (bytes 8 to {}) does not parse: {}", origin, 8 + header_size, e.what()));
  }
  const nlohmann::json& header = *document;
  if (!header.is_object()) throw Error(fmt::format("{}: the JSON header is not an object", origin));
  SafetensorsFile file;
  file.data_start = 8 + header_size;
  const std::uint64_t data_size = bytes.size() - file.data_start;
  for (const auto& item : header.items()) {
    const std::string& name = item.key();
    const nlohmann::json& info = item.value();
    if (name == "__metadata__") continue;
    const auto bad = [&](std::string_view what) { return Error(fmt::format("{}: tensor {}: {}", origin, name, what)); };
    if (!info.is_object()) throw bad("its entry is not an object");
    const auto dtype = info.find("dtype");
    const auto shape = info.find("shape");
    const auto offsets = info.find("data_offsets");
    if (dtype == info.end() || !dtype->is_string()) throw bad("\"dtype\" is missing or not a string");
    if (shape == info.end() || !shape->is_array()) throw bad("\"shape\" is missing or not an array");
    if (offsets == info.end() || !offsets->is_array() || offsets->size() != 2) {
      throw bad("\"data_offsets\" must be [begin, end]");
    }
    SafetensorsTensor t;
    t.dtype = dtype->get<std::string>();
    std::uint64_t count = 1;
    for (const auto& d : *shape) {
      if (!d.is_number_unsigned()) throw bad("\"shape\" holds something other than non-negative integers");
      t.shape.push_back(d.get<std::uint64_t>());
      count = checked_mul(count, t.shape.back(), origin, name);
    }
    for (const auto& o : *offsets) {
      if (!o.is_number_unsigned()) throw bad("\"data_offsets\" holds something other than non-negative integers");
    }
    const std::uint64_t begin = (*offsets)[0].get<std::uint64_t>(), end = (*offsets)[1].get<std::uint64_t>();
    if (begin > end || end > data_size) {
      throw bad(fmt::format("data_offsets [{}, {}] (bytes {} to {} of the file): outside the data's {} bytes", begin,
                            end, file.data_start + begin, file.data_start + end, data_size));
    }
    const std::uint64_t element = t.dtype == "F64" || t.dtype == "I64" || t.dtype == "U64"                        ? 8
                                  : t.dtype == "F32" || t.dtype == "I32" || t.dtype == "U32"                      ? 4
                                  : t.dtype == "F16" || t.dtype == "BF16" || t.dtype == "I16" || t.dtype == "U16" ? 2
                                                                                                                  : 1;
    if (checked_mul(count, element, origin, name) != end - begin) {
      throw bad(fmt::format("{} values of {} need {} bytes; data_offsets [{}, {}] hold {}", count, t.dtype,
                            count * element, begin, end, end - begin));
    }
    t.offset = file.data_start + begin;
    t.count = count;
    t.bytes = end - begin;
    file.tensors.emplace(name, std::move(t));
  }
  return file;
}

MappedFile::MappedFile(const std::filesystem::path& path) : path_(path.string()) {
  const int fd = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw Error(fmt::format("{}: cannot open the file: {}", path_, std::strerror(errno)));
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    throw Error(fmt::format("{}: not a regular file", path_));
  }
  size_ = static_cast<std::size_t>(st.st_size);
  if (size_ > 0) {
    data_ = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (data_ == MAP_FAILED) {
      data_ = nullptr;
      ::close(fd);
      throw Error(fmt::format("{}: cannot map the file: {}", path_, std::strerror(errno)));
    }
  }
  ::close(fd);
}

MappedFile::~MappedFile() {
  if (data_ != nullptr) ::munmap(data_, size_);
}

}  // namespace detail

namespace {

std::string read_text(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(fmt::format("{}: cannot open the file", path.string()));
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// The weight files of a directory, each mapped and parsed once, and where each tensor lives.
class Weights {
 public:
  explicit Weights(const std::filesystem::path& dir) {
    const auto index = dir / "model.safetensors.index.json";
    if (std::filesystem::exists(index)) {
      detail::Document document;
      try {
        document = detail::parse_json(read_text(index), "the index");
      } catch (const Error& e) {
        throw Error(fmt::format("{}: does not parse: {}", index.string(), e.what()));
      }
      const nlohmann::json& j = *document;
      const auto map = j.find("weight_map");
      if (map == j.end() || !map->is_object()) {
        throw Error(fmt::format("{}: \"weight_map\" is missing or not an object", index.string()));
      }
      for (const auto& [name, file] : map->items()) {
        if (!file.is_string())
          throw Error(fmt::format("{}: weight_map[\"{}\"] is not a file name", index.string(), name));
        const std::string f = file.get<std::string>();
        if (f.empty() || f.find('/') != std::string::npos || f == "." || f == "..") {
          throw Error(fmt::format("{}: weight_map[\"{}\"] = \"{}\": not a file in the model's directory",
                                  index.string(), name, f));
        }
        where_[name] = open(dir / f);
      }
    } else {
      const auto single = dir / "model.safetensors";
      if (!std::filesystem::exists(single)) {
        throw Error(
            fmt::format("{}: neither model.safetensors nor model.safetensors.index.json is there", dir.string()));
      }
      const std::shared_ptr<Shard> shard = open(single);
      for (const auto& [name, t] : shard->file.tensors) where_[name] = shard;
    }
  }

  bool has(const std::string& name) const { return where_.count(name) != 0; }

  // Tensor `name` with shape exactly `shape`, widened to float32 (F32, F16, BF16), every value finite.
  std::vector<float> tensor(const std::string& name, const std::vector<std::uint64_t>& shape) const {
    return read(name, shape, false);
  }
  // Matrix `name` of shape exactly `shape` ([rows, cols]): float32 values, or F16/BF16 rows kept packed in the map.
  WeightMatrix matrix(const std::string& name, const std::vector<std::uint64_t>& shape) const {
    return read(name, shape, true);
  }
  // What the packed matrices point into: the maps of their shards (null: none is packed).
  std::shared_ptr<const void> storage() const {
    if (used_.empty()) return nullptr;
    return std::make_shared<std::vector<std::shared_ptr<Shard>>>(used_.begin(), used_.end());
  }

 private:
  struct Shard;

  WeightMatrix read(const std::string& name, const std::vector<std::uint64_t>& shape, bool matrix) const {
    const auto it = where_.find(name);
    if (it == where_.end()) throw Error(fmt::format("the tensor {} is missing from the model's safetensors", name));
    const Shard& shard = *it->second;
    const auto t = shard.file.tensors.find(name);
    if (t == shard.file.tensors.end()) {
      throw Error(fmt::format("{}: the tensor {} is not in it (the index says it is)", shard.map.path(), name));
    }
    const detail::SafetensorsTensor& info = t->second;
    if (info.shape != shape) {
      throw Error(fmt::format("{}: tensor {} has shape [{}]; config.json's hyper-parameters need [{}]",
                              shard.map.path(), name, fmt::join(info.shape, ", "), fmt::join(shape, ", ")));
    }
    if (info.dtype != "F32" && info.dtype != "F16" && info.dtype != "BF16") {
      throw Error(fmt::format("{}: tensor {} has dtype {}: the runner reads F32, F16 and BF16 weights",
                              shard.map.path(), name, info.dtype));
    }
    const bool packed = matrix && info.dtype != "F32" && shape.size() == 2;
    const std::byte* base = shard.map.bytes().data() + info.offset;
    if (packed) {  // F16 / BF16 rows read in place from the map (which the model then keeps)
      WeightMatrix m;
      m.encoding = info.dtype == "F16" ? WeightEncoding::F16 : WeightEncoding::BF16;
      m.rows = static_cast<std::int64_t>(shape[0]);
      m.cols = static_cast<std::int64_t>(shape[1]);
      m.row_bytes = static_cast<std::size_t>(2 * shape[1]);
      m.packed = base;
      if (const auto bad = detail::first_non_finite(m)) {
        const auto [element, value] = *bad;
        throw Error(fmt::format("{}: tensor {}: element {} at byte {} is {}: weights must be finite", shard.map.path(),
                                name, element, info.offset + 2 * element, value));
      }
      used_.insert(it->second);
      return m;
    }
    std::vector<float> out = detail::weight_vector(static_cast<std::size_t>(info.count));
    out.resize(static_cast<std::size_t>(info.count));
    if (info.dtype == "F32") {
      std::memcpy(out.data(), base, out.size() * 4);
    } else {
      for (std::size_t i = 0; i < out.size(); ++i) {
        std::uint16_t h;
        std::memcpy(&h, base + 2 * i, 2);
        out[i] = info.dtype == "F16" ? f16_to_float(h) : bf16_to_float(h);
      }
    }
    const std::uint64_t element = info.dtype == "F32" ? 4 : 2;
    for (std::size_t i = 0; i < out.size(); ++i) {
      if (!std::isfinite(out[i])) {
        throw Error(fmt::format("{}: tensor {}: element {} at byte {} is {}: weights must be finite", shard.map.path(),
                                name, i, info.offset + element * i, out[i]));
      }
    }
    return WeightMatrix(std::move(out));
  }

  struct Shard {
    explicit Shard(const std::filesystem::path& path)
        : map(path), file(detail::parse_safetensors(map.bytes(), map.path())) {}
    detail::MappedFile map;
    detail::SafetensorsFile file;
  };

  std::shared_ptr<Shard> open(const std::filesystem::path& path) {
    const std::string key = path.string();
    auto it = shards_.find(key);
    if (it == shards_.end()) it = shards_.emplace(key, std::make_shared<Shard>(path)).first;
    return it->second;
  }

  std::map<std::string, std::shared_ptr<Shard>> shards_;
  std::map<std::string, std::shared_ptr<Shard>> where_;
  mutable std::set<std::shared_ptr<Shard>> used_;  // shards a packed matrix points into
};

// config.json's integer `key` (or `fallback` when absent), in [0, 2^31).
std::int64_t integer(const nlohmann::json& j, const std::string& origin, const char* key,
                     std::optional<std::int64_t> fallback = std::nullopt) {
  const auto it = j.find(key);
  if (it == j.end() || it->is_null()) {
    if (fallback) return *fallback;
    throw Error(fmt::format("{}: \"{}\" is missing", origin, key));
  }
  if (!it->is_number_integer() || it->get<std::int64_t>() < 0 || it->get<std::int64_t>() > 2147483647) {
    throw Error(fmt::format("{}: \"{}\" = {}: must be an integer in [0, 2^31)", origin, key, it->dump()));
  }
  return it->get<std::int64_t>();
}

// config.json's string / boolean `key` (`fallback` when absent or null); another type is an error naming the key.
std::string text_key(const nlohmann::json& j, const std::string& origin, const char* key, const char* fallback) {
  const auto it = j.find(key);
  if (it == j.end() || it->is_null()) return fallback;
  if (!it->is_string()) throw Error(fmt::format("{}: \"{}\" = {}: must be a string", origin, key, it->dump()));
  return it->get<std::string>();
}
bool flag_key(const nlohmann::json& j, const std::string& origin, const char* key, bool fallback) {
  const auto it = j.find(key);
  if (it == j.end() || it->is_null()) return fallback;
  if (!it->is_boolean()) throw Error(fmt::format("{}: \"{}\" = {}: must be true or false", origin, key, it->dump()));
  return it->get<bool>();
}

// What the runner does differently per Hugging Face model_type.
struct Family {
  const char* model_type;
  bool qkv_bias;       // Qwen2: q/k/v biases (never o)
  bool qk_norm;        // Qwen3: RMSNorm of each q and k head before the rotation
  bool fused;          // Phi-3: qkv_proj and gate_up_proj, split at load
  bool window;         // Mistral, Phi-3: sliding_window on every layer
  bool layer_windows;  // Qwen2/3, SmolLM3, Gemma 3: the layer groups say which layers have a window
  // Gemma 3: (1 + w) RMSNorms, four per layer (the attention's and the feed-forward's inputs and outputs) and q/k per
  // head; embeddings × √hidden; GeGLU (tanh); local layers with a RoPE of their own (θ 1e4), global ones the model's.
  bool gemma = false;
};
constexpr Family kFamilies[] = {
    {"llama", false, false, false, false, false},       {"mistral", false, false, false, true, false},
    {"qwen2", true, false, false, false, true},         {"qwen3", false, true, false, false, true},
    {"smollm3", false, false, false, false, true},      {"phi3", false, false, true, true, false},
    {"gemma2", false, false, false, false, true, true}, {"gemma3_text", false, true, false, false, true, true},
};

// Gemma's RMSNorm multiplies by (1 + w), formed in float32 as HF forms it: stored so, the runner's RMSNorm is Llama's.
void add_one(std::vector<float>& w) {
  for (float& x : w) x = 1.0f + x;
}

}  // namespace

LlamaModel load_hf_model(const std::filesystem::path& dir) {
  const auto config_path = dir / "config.json";
  const std::string origin = config_path.string();
  const std::string text = read_text(config_path);
  detail::Document document;
  try {
    document = detail::parse_json(text, "the file");
  } catch (const Error& e) {
    throw Error(fmt::format("{}: does not parse: {}", origin, e.what()));
  }
  const nlohmann::json& j = *document;
  if (!j.is_object()) throw Error(fmt::format("{}: not a JSON object", origin));
  const std::string model_type = text_key(j, origin, "model_type", "");
  const Family* family = nullptr;
  std::string known;
  for (const Family& f : kFamilies) {
    if (model_type == f.model_type) family = &f;
    known += fmt::format("{}\"{}\"", known.empty() ? "" : ", ", f.model_type);
  }
  if (family == nullptr) {
    throw Error(
        fmt::format("{}: model_type = \"{}\": the runner reads Hugging Face checkpoints of model_type {} (the "
                    "other families of issue 43 are to come)",
                    origin, model_type, known));
  }
  for (const char* flag : {"attention_bias", "mlp_bias"}) {
    if (flag_key(j, origin, flag, false)) {
      throw Error(fmt::format("{}: {} = true: the runner's {} has no such biases", origin, flag, model_type));
    }
  }
  LlamaModel model;
  model.source = fmt::format("hf {}", dir.string());
  LlamaConfig& c = model.config;
  if (family->gemma) {
    if (const std::string act = text_key(j, origin, "hidden_activation", "gelu_pytorch_tanh");
        act != "gelu_pytorch_tanh") {
      throw Error(
          fmt::format("{}: hidden_activation = \"{}\": the runner's Gemma feed-forward is GeGLU with "
                      "gelu_pytorch_tanh",
                      origin, act));
    }
    // Logit soft-capping: Gemma 2's defaults are 50 (attention) and 30 (output); Gemma 3's none. null: none.
    const bool gemma2 = model_type == "gemma2";
    const auto cap = [&](const char* key, double fallback) {
      const auto it = j.find(key);
      if (it == j.end()) return fallback;
      if (it->is_null()) return 0.0;
      const double v = it->is_number() ? it->get<double>() : -1.0;
      if (!(v > 0) || !std::isfinite(v)) {
        throw Error(fmt::format("{}: {} = {}: must be a positive number or null", origin, key, it->dump()));
      }
      return v;
    };
    c.attn_softcap = cap("attn_logit_softcapping", gemma2 ? 50.0 : 0.0);
    c.final_softcap = cap("final_logit_softcapping", gemma2 ? 30.0 : 0.0);
    if (flag_key(j, origin, "use_bidirectional_attention", false)) {
      throw Error(fmt::format("{}: use_bidirectional_attention = true: the runner's attention is causal", origin));
    }
    c.gelu_tanh = true;
  } else if (const std::string act = text_key(j, origin, "hidden_act", "silu"); act != "silu") {
    throw Error(fmt::format("{}: hidden_act = \"{}\": the runner's feed-forward is SwiGLU (silu)", origin, act));
  }
  c.dim = int(integer(j, origin, "hidden_size"));
  c.hidden_dim = int(integer(j, origin, "intermediate_size"));
  c.n_layers = int(integer(j, origin, "num_hidden_layers"));
  c.n_heads = int(integer(j, origin, "num_attention_heads"));
  c.n_kv_heads = int(integer(j, origin, "num_key_value_heads", c.n_heads));
  c.vocab_size = int(integer(j, origin, "vocab_size"));
  c.seq_len = integer(j, origin, "max_position_embeddings");
  c.bos_id = int(integer(j, origin, "bos_token_id", 1));
  // An explicit head_dim may differ from hidden_size / num_attention_heads (Qwen3, and Llama allows it).
  if (const auto hd = j.find("head_dim"); hd != j.end() && !hd->is_null()) {
    c.head_size = int(integer(j, origin, "head_dim"));
    if (c.head_size == 0) throw Error(fmt::format("{}: head_dim = 0: must be positive", origin));
  }
  const auto eps = j.find("rms_norm_eps");
  c.norm_eps = eps == j.end() ? 1e-6f : eps->is_number() ? eps->get<float>() : -1.0f;
  if (!(c.norm_eps > 0) || !std::isfinite(c.norm_eps)) {
    throw Error(fmt::format("{}: rms_norm_eps = {}: must be a positive number", origin, eps->dump()));
  }
  detail::validate_config(c, origin,
                          {"hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
                           "num_key_value_heads", "vocab_size", "max_position_embeddings"});
  // Sliding windows: Mistral's and Phi-3's apply to every layer; Qwen's and SmolLM3's only to the layers
  // use_sliding_window picks (below, from the layer groups read_config makes of max_window_layers).
  if (family->window) c.sliding_window = integer(j, origin, "sliding_window", 0);
  c.shared_classifier = flag_key(j, origin, "tie_word_embeddings", family->gemma);
  // The model's own RoPE from the same config.json (HF's q/k rows are for its rotate_half: the half pairing).
  model.rope = read_config(text, {}, origin);
  // SmolLM3's NoPE layers come as a group of their own (encoding None); the rest share one RoPE plan, in one group
  // or, with Qwen's use_sliding_window, in a full- and a sliding-attention group of the same spec.
  const std::vector<const LayerPositions*> rope_groups = model.rope.rope_groups();
  for (const LayerPositions& g : model.rope.groups) {
    if (g.encoding == PositionEncoding::None && g.attention) {
      model.nope_layers.resize(std::size_t(c.n_layers), 0);
      for (const int l : g.layers) model.nope_layers.at(std::size_t(l)) = 1;
    } else if (g.encoding != PositionEncoding::Rope || !g.attention) {
      throw Error(fmt::format("{}: layer type \"{}\" is neither RoPE nor NoPE attention: not in the runner", origin,
                              g.layer_type));
    }
  }
  if (rope_groups.empty()) throw Error(fmt::format("{}: no RoPE layers: not in the runner", origin));
  // One RoPE for the model (the call's, which a lab method replaces), except Gemma 3's local layers: theirs is their
  // own (θ 1e4, unscaled) whatever the method.
  const Spec& spec = model.rope_layer().spec;
  for (const LayerPositions* g : rope_groups) {
    if (g->spec.head_dim != c.head_dim() || g->rope_offset != 0) {
      throw Error(
          fmt::format("{}: the RoPE settings of layer type \"{}\" (head_dim {}) do not fit the model's head "
                      "size {}",
                      origin, g->layer_type, g->spec.head_dim, c.head_dim()));
    }
    if (g->spec == spec) continue;
    if (!family->gemma || g->layer_type != "sliding_attention") {
      throw Error(
          fmt::format("{}: layer types \"{}\" and \"{}\" rotate differently: one RoPE for every layer is "
                      "what the runner takes",
                      origin, model.rope_layer().layer_type, g->layer_type));
    }
    model.layer_specs.resize(std::size_t(c.n_layers));
    for (const int l : g->layers) model.layer_specs.at(std::size_t(l)) = g->spec;
  }
  if (family->gemma) {
    c.softmax_scale = model.rope_layer().softmax_scale;  // query_pre_attn_scalar^-0.5, the same in every layer
    c.embed_scale = static_cast<float>(std::sqrt(static_cast<double>(c.dim)));  // HF: a float32 tensor of √hidden
  }
  if (family->layer_windows) {
    for (const LayerPositions& g : model.rope.groups) {
      if (!g.sliding_window) continue;
      model.layer_windows.resize(std::size_t(c.n_layers), 0);
      for (const int l : g.layers) model.layer_windows.at(std::size_t(l)) = *g.sliding_window;
    }
  }
  const Weights w(dir);
  const std::uint64_t dim = std::uint64_t(c.dim), hidden = std::uint64_t(c.hidden_dim);
  const std::uint64_t kv = std::uint64_t(c.kv_dim()), vocab = std::uint64_t(c.vocab_size);
  const std::uint64_t qd = std::uint64_t(c.q_dim()), hd = std::uint64_t(c.head_dim());
  model.token_embedding = w.matrix("model.embed_tokens.weight", {vocab, dim});
  model.layers.resize(std::size_t(c.n_layers));
  for (int l = 0; l < c.n_layers; ++l) {
    LlamaLayerWeights& layer = model.layers[std::size_t(l)];
    const std::string p = fmt::format("model.layers.{}.", l);
    layer.rms_att = w.tensor(p + "input_layernorm.weight", {dim});
    if (family->gemma) {  // HF's post_attention_layernorm is Gemma's norm of the attention's output
      layer.rms_post_att = w.tensor(p + "post_attention_layernorm.weight", {dim});
      layer.rms_ffn = w.tensor(p + "pre_feedforward_layernorm.weight", {dim});
      layer.rms_post_ffn = w.tensor(p + "post_feedforward_layernorm.weight", {dim});
    } else {
      layer.rms_ffn = w.tensor(p + "post_attention_layernorm.weight", {dim});
    }
    if (family->fused) {  // rows q, then k, then v; gate, then up (row-major [out, in]: a split is a cut of the rows)
      const WeightMatrix qkv = w.matrix(p + "self_attn.qkv_proj.weight", {qd + 2 * kv, dim});
      const auto rows = [&](const WeightMatrix& m, std::uint64_t first, std::uint64_t count) {
        if (m.is_packed()) {
          WeightMatrix part = m;
          part.rows = std::int64_t(count);
          part.packed = m.packed + first * m.row_bytes;
          return part;
        }
        return WeightMatrix(std::vector<float>(m.begin() + std::ptrdiff_t(first * dim),
                                               m.begin() + std::ptrdiff_t((first + count) * dim)));
      };
      layer.wq = rows(qkv, 0, qd);
      layer.wk = rows(qkv, qd, kv);
      layer.wv = rows(qkv, qd + kv, kv);
      const WeightMatrix gate_up = w.matrix(p + "mlp.gate_up_proj.weight", {2 * hidden, dim});
      layer.w1 = rows(gate_up, 0, hidden);
      layer.w3 = rows(gate_up, hidden, hidden);
    } else {
      layer.wq = w.matrix(p + "self_attn.q_proj.weight", {qd, dim});
      layer.wk = w.matrix(p + "self_attn.k_proj.weight", {kv, dim});
      layer.wv = w.matrix(p + "self_attn.v_proj.weight", {kv, dim});
      layer.w1 = w.matrix(p + "mlp.gate_proj.weight", {hidden, dim});
      layer.w3 = w.matrix(p + "mlp.up_proj.weight", {hidden, dim});
    }
    layer.wo = w.matrix(p + "self_attn.o_proj.weight", {dim, qd});
    layer.w2 = w.matrix(p + "mlp.down_proj.weight", {dim, hidden});
    if (family->qkv_bias) {
      layer.bq = w.tensor(p + "self_attn.q_proj.bias", {qd});
      layer.bk = w.tensor(p + "self_attn.k_proj.bias", {kv});
      layer.bv = w.tensor(p + "self_attn.v_proj.bias", {kv});
    }
    if (family->qk_norm) {
      layer.q_norm = w.tensor(p + "self_attn.q_norm.weight", {hd});
      layer.k_norm = w.tensor(p + "self_attn.k_norm.weight", {hd});
    }
    if (family->gemma) {
      for (std::vector<float>* norm :
           {&layer.rms_att, &layer.rms_post_att, &layer.rms_ffn, &layer.rms_post_ffn, &layer.q_norm, &layer.k_norm})
        add_one(*norm);
    }
  }
  model.rms_final = w.tensor("model.norm.weight", {dim});
  if (family->gemma) add_one(model.rms_final);
  if (!c.shared_classifier) model.classifier = w.matrix("lm_head.weight", {vocab, dim});
  model.storage = w.storage();
  return model;
}

}  // namespace ropekit
