// GGUF checkpoints of the `llama` architecture: hyper-parameters from the llama.* keys, weights from
// F32 tensors (copied) or F16, BF16 and quantized ones (matrices kept packed, norms widened to float32 once), RoPE
// through the config reader's read_gguf.
// Tensor names and shapes are llama.cpp's (ggml's ne[0] is the input width: a [out, in] matrix is
// stored with dims {in, out}).
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <memory>

#include "config/gguf_format.hpp"
#include "lab/loader.hpp"
#include "lab/quants.hpp"
#include "ropekit/dtype.hpp"
#include "ropekit/error.hpp"

namespace ropekit {
namespace {

using namespace detail::gguf;

constexpr std::uint32_t kTypeF32 = 0, kTypeF16 = 1, kTypeBF16 = 30;

std::string ggml_type_name(std::uint32_t type) {
  static constexpr std::string_view kNames[] = {"F32",  "F16",  "Q4_0", "Q4_1", "Q4_2", "Q4_3", "Q5_0", "Q5_1",
                                                "Q8_0", "Q8_1", "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K", "Q8_K"};
  if (type < std::size(kNames)) return std::string(kNames[type]);
  if (type == kTypeBF16) return "BF16";
  return fmt::format("type {}", type);
}

class GgufModelReader {
 public:
  // bytes: the whole file; storage: what keeps them alive for the model (null: they are the caller's, and the first
  // packed matrix copies them into a buffer of the model's own).
  GgufModelReader(Cursor& c, GgufFile& f, std::span<const std::byte> bytes, std::shared_ptr<const void> storage)
      : c_(c), f_(f), bytes_(bytes), storage_(std::move(storage)) {
    if (storage_ != nullptr) base_ = bytes_.data();
  }

  // What the model's packed matrices point into (null: none is packed).
  std::shared_ptr<const void> storage() const { return packed_ ? storage_ : nullptr; }

  std::int64_t integer(const std::string& key, std::optional<std::int64_t> fallback = std::nullopt) const {
    auto it = f_.kv.find(key);
    if (it == f_.kv.end()) {
      if (fallback) return *fallback;
      throw Error(fmt::format("{}: the GGUF key {} is missing", c_.origin(), key));
    }
    const double* v = std::get_if<double>(&it->second.value);
    if (!v || !(std::fabs(*v) < 9e15) || *v != std::floor(*v)) {
      throw Error(fmt::format("{}: {} must be an integer", c_.origin(), key));
    }
    if (*v < 0 || *v > 2147483647.0) throw Error(fmt::format("{}: {} = {}: out of range", c_.origin(), key, *v));
    return static_cast<std::int64_t>(*v);
  }
  double number(const std::string& key, double fallback) const {
    auto it = f_.kv.find(key);
    if (it == f_.kv.end()) return fallback;
    const double* v = std::get_if<double>(&it->second.value);
    if (!v || !std::isfinite(*v)) throw Error(fmt::format("{}: {} must be a finite number", c_.origin(), key));
    return *v;
  }

  // Tensor `name` with dims exactly `dims` (ggml order), as float32 values.
  std::vector<float> tensor(const std::string& name, const std::vector<std::uint64_t>& dims, bool optional = false) {
    const TensorInfo* t = find(name, optional);
    return t == nullptr ? std::vector<float>{} : widen(name, *t, dims);
  }

  // Matrix `name` with dims exactly {cols, rows}: float32 values, or the file's F16/BF16/quantized rows kept packed
  // (after the same checks, every value decoded once to check that it is finite, a block of rows at a time).
  WeightMatrix matrix(const std::string& name, const std::vector<std::uint64_t>& dims, bool optional = false) {
    const TensorInfo* t = find(name, optional);
    if (t == nullptr) return {};
    // F32 rows are copied, unless the file is mapped for the model: then they too are read in place.
    if (t->type == kTypeF32 && base_ == nullptr) return widen(name, *t, dims);
    const Layout layout = check(name, *t, dims);
    if (t->type == kTypeF32 && layout.start % alignof(float) != 0) return widen(name, *t, dims);  // (general.alignment)
    if (base_ == nullptr) {
      auto copy = std::make_shared<std::vector<std::byte>>(bytes_.begin(), bytes_.end());
      base_ = copy->data();
      storage_ = std::move(copy);
    }
    packed_ = true;
    WeightMatrix m;
    m.encoding = static_cast<WeightEncoding>(t->type);
    m.cols = static_cast<std::int64_t>(dims[0]);
    m.rows = static_cast<std::int64_t>(dims[1]);
    m.row_bytes = static_cast<std::size_t>(dims[0] / layout.block_values * layout.block_bytes);
    m.packed = base_ + layout.start;
    if (const auto bad = detail::first_non_finite(m)) {
      const auto [element, value] = *bad;
      throw Error(fmt::format("{}: tensor {}: element {} at byte {} is {}: weights must be finite", c_.origin(), name,
                              element, layout.start + element / layout.block_values * layout.block_bytes, value));
    }
    return m;
  }

 private:
  struct Layout {
    std::uint64_t block_values, block_bytes, blocks, start;
    const detail::QuantType* quant;
  };

  const TensorInfo* find(const std::string& name, bool optional) const {
    auto it = f_.tensors.find(name);
    if (it == f_.tensors.end()) {
      if (optional) return nullptr;
      throw Error(fmt::format("{}: the tensor {} is missing", c_.origin(), name));
    }
    return &it->second;
  }

  // The tensor's dims, type and bytes checked against the file.
  Layout check(const std::string& name, const TensorInfo& t, const std::vector<std::uint64_t>& dims) {
    if (t.dims != dims) {
      throw Error(fmt::format("{}: tensor {} has dims [{}]; the model's hyper-parameters need [{}]", c_.origin(), name,
                              fmt::join(t.dims, ", "), fmt::join(dims, ", ")));
    }
    std::uint64_t count = 1;
    for (std::uint64_t d : dims) count = detail::checked_mul(count, d, c_.origin(), name);
    const detail::QuantType* quant = detail::quant_type(t.type);
    if (t.type != kTypeF32 && t.type != kTypeF16 && t.type != kTypeBF16 && quant == nullptr) {
      throw Error(
          fmt::format("{}: tensor {} has ggml type {}: the runner reads F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, "
                      "Q5_1, Q4_K, Q5_K and Q6_K weights",
                      c_.origin(), name, ggml_type_name(t.type)));
    }
    // Checked against the file before anything is allocated. Quantized rows are whole blocks (matrix() keeps them
    // packed: widened to float32, a 4-bit file takes several times its size in memory).
    const std::uint64_t block_values = quant != nullptr ? std::uint64_t(quant->block_values) : 1;
    const std::uint64_t block_bytes = quant != nullptr ? std::uint64_t(quant->block_bytes) : t.type == kTypeF32 ? 4 : 2;
    if (dims[0] % block_values != 0) {
      throw Error(fmt::format("{}: tensor {} of type {}: rows of {} values are not whole blocks of {}", c_.origin(),
                              name, quant->name, dims[0], block_values));
    }
    const std::uint64_t blocks = count / block_values;
    const std::uint64_t start = tensor_data_offset(f_, c_, name, t, blocks, block_bytes);
    return {block_values, block_bytes, blocks, start, quant};
  }

  // The tensor widened to float32 at load, every value finite.
  std::vector<float> widen(const std::string& name, const TensorInfo& t, const std::vector<std::uint64_t>& dims) {
    const auto [block_values, block_bytes, blocks, start, quant] = check(name, t, dims);
    const std::uint64_t count = blocks * block_values;
    std::vector<float> out = detail::weight_vector(static_cast<std::size_t>(count));
    out.resize(static_cast<std::size_t>(count));
    if (quant != nullptr) {
      std::vector<std::byte> raw(static_cast<std::size_t>(blocks * block_bytes));
      c_.source().read(start, raw.data(), raw.size());
      detail::dequantize(*quant, raw.data(), blocks, out.data());
    } else if (t.type == kTypeF32) {
      c_.source().read(start, out.data(), static_cast<std::size_t>(count * 4));
    } else {
      std::vector<std::uint16_t> half(static_cast<std::size_t>(count));
      c_.source().read(start, half.data(), static_cast<std::size_t>(count * 2));
      for (std::size_t i = 0; i < half.size(); ++i) {
        out[i] = t.type == kTypeF16 ? f16_to_float(half[i]) : bf16_to_float(half[i]);
      }
    }
    for (std::size_t i = 0; i < out.size(); ++i) {
      if (!std::isfinite(out[i])) {
        throw Error(fmt::format("{}: tensor {}: element {} at byte {} is {}: weights must be finite", c_.origin(), name,
                                i, start + i / block_values * block_bytes, out[i]));
      }
    }
    return out;
  }

  Cursor& c_;
  GgufFile& f_;
  std::span<const std::byte> bytes_;
  std::shared_ptr<const void> storage_;
  const std::byte* base_ = nullptr;  // bytes_ as the model keeps them (null until one is needed)
  bool packed_ = false;              // a matrix points into them
};

}  // namespace

namespace detail {

LlamaModel load_gguf_model(std::span<const std::byte> bytes, std::string_view origin,
                           std::shared_ptr<const void> storage) {
  MemorySource source(bytes);
  Cursor cursor(source, std::string(origin));
  GgufFile file = parse(cursor, {.all_tensors = true});
  GgufModelReader r(cursor, file, bytes, std::move(storage));
  auto arch = file.kv.find("general.architecture");
  const std::string* arch_name = arch == file.kv.end() ? nullptr : std::get_if<std::string>(&arch->second.value);
  if (!arch_name) throw Error(fmt::format("{}: the GGUF key general.architecture is missing", origin));
  if (*arch_name != "llama") {
    throw Error(
        fmt::format("{}: general.architecture = {}: the runner runs the llama architecture only", origin, *arch_name));
  }
  LlamaModel model;
  model.source = fmt::format("gguf {}", origin);
  LlamaConfig& c = model.config;
  c.dim = int(r.integer("llama.embedding_length"));
  c.hidden_dim = int(r.integer("llama.feed_forward_length"));
  c.n_layers = int(r.integer("llama.block_count"));
  c.n_heads = int(r.integer("llama.attention.head_count"));
  c.n_kv_heads = int(r.integer("llama.attention.head_count_kv", c.n_heads));
  c.seq_len = r.integer("llama.context_length");
  c.bos_id = int(r.integer("tokenizer.ggml.bos_token_id", 1));
  c.norm_eps = static_cast<float>(r.number("llama.attention.layer_norm_rms_epsilon", 1e-5));
  if (!(c.norm_eps > 0)) {
    throw Error(fmt::format("{}: llama.attention.layer_norm_rms_epsilon = {}: must be positive", origin, c.norm_eps));
  }
  auto embd = file.tensors.find("token_embd.weight");
  if (embd == file.tensors.end()) throw Error(fmt::format("{}: the tensor token_embd.weight is missing", origin));
  if (embd->second.dims.size() != 2 || embd->second.dims[1] > 16777216) {
    throw Error(fmt::format("{}: tensor token_embd.weight must have dims [embedding_length, vocab ≤ 2^24]", origin));
  }
  c.vocab_size = int(embd->second.dims[1]);
  detail::validate_config(
      c, origin,
      {"llama.embedding_length", "llama.feed_forward_length", "llama.block_count", "llama.attention.head_count",
       "llama.attention.head_count_kv", "token_embd.weight's vocab", "llama.context_length"});
  if (auto key_length = r.integer("llama.attention.key_length", c.head_dim()); key_length != c.head_dim()) {
    throw Error(fmt::format("{}: llama.attention.key_length = {}: the runner needs embedding_length / head_count = {}",
                            origin, key_length, c.head_dim()));
  }
  const std::uint64_t total = detail::weight_count(c, origin);
  if (total / 16 > bytes.size() / 9) {  // the densest types hold 16 values in 9 bytes (Q4_0, Q4_K: 4.5 bits)
    throw Error(
        fmt::format("{}: the hyper-parameters need {} weights; the file has {} bytes", origin, total, bytes.size()));
  }
  const std::uint64_t dim = std::uint64_t(c.dim), hidden = std::uint64_t(c.hidden_dim);
  const std::uint64_t kv = std::uint64_t(c.kv_dim()), vocab = std::uint64_t(c.vocab_size);
  model.token_embedding = r.matrix("token_embd.weight", {dim, vocab});
  model.layers.resize(std::size_t(c.n_layers));
  for (int l = 0; l < c.n_layers; ++l) {
    LlamaLayerWeights& w = model.layers[std::size_t(l)];
    const std::string p = fmt::format("blk.{}.", l);
    w.rms_att = r.tensor(p + "attn_norm.weight", {dim});
    w.wq = r.matrix(p + "attn_q.weight", {dim, dim});
    w.wk = r.matrix(p + "attn_k.weight", {dim, kv});
    w.wv = r.matrix(p + "attn_v.weight", {dim, kv});
    w.wo = r.matrix(p + "attn_output.weight", {dim, dim});
    w.rms_ffn = r.tensor(p + "ffn_norm.weight", {dim});
    w.w1 = r.matrix(p + "ffn_gate.weight", {dim, hidden});
    w.w2 = r.matrix(p + "ffn_down.weight", {hidden, dim});
    w.w3 = r.matrix(p + "ffn_up.weight", {dim, hidden});
  }
  model.rms_final = r.tensor("output_norm.weight", {dim});
  model.classifier = r.matrix("output.weight", {dim, vocab}, /*optional=*/true);
  c.shared_classifier = model.classifier.empty();
  model.rope = read_gguf(bytes, {}, origin);
  const Spec& spec = model.rope.layer().spec;
  if (spec.head_dim != c.head_dim() || model.rope.groups.size() != 1 || model.rope.groups[0].rope_offset != 0) {
    throw Error(fmt::format("{}: the RoPE metadata (head_dim {}) does not fit the model's head size {}", origin,
                            spec.head_dim, c.head_dim()));
  }
  model.storage = r.storage();
  return model;
}

}  // namespace detail

LlamaModel load_gguf_model(std::span<const std::byte> bytes, std::string_view origin) {
  return detail::load_gguf_model(bytes, origin, nullptr);
}

}  // namespace ropekit
