// Shared by the checkpoint loaders: checked byte reading, the model's dimension rules, and the
// model's own RoPE for formats that do not store one.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "ropekit/model.hpp"

namespace ropekit::detail {

// Reads little-endian values from a byte span; every read is checked against what remains, and an
// error names the origin, the field and the byte offset.
class ByteReader {
 public:
  ByteReader(std::span<const std::byte> bytes, std::string origin) : bytes_(bytes), origin_(std::move(origin)) {}

  std::uint64_t pos() const { return pos_; }
  std::uint64_t remaining() const { return bytes_.size() - pos_; }
  const std::string& origin() const { return origin_; }

  [[noreturn]] void truncated(std::string_view what, std::uint64_t need) const;
  [[noreturn]] void bad(std::string_view what) const;

  template <class T>
  T scalar(std::string_view what) {
    T v;
    take(&v, sizeof v, what);
    return v;
  }
  void take(void* dst, std::uint64_t n, std::string_view what) {
    if (n > remaining()) truncated(what, n);
    if (n) std::memcpy(dst, bytes_.data() + pos_, n);
    pos_ += n;
  }
  void skip(std::uint64_t n, std::string_view what) {
    if (n > remaining()) truncated(what, n);
    pos_ += n;
  }
  // `count` float32 values of tensor `what`, each finite (a NaN or infinite weight is an error: it
  // would make every logit NaN without saying why).
  std::vector<float> floats(std::uint64_t count, std::string_view what);

 private:
  std::span<const std::byte> bytes_;
  std::string origin_;
  std::uint64_t pos_ = 0;
};

// An empty vector with capacity for `count` floats, its memory advised for transparent huge pages when large.
std::vector<float> weight_vector(std::size_t count);

// a · b, or an Error naming `what` when the product does not fit 2^62 (no file holds that many).
std::uint64_t checked_mul(std::uint64_t a, std::uint64_t b, std::string_view origin, std::string_view what);

// Checks the dimensions (each positive, dim a multiple of n_heads, n_heads of n_kv_heads, an even
// head_dim, seq_len below 2^47) naming the field as `names` gives it ("dim", or GGUF's key).
struct ConfigFieldNames {
  std::string_view dim, hidden_dim, n_layers, n_heads, n_kv_heads, vocab_size, seq_len;
};
void validate_config(const LlamaConfig& config, std::string_view origin, const ConfigFieldNames& names);

// The number of float32 values every tensor of `config` takes (without the classifier), checked.
std::uint64_t weight_count(const LlamaConfig& config, std::string_view origin);

// A safetensors container (Hugging Face's): an 8-byte little-endian header length, a JSON header naming each
// tensor's dtype, shape and data_offsets, then the data. Parsed and checked — every offset inside the file, every
// byte count equal to the shape's values times the dtype's size — without reading the data.
struct SafetensorsTensor {
  std::string dtype;  // "F32", "F16", "BF16", ... as the header says
  std::vector<std::uint64_t> shape;
  std::uint64_t offset = 0;  // of the first byte, from the start of the file
  std::uint64_t count = 0;   // values
  std::uint64_t bytes = 0;   // count × the dtype's size, offset + bytes ≤ the file's size
};
struct SafetensorsFile {
  std::uint64_t data_start = 0;
  std::map<std::string, SafetensorsTensor> tensors;
};
SafetensorsFile parse_safetensors(std::span<const std::byte> bytes, std::string_view origin);

// llama2.c's RoPE: interleaved pairs, base 10000, the whole head rotated (run.c).
ModelPositions llama2c_rope(const LlamaConfig& config, std::string_view origin);

}  // namespace ropekit::detail

namespace ropekit::detail {
// The whole file; `what` names the option in errors ("model = PATH: cannot open the file").
std::vector<std::byte> read_whole_file(const std::filesystem::path& path, std::string_view what);

// A read-only memory map of a whole file: weights are read from the page cache (widened, or kept packed for as long
// as the model holds the map), never copied into a buffer of the file's size. Errors name the file.
class MappedFile {
 public:
  explicit MappedFile(const std::filesystem::path& path);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  std::span<const std::byte> bytes() const { return {static_cast<const std::byte*>(data_), size_}; }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  void* data_ = nullptr;
  std::size_t size_ = 0;
};

// The first value of a packed matrix that is not finite — its element index and value — widening a block of rows at
// a time (a NaN or infinite weight would make every logit NaN without saying why); nullopt: every value is finite.
std::optional<std::pair<std::uint64_t, float>> first_non_finite(const WeightMatrix& m);

// load_gguf_model over `bytes` that `storage` keeps alive (a MappedFile): packed matrices point into them; null
// storage: the first packed matrix copies them (the public load_gguf_model).
LlamaModel load_gguf_model(std::span<const std::byte> bytes, std::string_view origin,
                           std::shared_ptr<const void> storage);
}  // namespace ropekit::detail
