// libFuzzer target: llama2.c tokenizer.bin bytes → Tokenizer::from_llama2c, then encoding the input's
// own bytes as text (any UTF-8 or not) and decoding every id. Rejections are ropekit::Error; nothing
// may crash, allocate without bound or read past the input.
#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>

#include "ropekit/error.hpp"
#include "ropekit/tokenizer.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  try {
    const ropekit::Tokenizer tokenizer =
        ropekit::Tokenizer::from_llama2c(std::as_bytes(std::span(data, size)), "fuzz.bin");
    const std::string_view text(reinterpret_cast<const char*>(data), std::min<std::size_t>(size, 256));
    int previous = tokenizer.bos_id();
    for (int id : tokenizer.encode(text, true)) {
      (void)tokenizer.decode(previous, id);
      previous = id;
    }
  } catch (const ropekit::Error&) {
  }
  return 0;
}
