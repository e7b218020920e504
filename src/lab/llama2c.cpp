// llama2.c checkpoints: the legacy export (models/README.md) and export.py's "version 1" fp32 export.
// The shared loader pieces (ByteReader, the dimension rules) live here too.
#include <fmt/format.h>
#include <sys/mman.h>

#include <bit>
#include <cmath>
#include <fstream>
#include <limits>

#include "lab/loader.hpp"
#include "ropekit/error.hpp"

namespace ropekit {
namespace detail {

void ByteReader::truncated(std::string_view what, std::uint64_t need) const {
  throw Error(
      fmt::format("{}: truncated: {} at byte {} needs {} bytes, {} remain", origin_, what, pos_, need, remaining()));
}

void ByteReader::bad(std::string_view what) const {
  throw Error(fmt::format("{}: {} (at byte {})", origin_, what, pos_));
}

std::vector<float> weight_vector(std::size_t count) {
  std::vector<float> out;
  out.reserve(count);
  // The untouched pages of a large allocation, advised before the first write: the 2 MiB-aligned parts become
  // transparent huge pages (where the kernel allows them), so a decode step's walk through every weight misses the
  // TLB 512× less often (stories15M's 37 MB classifier: 1.8 → 1.0 ms per token on Zen 4, docs/performance.md).
  constexpr std::size_t kHuge = std::size_t{2} << 20;
  const std::size_t bytes = count * sizeof(float);
  if (bytes >= kHuge) {
    const auto begin = reinterpret_cast<std::uintptr_t>(out.data());
    const std::uintptr_t first = (begin + kHuge - 1) / kHuge * kHuge, last = (begin + bytes) / kHuge * kHuge;
    if (last > first) madvise(reinterpret_cast<void*>(first), last - first, MADV_HUGEPAGE);
  }
  return out;
}

std::vector<float> ByteReader::floats(std::uint64_t count, std::string_view what) {
  if (count > remaining() / 4) {
    throw Error(fmt::format("{}: truncated: tensor {} at byte {} needs {} float32 values, {} bytes remain", origin_,
                            what, pos_, count, remaining()));
  }
  const std::uint64_t start = pos_;
  std::vector<float> out = weight_vector(static_cast<std::size_t>(count));
  out.resize(static_cast<std::size_t>(count));
  take(out.data(), count * 4, what);
  for (std::size_t i = 0; i < out.size(); ++i) {
    if (!std::isfinite(out[i])) {
      throw Error(fmt::format("{}: tensor {}: element {} at byte {} is {}: weights must be finite", origin_, what, i,
                              start + 4 * i, out[i]));
    }
  }
  return out;
}

std::uint64_t checked_mul(std::uint64_t a, std::uint64_t b, std::string_view origin, std::string_view what) {
  constexpr std::uint64_t limit = std::uint64_t{1} << 62;
  if (a != 0 && b > limit / a) {
    throw Error(fmt::format("{}: {} = {} × {} elements: too large for any file", origin, what, a, b));
  }
  return a * b;
}

void validate_config(const LlamaConfig& c, std::string_view origin, const ConfigFieldNames& n) {
  auto positive = [&](std::string_view field, std::int64_t v) {
    if (v <= 0) throw Error(fmt::format("{}: {} = {}: must be positive", origin, field, v));
  };
  positive(n.dim, c.dim);
  positive(n.hidden_dim, c.hidden_dim);
  positive(n.n_layers, c.n_layers);
  positive(n.n_heads, c.n_heads);
  positive(n.n_kv_heads, c.n_kv_heads);
  positive(n.vocab_size, c.vocab_size);
  positive(n.seq_len, c.seq_len);
  if (c.head_size == 0 && c.dim % c.n_heads != 0) {
    throw Error(fmt::format("{}: {} = {}: must be a multiple of {} = {}", origin, n.dim, c.dim, n.n_heads, c.n_heads));
  }
  if (c.n_heads % c.n_kv_heads != 0) {
    throw Error(fmt::format("{}: {} = {}: must divide {} = {} (grouped-query attention)", origin, n.n_kv_heads,
                            c.n_kv_heads, n.n_heads, c.n_heads));
  }
  if (c.head_dim() % 2 != 0) {
    throw Error(fmt::format("{}: {} / {} = {}: the head size must be even to rotate pairs", origin, n.dim, n.n_heads,
                            c.head_dim()));
  }
  if (c.seq_len >= kPositionLimit) {
    throw Error(fmt::format("{}: {} = {}: must be below 2^47", origin, n.seq_len, c.seq_len));
  }
  if (c.bos_id < 0 || c.bos_id >= c.vocab_size) {
    throw Error(fmt::format("{}: BOS id {} lies outside the vocabulary of {} tokens", origin, c.bos_id, c.vocab_size));
  }
}

std::uint64_t weight_count(const LlamaConfig& c, std::string_view origin) {
  const std::uint64_t dim = std::uint64_t(c.dim), hidden = std::uint64_t(c.hidden_dim);
  const std::uint64_t kv = std::uint64_t(c.kv_dim()), layers = std::uint64_t(c.n_layers);
  std::uint64_t per_layer = 2 * dim;                                  // the two norms
  per_layer += 2 * checked_mul(dim, dim, origin, "wq + wo");          // wq, wo
  per_layer += 2 * checked_mul(kv, dim, origin, "wk + wv");           // wk, wv
  per_layer += 3 * checked_mul(hidden, dim, origin, "w1 + w2 + w3");  // w1, w2, w3
  std::uint64_t total = checked_mul(per_layer, layers, origin, "the layers' weights");
  total += checked_mul(std::uint64_t(c.vocab_size), dim, origin, "the token embedding") + dim;
  return total;
}

ModelPositions llama2c_rope(const LlamaConfig& config, std::string_view origin) {
  ModelPositions rope;
  rope.source = std::string(origin);
  rope.model_type = "llama2.c";
  rope.qk_head_dim = config.head_dim();
  rope.max_position_embeddings = config.seq_len;
  Spec spec;
  spec.head_dim = config.head_dim();
  spec.rotary_dim = config.head_dim();
  spec.base = 10000.0;
  spec.pairing = Pairing::Interleaved;
  {
    LayerPositions g;
    g.spec = spec;
    g.qk_head_dim = spec.head_dim;
    g.softmax_scale = 1.0 / std::sqrt(double(spec.head_dim));
    rope.groups.push_back(g);
  }
  return rope;
}

}  // namespace detail

namespace {

using detail::ByteReader;

constexpr std::uint32_t kVersion1Magic = 0x616b3432;  // "ak42" as a little-endian uint32 (export.py)

// member: a std::vector<float> (norms) or a WeightMatrix (float32 here) of each layer.
template <class Member>
void split_layers(std::vector<float> all, int layers, std::vector<LlamaLayerWeights>& out,
                  Member LlamaLayerWeights::*member) {
  const std::size_t each = all.size() / static_cast<std::size_t>(layers);
  for (int l = 0; l < layers; ++l) {
    auto first = all.begin() + static_cast<std::ptrdiff_t>(each * std::size_t(l));
    (out[std::size_t(l)].*member).assign(first, first + static_cast<std::ptrdiff_t>(each));
  }
}

}  // namespace

LlamaModel load_llama2c(std::span<const std::byte> bytes, std::string_view origin) {
  ByteReader r(bytes, std::string(origin));
  LlamaModel model;
  model.source = fmt::format("llama2.c {}", origin);
  LlamaConfig& c = model.config;
  bool version1 = false;
  if (bytes.size() >= 4) {
    std::uint32_t magic;
    std::memcpy(&magic, bytes.data(), 4);
    version1 = magic == kVersion1Magic;
  }
  std::int32_t header[7];
  if (version1) {
    r.skip(4, "the magic");
    const auto version = r.scalar<std::int32_t>("the version");
    if (version != 1) {
      throw Error(
          fmt::format("{}: llama2.c version = {} (at byte 4): only the legacy export and the fp32 "
                      "version 1 are supported (version 2 is int8-quantized)",
                      origin, version));
    }
  }
  static constexpr std::string_view kFields[7] = {"dim",        "hidden_dim", "n_layers", "n_heads",
                                                  "n_kv_heads", "vocab_size", "seq_len"};
  for (int i = 0; i < 7; ++i) header[i] = r.scalar<std::int32_t>(kFields[i]);
  c.dim = header[0];
  c.hidden_dim = header[1];
  c.n_layers = header[2];
  c.n_heads = header[3];
  c.n_kv_heads = header[4];
  c.seq_len = header[6];
  if (version1) {
    c.vocab_size = header[5];
    const auto flag = r.scalar<std::uint8_t>("the shared-classifier flag");
    if (flag > 1) r.bad(fmt::format("shared-classifier flag = {}: must be 0 or 1", flag));
    c.shared_classifier = flag == 1;
    r.skip(256 - r.pos(), "the header's padding");
  } else {
    // The legacy export marks an unshared classifier with a negative vocab_size.
    c.shared_classifier = header[5] > 0;
    c.vocab_size = header[5] == std::numeric_limits<std::int32_t>::min() ? 0 : std::abs(header[5]);
  }
  detail::validate_config(c, origin,
                          {"dim", "hidden_dim", "n_layers", "n_heads", "n_kv_heads", "vocab_size", "seq_len"});
  const std::uint64_t floats = detail::weight_count(c, origin);
  if (floats > r.remaining() / 4) {
    throw Error(
        fmt::format("{}: truncated or not a llama2.c checkpoint: the header (dim {}, hidden_dim {}, n_layers "
                    "{}, n_heads {}, n_kv_heads {}, vocab_size {}) needs {} float32 weights after byte {}, {} "
                    "bytes remain",
                    origin, c.dim, c.hidden_dim, c.n_layers, c.n_heads, c.n_kv_heads, c.vocab_size, floats, r.pos(),
                    r.remaining()));
  }
  const std::uint64_t dim = std::uint64_t(c.dim), hidden = std::uint64_t(c.hidden_dim);
  const std::uint64_t kv = std::uint64_t(c.kv_dim()), L = std::uint64_t(c.n_layers);
  const std::uint64_t vocab = std::uint64_t(c.vocab_size);
  model.layers.resize(std::size_t(c.n_layers));
  auto layered = [&](auto LlamaLayerWeights::*member, std::uint64_t each, std::string_view name) {
    split_layers(r.floats(L * each, name), c.n_layers, model.layers, member);
  };
  if (version1) {
    layered(&LlamaLayerWeights::rms_att, dim, "rms_att");
    layered(&LlamaLayerWeights::rms_ffn, dim, "rms_ffn");
    model.rms_final = r.floats(dim, "rms_final");
    model.token_embedding = r.floats(vocab * dim, "token_embedding");
  } else {
    model.token_embedding = r.floats(vocab * dim, "token_embedding");
    layered(&LlamaLayerWeights::rms_att, dim, "rms_att");
  }
  layered(&LlamaLayerWeights::wq, dim * dim, "wq");
  layered(&LlamaLayerWeights::wk, kv * dim, "wk");
  layered(&LlamaLayerWeights::wv, kv * dim, "wv");
  layered(&LlamaLayerWeights::wo, dim * dim, "wo");
  if (!version1) layered(&LlamaLayerWeights::rms_ffn, dim, "rms_ffn");
  layered(&LlamaLayerWeights::w1, hidden * dim, "w1");
  layered(&LlamaLayerWeights::w2, dim * hidden, "w2");
  layered(&LlamaLayerWeights::w3, hidden * dim, "w3");
  if (!version1) {
    model.rms_final = r.floats(dim, "rms_final");
    // Two legacy RoPE tables (cos and sin at base 10000), unused: ropekit forms the angles itself.
    const std::uint64_t table =
        detail::checked_mul(std::uint64_t(c.seq_len), std::uint64_t(c.head_dim() / 2), origin, "freq_cis_real");
    if (table > r.remaining() / 8) r.truncated("the legacy freq_cis_real/imag tables", 2 * 4 * table);
    r.skip(8 * table, "the legacy freq_cis_real/imag tables");
  }
  if (!c.shared_classifier) model.classifier = r.floats(vocab * dim, "classifier");
  if (r.remaining() != 0) {
    throw Error(
        fmt::format("{}: {} bytes follow the last tensor (at byte {}): not a llama2.c checkpoint of these "
                    "dimensions",
                    origin, r.remaining(), r.pos()));
  }
  model.rope = detail::llama2c_rope(c, model.source);
  return model;
}

namespace detail {

std::vector<std::byte> read_whole_file(const std::filesystem::path& path, std::string_view what) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(fmt::format("{} = {}: cannot open the file", what, path.string()));
  in.seekg(0, std::ios::end);
  const auto size = static_cast<std::size_t>(in.tellg());
  in.seekg(0);
  std::vector<std::byte> bytes(size);
  in.read(reinterpret_cast<char*>(bytes.data()), static_cast<std::streamsize>(size));
  if (!in) throw Error(fmt::format("{} = {}: read error", what, path.string()));
  return bytes;
}

}  // namespace detail

LlamaModel load_model_file(const std::filesystem::path& path, const LoadOptions& options) {
  if (std::filesystem::is_directory(path)) return load_hf_model(path);
  {
    // GGUF: mapped, its packed matrices read in place for as long as the model lives (peak resident memory about
    // the file's size, not twice it); a model of float32 matrices only lets the map go. Without the map: the bytes in
    // memory, held by the model the same way.
    std::ifstream in(path, std::ios::binary);
    char magic[4] = {};
    if (in.read(magic, 4) && std::memcmp(magic, "GGUF", 4) == 0) {
      if (!options.map) {
        auto bytes = std::make_shared<const std::vector<std::byte>>(detail::read_whole_file(path, "model"));
        return detail::load_gguf_model(*bytes, path.string(), bytes);
      }
      auto map = std::make_shared<detail::MappedFile>(path);
      return detail::load_gguf_model(map->bytes(), path.string(), map);
    }
  }
  const std::vector<std::byte> bytes = detail::read_whole_file(path, "model");
  return load_llama2c(bytes, path.string());
}

}  // namespace ropekit
