// libFuzzer target: llama2.c checkpoint bytes (legacy or version 1) → load_llama2c, then one forward
// pass of a token when the model loads. Rejections are ropekit::Error; nothing may crash, allocate
// without bound or read past the input.
#include <cstddef>
#include <cstdint>
#include <span>

#include "forward_one_token.hpp"
#include "ropekit/error.hpp"
#include "ropekit/model.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  try {
    forward_one_token(ropekit::load_llama2c(std::as_bytes(std::span(data, size)), "fuzz.bin"));
  } catch (const ropekit::Error&) {
  }
  return 0;
}
