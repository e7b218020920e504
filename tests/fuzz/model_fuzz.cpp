// libFuzzer target: llama2.c checkpoint bytes (legacy or version 1) → load_llama2c, then one forward
// pass of a token when the model loads. Rejections are ropekit::Error; nothing may crash, allocate
// without bound or read past the input.
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "ropekit/error.hpp"
#include "ropekit/model.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  try {
    const ropekit::LlamaModel model = ropekit::load_llama2c(std::as_bytes(std::span(data, size)), "fuzz.bin");
    if (model.config.vocab_size <= 4096 && model.config.dim <= 1024) {
      ropekit::LlamaRunner runner(model, {.capacity = 2, .threads = 1});
      std::vector<float> logits(std::size_t(model.config.vocab_size));
      const int token = 0;
      const std::int64_t position = 0;
      runner.forward(ropekit::Rope(model.rope_layer().spec), std::span(&token, 1), std::span(&position, 1), logits);
    }
  } catch (const ropekit::Error&) {
  }
  return 0;
}
