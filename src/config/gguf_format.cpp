// The GGUF container reader (see gguf_format.hpp).
#include "config/gguf_format.hpp"

namespace ropekit::detail::gguf {
namespace {

bool is_rope_tensor(const std::string& name) {
  return name == "rope_freqs.weight" || name == "rope_factors_long.weight" || name == "rope_factors_short.weight";
}

}  // namespace

GgufFile parse(Cursor& c, const ParseOptions& options) {
  c.keep_long_arrays(options.long_arrays);
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
    if (options.all_tensors || is_rope_tensor(name)) {
      if (!file.tensors.emplace(name, std::move(t)).second) c.bad(fmt::format("duplicate tensor {}", name));
    }
  }
  std::uint64_t alignment = 32;
  if (auto it = file.kv.find("general.alignment"); it != file.kv.end()) {
    const double* a = std::get_if<double>(&it->second.value);
    if (!a || !(*a >= 1 && *a <= 65536) || !std::has_single_bit(static_cast<std::uint64_t>(*a))) {
      c.bad("general.alignment must be a power of two up to 65536");
    }
    alignment = static_cast<std::uint64_t>(*a);
  }
  file.data_start = (c.pos() + alignment - 1) / alignment * alignment;
  return file;
}

std::uint64_t tensor_data_offset(const GgufFile& file, const Cursor& c, const std::string& name, const TensorInfo& t,
                                 std::uint64_t count, std::uint64_t element_bytes) {
  const std::uint64_t size = c.size();
  if (file.data_start > size || t.offset > size - file.data_start) {
    throw Error(
        fmt::format("{}: tensor {}: data offset {} lies past the end of the file ({} bytes, data from "
                    "byte {})",
                    c.origin(), name, t.offset, size, file.data_start));
  }
  const std::uint64_t start = file.data_start + t.offset;
  if (count > (size - start) / element_bytes) {
    throw Error(fmt::format("{}: truncated GGUF: tensor {} at byte {} needs {} elements of {} bytes, {} bytes remain",
                            c.origin(), name, start, count, element_bytes, size - start));
  }
  return start;
}

}  // namespace ropekit::detail::gguf
