// src/config/gguf_format.hpp — the GGUF container (ggml's docs/gguf.md): "GGUF", u32 version, u64
// tensor count, u64 key/value count, the key/values, the tensor infos, padding to general.alignment,
// then tensor data, all little-endian. Every length and count is checked against the bytes that
// remain before it is used, so a truncated or hostile file gives a ropekit::Error naming what was
// being read and the byte offset, never a read past the end or a huge allocation.
#pragma once

#include <fmt/format.h>
#include <bit>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "ropekit/error.hpp"

namespace ropekit::detail::gguf {

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
  kU8 = 0,
  kI8 = 1,
  kU16 = 2,
  kI16 = 3,
  kU32 = 4,
  kI32 = 5,
  kF32 = 6,
  kBool = 7,
  kString = 8,
  kArray = 9,
  kU64 = 10,
  kI64 = 11,
  kF64 = 12,
};

// A metadata value. Long arrays (tokenizer vocabularies) are skipped, not stored, unless the parse
// asks for them (ParseOptions::long_arrays: the model loader's tokenizer).
struct GgufValue {
  std::uint32_t type = 0;
  std::variant<std::monostate, double, bool, std::string, std::vector<GgufValue>> value;
};
constexpr std::uint64_t kMaxStoredArray = 1024;  // per-layer arrays (head counts, SWA patterns) of any real model
constexpr std::uint64_t kMaxKeyLength = 65535;
constexpr std::uint32_t kMaxDims = 4;  // GGML_MAX_DIMS

class Cursor {
 public:
  Cursor(Source& src, std::string origin) : src_(src), origin_(std::move(origin)) {}

  [[noreturn]] void truncated(std::string_view what, std::uint64_t need) const {
    throw Error(fmt::format("{}: truncated GGUF: {} at byte {} needs {} bytes, {} remain", origin_, what, pos_, need,
                            remaining()));
  }
  [[noreturn]] void bad(std::string_view what) const {
    throw Error(fmt::format("{}: invalid GGUF: {} (at byte {})", origin_, what, pos_));
  }
  std::uint64_t remaining() const { return src_.size() - pos_; }
  std::uint64_t size() const { return src_.size(); }
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
        if (count > remaining() / min_size)
          truncated(fmt::format("{} ({} array entries)", key, count), count * min_size);
        if (count <= kMaxStoredArray || keep_long_arrays_) {
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
      case kU8:
      case kI8:
      case kBool: return 1;
      case kU16:
      case kI16: return 2;
      case kU32:
      case kI32:
      case kF32: return 4;
      case kU64:
      case kI64:
      case kF64: return 8;
      default: bad(fmt::format("{}: array of value type {} is not supported", key, type));
    }
  }

  Source& source() { return src_; }
  const std::string& origin() const { return origin_; }
  void keep_long_arrays(bool keep) { keep_long_arrays_ = keep; }

 private:
  bool keep_long_arrays_ = false;
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
  std::map<std::string, TensorInfo> tensors;  // the RoPE tensors, or all (ParseOptions::all_tensors)
  std::uint64_t data_start = 0;
};

struct ParseOptions {
  bool all_tensors = false;  // keep every tensor info, not only the RoPE tensors
  bool long_arrays = false;  // store arrays of any length (tokenizer vocabularies)
};

// Parses the header, the key/values and the tensor infos and computes where tensor data starts.
GgufFile parse(Cursor& c, const ParseOptions& options = {});

// The bytes of tensor `t` of `count` elements of `element_bytes` each: checks that they lie inside
// the file (offset arithmetic without overflow) and returns their absolute offset.
std::uint64_t tensor_data_offset(const GgufFile& file, const Cursor& c, const std::string& name, const TensorInfo& t,
                                 std::uint64_t count, std::uint64_t element_bytes);

}  // namespace ropekit::detail::gguf
