// tests/bundled_model.hpp — the repository's bundled model (TinyStories 260K, models/) and its tokenizer, loaded once
// per test program, and the validation excerpt's tokens (data/): what the model, tokenizer, runner and lab tests read.
#pragma once

#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "ropekit/lab.hpp"
#include "ropekit/model.hpp"
#include "ropekit/tokenizer.hpp"

namespace bundled_model {

inline const std::string kRepo = ROPEKIT_REPO_DIR;
inline const std::string kModel = kRepo + "/models/tinystories-260k.bin";
inline const std::string kTokenizer = kRepo + "/models/tok512.bin";

inline const ropekit::LlamaModel& bundled() {
  static const ropekit::LlamaModel model = ropekit::load_model_file(kModel);
  return model;
}
inline const ropekit::Tokenizer& bundled_tokenizer() {
  static const ropekit::Tokenizer tok = ropekit::Tokenizer::from_file(kTokenizer);
  return tok;
}
inline std::string read(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}
inline const std::vector<int>& excerpt_tokens() {
  static const std::vector<int> ids =
      ropekit::encode_stories(bundled_tokenizer(), read(kRepo + "/data/tinystories-valid-excerpt.txt"));
  return ids;
}

}  // namespace bundled_model
