// What the model sub-commands (tokenize, generate, eval) share: token files and loading a model with
// its tokenizer.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "ropekit/model.hpp"
#include "ropekit/tokenizer.hpp"

namespace ropekit::cli {

// int32 little-endian token ids. Errors: a size that is not a multiple of 4, an unreadable file.
std::vector<int> read_tokens(const std::string& path);
void write_tokens(const std::string& path, const std::vector<int>& ids);
std::string read_text(const std::string& path, std::string_view option);

// The tokenizer for `model`: `path`, or the GGUF model file itself; checked against the model's
// vocabulary. Errors: no tokenizer for a llama2.c checkpoint, a vocabulary of another size.
Tokenizer load_tokenizer_for(const LlamaModel& model, const std::string& model_path, const std::string& path);

}  // namespace ropekit::cli
