// libFuzzer target: GGUF bytes → read_gguf → make_plan. Rejections are ropekit::Error; nothing may
// crash, allocate without bound or read past the input.
#include <cstddef>
#include <cstdint>
#include <span>

#include "ropekit/config.hpp"
#include "ropekit/error.hpp"
#include "ropekit/plan.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  try {
    const ropekit::ModelPositions model = ropekit::read_gguf(std::as_bytes(std::span(data, size)), {}, "fuzz.gguf");
    for (const ropekit::LayerPositions& layer : model.groups) (void)ropekit::make_plan(layer.spec, 1 << 20);
  } catch (const ropekit::Error&) {
  }
  return 0;
}
