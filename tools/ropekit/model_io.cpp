#include "model_io.hpp"

#include <fmt/format.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "ropekit/error.hpp"

namespace ropekit::cli {

std::vector<int> read_tokens(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(fmt::format("--tokens {}: cannot open the file", path));
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (bytes.size() % 4 != 0) {
    throw Error(fmt::format("--tokens {}: {} bytes is not a whole number of int32 token ids", path, bytes.size()));
  }
  std::vector<int> ids(bytes.size() / 4);
  for (std::size_t i = 0; i < ids.size(); ++i) {
    std::int32_t v;
    std::memcpy(&v, bytes.data() + 4 * i, 4);
    ids[i] = v;
  }
  return ids;
}

void write_tokens(const std::string& path, const std::vector<int>& ids) {
  std::ofstream out(path, std::ios::binary);
  if (!out) throw Error(fmt::format("--out {}: cannot write this file", path));
  for (int id : ids) {
    const auto v = static_cast<std::int32_t>(id);
    out.write(reinterpret_cast<const char*>(&v), 4);
  }
  if (!out) throw Error(fmt::format("--out {}: write error", path));
}

std::string read_text(const std::string& path, std::string_view option) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) throw Error(fmt::format("{} {}: a directory, not a file", option, path));
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(fmt::format("{} {}: cannot open the file", option, path));
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

Tokenizer load_tokenizer_for(const LlamaModel& model, const std::string& model_path, const std::string& path) {
  std::string from = path;
  if (from.empty()) {
    if (!model.source.starts_with("gguf")) {
      throw Error(
          fmt::format("--tokenizer is required for the llama2.c checkpoint {} (e.g. models/tok512.bin)", model_path));
    }
    from = model_path;
  }
  Tokenizer tokenizer = Tokenizer::from_file(from);
  tokenizer.require_vocab_size(model.config.vocab_size, model_path);
  return tokenizer;
}

}  // namespace ropekit::cli
