// GGUF → Spec. The format (ggml's docs/gguf.md): "GGUF", u32 version, u64 tensor count, u64 key/value
// count, the key/values, the tensor infos, padding to general.alignment, then tensor data. All
// little-endian. Every length and count is checked against the bytes that remain before it is
// used, so a truncated or hostile file gives an Error naming what was being read, never a read past
// the end or a huge allocation.
//
// Keys read ({arch} = general.architecture) and how they map, following llama.cpp's loader
// (llama-model.cpp / llama-context.cpp): docs/config.md.
#include <bit>
#include <cmath>
#include <cstring>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <fstream>
#include <map>
#include <memory>
#include <variant>

#include "config/model_table.hpp"
#include "ropekit/config.hpp"
#include "ropekit/error.hpp"
#include "ropekit/plan.hpp"

namespace ropekit {
namespace {

static_assert(std::endian::native == std::endian::little, "the GGUF reader assumes a little-endian host");

// Where the bytes come from: memory (tests, fuzzing) or a file read on demand (real GGUF files are
// gigabytes; only the metadata and three small tensors are read).
class Source {
 public:
  virtual ~Source() = default;
  virtual std::uint64_t size() const = 0;
  virtual void read(std::uint64_t offset, void* dst, std::size_t n) = 0;
};

class MemorySource final : public Source {
 public:
  explicit MemorySource(std::span<const std::byte> bytes) : bytes_(bytes) {}
  std::uint64_t size() const override { return bytes_.size(); }
  void read(std::uint64_t offset, void* dst, std::size_t n) override {
    if (n) std::memcpy(dst, bytes_.data() + offset, n);
  }

 private:
  std::span<const std::byte> bytes_;
};

class FileSource final : public Source {
 public:
  explicit FileSource(const std::filesystem::path& path) : path_(path.string()), in_(path, std::ios::binary) {
    if (!in_) throw Error(fmt::format("gguf = {}: cannot open the file", path.string()));
    in_.seekg(0, std::ios::end);
    size_ = static_cast<std::uint64_t>(in_.tellg());
    in_.seekg(0);
  }
  std::uint64_t size() const override { return size_; }
  void read(std::uint64_t offset, void* dst, std::size_t n) override {
    if (offset != pos_) in_.seekg(static_cast<std::streamoff>(offset));
    in_.read(static_cast<char*>(dst), static_cast<std::streamsize>(n));
    if (!in_) throw Error(fmt::format("{}: read error at byte {}", path_, offset));
    pos_ = offset + n;
  }

 private:
  std::string path_;
  std::ifstream in_;
  std::uint64_t size_ = 0;
  std::uint64_t pos_ = 0;
};

enum GgufType : std::uint32_t {
  kU8 = 0, kI8 = 1, kU16 = 2, kI16 = 3, kU32 = 4, kI32 = 5, kF32 = 6, kBool = 7,
  kString = 8, kArray = 9, kU64 = 10, kI64 = 11, kF64 = 12,
};

// A metadata value. Long arrays (tokenizer vocabularies) are skipped, not stored: RoPE needs none.
struct GgufValue {
  std::uint32_t type = 0;
  std::variant<std::monostate, double, bool, std::string, std::vector<GgufValue>> value;
};
constexpr std::uint64_t kMaxStoredArray = 64;
constexpr std::uint64_t kMaxKeyLength = 65535;
constexpr std::uint32_t kMaxDims = 4;  // GGML_MAX_DIMS

class Cursor {
 public:
  Cursor(Source& src, std::string origin) : src_(src), origin_(std::move(origin)) {}

  [[noreturn]] void truncated(std::string_view what, std::uint64_t need) const {
    throw Error(fmt::format("{}: truncated GGUF: {} at byte {} needs {} bytes, {} remain", origin_,
                            what, pos_, need, remaining()));
  }
  [[noreturn]] void bad(std::string_view what) const {
    throw Error(fmt::format("{}: invalid GGUF: {} (at byte {})", origin_, what, pos_));
  }
  std::uint64_t remaining() const { return src_.size() - pos_; }
  std::uint64_t pos() const { return pos_; }

  void bytes(void* dst, std::uint64_t n, std::string_view what) {
    if (n > remaining()) truncated(what, n);
    src_.read(pos_, dst, static_cast<std::size_t>(n));
    pos_ += n;
  }
  void skip(std::uint64_t n, std::string_view what) {
    if (n > remaining()) truncated(what, n);
    pos_ += n;
  }
  template <class T>
  T scalar(std::string_view what) {
    T v;
    bytes(&v, sizeof v, what);
    return v;
  }
  std::string string(std::string_view what, std::uint64_t max_length = UINT64_MAX) {
    const auto n = scalar<std::uint64_t>(what);
    if (n > max_length) bad(fmt::format("{} has length {} (limit {})", what, n, max_length));
    if (n > remaining()) truncated(what, n);
    std::string s(static_cast<std::size_t>(n), '\0');
    bytes(s.data(), n, what);
    return s;
  }

  GgufValue value(std::uint32_t type, const std::string& key, int depth = 0) {
    GgufValue v{type, {}};
    switch (type) {
      case kU8: v.value = double(scalar<std::uint8_t>(key)); break;
      case kI8: v.value = double(scalar<std::int8_t>(key)); break;
      case kU16: v.value = double(scalar<std::uint16_t>(key)); break;
      case kI16: v.value = double(scalar<std::int16_t>(key)); break;
      case kU32: v.value = double(scalar<std::uint32_t>(key)); break;
      case kI32: v.value = double(scalar<std::int32_t>(key)); break;
      case kF32: v.value = double(scalar<float>(key)); break;
      case kU64: v.value = double(scalar<std::uint64_t>(key)); break;
      case kI64: v.value = double(scalar<std::int64_t>(key)); break;
      case kF64: v.value = scalar<double>(key); break;
      case kBool: {
        const auto b = scalar<std::uint8_t>(key);
        if (b > 1) bad(fmt::format("{} = {}: a bool must be 0 or 1", key, b));
        v.value = b == 1;
        break;
      }
      case kString: v.value = string(key); break;
      case kArray: {
        if (depth > 0) bad(fmt::format("{}: nested arrays are not supported", key));
        const auto elem = scalar<std::uint32_t>(key);
        const auto count = scalar<std::uint64_t>(key);
        const std::uint64_t min_size = elem == kString ? 8 : element_size(elem, key);
        if (count > remaining() / min_size) truncated(fmt::format("{} ({} array entries)", key, count), count * min_size);
        if (count <= kMaxStoredArray) {
          std::vector<GgufValue> items;
          for (std::uint64_t i = 0; i < count; ++i) items.push_back(value(elem, key, depth + 1));
          v.value = std::move(items);
        } else if (elem == kString) {
          for (std::uint64_t i = 0; i < count; ++i) skip(scalar<std::uint64_t>(key), key);
        } else {
          skip(count * min_size, key);
        }
        break;
      }
      default: bad(fmt::format("{} has value type {}: not a GGUF type", key, type));
    }
    return v;
  }

  std::uint64_t element_size(std::uint32_t type, const std::string& key) const {
    switch (type) {
      case kU8: case kI8: case kBool: return 1;
      case kU16: case kI16: return 2;
      case kU32: case kI32: case kF32: return 4;
      case kU64: case kI64: case kF64: return 8;
      default: bad(fmt::format("{}: array of value type {} is not supported", key, type));
    }
  }

  Source& source() { return src_; }
  const std::string& origin() const { return origin_; }

 private:
  Source& src_;
  std::string origin_;
  std::uint64_t pos_ = 0;
};

struct TensorInfo {
  std::vector<std::uint64_t> dims;
  std::uint32_t type = 0;
  std::uint64_t offset = 0;
};

struct GgufFile {
  std::map<std::string, GgufValue> kv;
  std::map<std::string, TensorInfo> tensors;  // only the RoPE tensors
  std::uint64_t data_start = 0;
};

bool is_rope_tensor(const std::string& name) {
  return name == "rope_freqs.weight" || name == "rope_factors_long.weight" ||
         name == "rope_factors_short.weight";
}

GgufFile parse(Cursor& c) {
  char magic[4];
  c.bytes(magic, 4, "the magic");
  if (std::memcmp(magic, "GGUF", 4) != 0) {
    throw Error(fmt::format("{}: not a GGUF file (the first bytes are not \"GGUF\")", c.origin()));
  }
  const auto version = c.scalar<std::uint32_t>("the version");
  if (version != 2 && version != 3) {
    throw Error(fmt::format("{}: GGUF version = {}: only versions 2 and 3 are supported", c.origin(), version));
  }
  const auto tensor_count = c.scalar<std::uint64_t>("the tensor count");
  const auto kv_count = c.scalar<std::uint64_t>("the key/value count");
  // A key/value takes at least 8 (key length) + 4 (type) + 1 bytes; a tensor info 8 + 4 + 4 + 8.
  if (kv_count > c.remaining() / 13) c.truncated(fmt::format("{} key/values", kv_count), kv_count * 13);
  if (tensor_count > c.remaining() / 24) {
    c.truncated(fmt::format("{} tensor infos", tensor_count), tensor_count * 24);
  }
  GgufFile file;
  for (std::uint64_t i = 0; i < kv_count; ++i) {
    std::string key = c.string("a metadata key", kMaxKeyLength);
    const auto type = c.scalar<std::uint32_t>(key);
    GgufValue v = c.value(type, key);
    if (!file.kv.emplace(key, std::move(v)).second) c.bad(fmt::format("duplicate key {}", key));
  }
  for (std::uint64_t i = 0; i < tensor_count; ++i) {
    std::string name = c.string("a tensor name", kMaxKeyLength);
    TensorInfo t;
    const auto n_dims = c.scalar<std::uint32_t>(name);
    if (n_dims == 0 || n_dims > kMaxDims) c.bad(fmt::format("tensor {} has {} dimensions (1 to 4)", name, n_dims));
    for (std::uint32_t d = 0; d < n_dims; ++d) t.dims.push_back(c.scalar<std::uint64_t>(name));
    t.type = c.scalar<std::uint32_t>(name);
    t.offset = c.scalar<std::uint64_t>(name);
    if (is_rope_tensor(name)) file.tensors.emplace(name, std::move(t));
  }
  std::uint64_t alignment = 32;
  if (auto it = file.kv.find("general.alignment"); it != file.kv.end()) {
    const double* a = std::get_if<double>(&it->second.value);
    if (!a || *a < 1 || *a > 65536 || !std::has_single_bit(static_cast<std::uint64_t>(*a))) {
      c.bad("general.alignment must be a power of two up to 65536");
    }
    alignment = static_cast<std::uint64_t>(*a);
  }
  file.data_start = (c.pos() + alignment - 1) / alignment * alignment;
  return file;
}

class SpecBuilder {
 public:
  SpecBuilder(GgufFile& f, Cursor& c, const ConfigOptions& options)
      : f_(f), c_(c), options_(options) {}

  ModelRope build() {
    out_.source = c_.origin();
    const std::string arch = string_key("general.architecture");
    out_.model_type = arch;
    prefix_ = arch + ".";
    const detail::GgufArchInfo* info = detail::find_gguf_arch(arch);
    if (options_.pairing) {
      pairing_ = *options_.pairing;
    } else if (info) {
      pairing_ = info->pairing;
    } else {
      throw Error(fmt::format("{}: general.architecture = {}: not in ropekit's architecture table "
                              "(docs/config.md), so the lane pairing is unknown: pass --pairing "
                              "half|interleaved (ConfigOptions::pairing)",
                              c_.origin(), arch));
    }
    const bool deepseek = info && info->quirk == detail::ModelQuirk::DeepSeek;
    const bool gemma3 = info && info->quirk == detail::ModelQuirk::Gemma3;

    int head_dim = 0;
    if (auto k = number(prefix_ + "attention.key_length")) head_dim = as_int(prefix_ + "attention.key_length", *k);
    if (deepseek) {
      if (auto k = number(prefix_ + "attention.key_length_mla")) head_dim = as_int(prefix_ + "attention.key_length_mla", *k);
    }
    if (head_dim == 0) {
      const double width = required(prefix_ + "embedding_length");
      const double heads = required(prefix_ + "attention.head_count");
      if (heads <= 0 || width <= 0 || std::fmod(width, heads) != 0.0) {
        fail(prefix_ + "embedding_length", width,
             fmt::format("must be a positive multiple of {}attention.head_count = {}", prefix_, heads));
      }
      head_dim = as_int(prefix_ + "embedding_length", width / heads);
    }
    int rotary_dim = head_dim;
    if (auto r = number(prefix_ + "rope.dimension_count")) rotary_dim = as_int(prefix_ + "rope.dimension_count", *r);
    out_.qk_head_dim = head_dim;
    int offset = 0;
    if (deepseek) {  // MLA: the rope slice (dimension_count lanes) follows the nope lanes
      if (rotary_dim > head_dim) fail(prefix_ + "rope.dimension_count", rotary_dim, "exceeds the key length");
      offset = head_dim - rotary_dim;
      head_dim = rotary_dim;
    }
    if (auto ctx = number(prefix_ + "context_length")) {
      out_.max_position_embeddings = static_cast<std::int64_t>(*ctx);
    }

    Spec spec;
    spec.head_dim = head_dim;
    spec.rotary_dim = rotary_dim;
    spec.base = number(prefix_ + "rope.freq_base").value_or(10000.0);  // llama.cpp's default
    spec.pairing = pairing_;
    spec.scaling = scaling(rotary_dim / 2);
    if (info && info->mrope) {
      if (auto it = f_.kv.find(prefix_ + "rope.dimension_sections"); it != f_.kv.end()) {
        spec.mrope = MRope{sections(it->second), *info->mrope};
      }
    }
    out_.layers.push_back(validated(gemma3 ? "full_attention" : "", spec, offset));
    if (gemma3) {  // llama.cpp: sliding-window layers use freq_base_swa (10000) and no scaling
      Spec sliding = spec;
      sliding.base = number(prefix_ + "rope.freq_base_swa").value_or(10000.0);
      sliding.scaling = scaling::None{};
      out_.layers.push_back(validated("sliding_attention", sliding, offset));
    }
    return std::move(out_);
  }

 private:
  [[noreturn]] void fail(const std::string& key, const auto& value, std::string_view rule) const {
    throw Error(fmt::format("{}: {} = {}: {}", c_.origin(), key, value, rule));
  }

  LayerRope validated(std::string layer_type, const Spec& spec, int offset) const {
    try {
      spec.validate();
    } catch (const Error& e) {
      throw Error(fmt::format("{}: {}", c_.origin(), e.what()));
    }
    return {std::move(layer_type), spec, offset};
  }

  std::optional<double> number(const std::string& key) const {
    auto it = f_.kv.find(key);
    if (it == f_.kv.end()) return std::nullopt;
    const GgufValue& v = it->second;
    if (const auto* items = std::get_if<std::vector<GgufValue>>(&v.value)) {
      // Per-layer arrays (e.g. head_count on some architectures): RoPE needs the first layer's.
      if (!items->empty()) {
        if (const double* d = std::get_if<double>(&items->front().value)) return *d;
      }
    }
    const double* d = std::get_if<double>(&v.value);
    if (!d) fail(key, "(not a number)", "expected a number");
    if (!std::isfinite(*d)) fail(key, *d, "expected a finite number");
    return *d;
  }
  double required(const std::string& key) const {
    if (auto v = number(key)) return *v;
    throw Error(fmt::format("{}: {} is missing", c_.origin(), key));
  }
  int as_int(const std::string& key, double v) const {
    if (v != std::floor(v) || v <= 0 || v > 65536) fail(key, v, "must be an integer in [1, 65536]");
    return static_cast<int>(v);
  }
  std::string string_key(const std::string& key) const {
    auto it = f_.kv.find(key);
    if (it == f_.kv.end()) throw Error(fmt::format("{}: {} is missing", c_.origin(), key));
    const auto* s = std::get_if<std::string>(&it->second.value);
    if (!s) fail(key, "(not a string)", "expected a string");
    return *s;
  }

  std::vector<int> sections(const GgufValue& v) const {
    const std::string key = prefix_ + "rope.dimension_sections";
    const auto* items = std::get_if<std::vector<GgufValue>>(&v.value);
    if (!items || items->size() < 3 || items->size() > 4) fail(key, "(not 3 or 4 integers)", "expected [t, h, w, e]");
    std::vector<int> out;
    for (const GgufValue& item : *items) {
      const double* d = std::get_if<double>(&item.value);
      if (!d || *d != std::floor(*d) || *d < 0 || *d > 65536) fail(key, "(entry)", "expected integers >= 0");
      out.push_back(static_cast<int>(*d));
    }
    if (out.size() == 4 && out[3] != 0) {
      fail(key + "[3]", out[3], "a 4th position stream is not supported (ropekit models t, h, w)");
    }
    out.resize(3);
    return out;
  }

  // A small F32 tensor's values, checked against the file's extent.
  std::optional<std::vector<double>> tensor(const std::string& name, int expected) {
    auto it = f_.tensors.find(name);
    if (it == f_.tensors.end()) return std::nullopt;
    const TensorInfo& t = it->second;
    if (t.type != 0) fail(name, fmt::format("ggml type {}", t.type), "expected F32 (type 0)");
    std::uint64_t n = 1;
    for (std::uint64_t d : t.dims) {
      if (d != 0 && n > UINT64_MAX / d) fail(name, "(dims)", "element count overflows");
      n *= d;
    }
    if (n != static_cast<std::uint64_t>(expected)) {
      fail(name, fmt::format("{} values", n), fmt::format("expected rope.dimension_count/2 = {}", expected));
    }
    const std::uint64_t size = c_.source().size();
    if (f_.data_start > size || t.offset > size - f_.data_start || n * 4 > size - f_.data_start - t.offset) {
      throw Error(fmt::format("{}: truncated GGUF: tensor {} ({} bytes at data offset {}) lies past the "
                              "end of the file",
                              c_.origin(), name, n * 4, t.offset));
    }
    std::vector<float> raw(n);
    c_.source().read(f_.data_start + t.offset, raw.data(), n * 4);
    return std::vector<double>(raw.begin(), raw.end());
  }

  Scaling scaling(int pairs) {
    std::string type = "none";
    if (auto it = f_.kv.find(prefix_ + "rope.scaling.type"); it != f_.kv.end()) {
      const auto* s = std::get_if<std::string>(&it->second.value);
      if (!s) fail(prefix_ + "rope.scaling.type", "(not a string)", "expected a string");
      type = *s;
    }
    std::optional<double> factor = number(prefix_ + "rope.scaling.factor");
    if (!factor) factor = number(prefix_ + "rope.scale_linear");  // older files
    const std::optional<double> attn_factor = number(prefix_ + "rope.scaling.attn_factor");
    auto original = [&] {
      const std::string key = prefix_ + "rope.scaling.original_context_length";
      const double l0 = required(key);
      if (l0 < 1 || l0 != std::floor(l0)) fail(key, l0, "must be a positive integer");
      return static_cast<std::int64_t>(l0);
    };
    auto freqs = tensor("rope_freqs.weight", pairs);
    auto long_f = tensor("rope_factors_long.weight", pairs);
    auto short_f = tensor("rope_factors_short.weight", pairs);

    if (long_f || short_f || type == "longrope") {  // Phi-3: LongRoPE factor tensors
      if (!long_f || !short_f) {
        throw Error(fmt::format("{}: LongRoPE needs both rope_factors_long and rope_factors_short tensors",
                                c_.origin()));
      }
      const std::int64_t l0 = original();
      scaling::LongRope lr{*short_f, *long_f, l0, 0.0, attn_factor};
      lr.factor = out_.max_position_embeddings > 0 ? double(out_.max_position_embeddings) / double(l0) : 1.0;
      return lr;
    }
    if (freqs) {  // Llama 3: smoothing precomputed as per-pair divisors
      if (type != "none") fail(prefix_ + "rope.scaling.type", type, "cannot be combined with rope_freqs");
      return scaling::FreqFactors{*freqs};
    }
    if (type == "none") return scaling::None{};
    if (!factor) throw Error(fmt::format("{}: {}rope.scaling.factor is missing (scaling type {})",
                                         c_.origin(), prefix_, type));
    if (type == "linear") return scaling::Linear{*factor};
    if (type == "yarn") {
      scaling::Yarn y{};
      y.factor = *factor;
      y.original_max_position_embeddings = original();
      y.beta_fast = number(prefix_ + "rope.scaling.yarn_beta_fast").value_or(32.0);
      y.beta_slow = number(prefix_ + "rope.scaling.yarn_beta_slow").value_or(1.0);
      const double log_mul = number(prefix_ + "rope.scaling.yarn_log_multiplier").value_or(0.0);
      if (log_mul > 0.0) {
        // DeepSeek: yarn_log_multiplier = 0.1·mscale_all_dim, and llama.cpp sets mscale equal to it,
        // so the cos/sin magnitude is 1 and the softmax gets mscale(f, mscale_all_dim)².
        y.mscale = y.mscale_all_dim = log_mul / 0.1;
      } else if (attn_factor && *attn_factor != 1.0) {
        // llama.cpp multiplies attn_factor onto ggml's built-in 0.1·ln(f) + 1.
        y.attention_factor = *attn_factor * yarn_get_mscale(*factor);
      }
      return y;
    }
    fail(prefix_ + "rope.scaling.type", type, "unknown (known: none, linear, yarn, longrope)");
  }

  GgufFile& f_;
  Cursor& c_;
  const ConfigOptions& options_;
  std::string prefix_;
  Pairing pairing_{};
  ModelRope out_;
};

ModelRope read(Source& src, const ConfigOptions& options, std::string origin) {
  Cursor cursor(src, std::move(origin));
  GgufFile file = parse(cursor);
  return SpecBuilder(file, cursor, options).build();
}

}  // namespace

ModelRope read_gguf(std::span<const std::byte> bytes, const ConfigOptions& options, std::string_view origin) {
  MemorySource src(bytes);
  return read(src, options, std::string(origin));
}

ModelRope read_gguf_file(const std::filesystem::path& path, const ConfigOptions& options) {
  FileSource src(path);
  return read(src, options, path.string());
}

}  // namespace ropekit
