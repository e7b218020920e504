// libFuzzer target: GGUF bytes → load_gguf_model (every tensor, F32/F16/BF16) and Tokenizer::from_gguf
// (tokenizer.ggml.* arrays), then an encode. Rejections are ropekit::Error; nothing may crash,
// allocate without bound or read past the input.
#include <cstddef>
#include <cstdint>
#include <span>

#include "ropekit/error.hpp"
#include "ropekit/model.hpp"
#include "ropekit/tokenizer.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const auto bytes = std::as_bytes(std::span(data, size));
  try {
    (void)ropekit::load_gguf_model(bytes, "fuzz.gguf");
  } catch (const ropekit::Error&) {
  }
  try {
    const ropekit::Tokenizer tokenizer = ropekit::Tokenizer::from_gguf(bytes, "fuzz.gguf");
    (void)tokenizer.encode("Once upon a time \xE2\x82\xAC");
  } catch (const ropekit::Error&) {
  }
  return 0;
}
