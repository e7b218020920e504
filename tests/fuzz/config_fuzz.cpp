// libFuzzer target: config.json text → read_config → make_plan. Any input may be rejected with
// ropekit::Error; nothing may crash, hang, leak or read out of bounds (ASan + UBSan).
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "ropekit/config.hpp"
#include "ropekit/error.hpp"
#include "ropekit/plan.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  for (int pass = 0; pass < 2; ++pass) {
    ropekit::ConfigOptions options;
    if (pass == 1) options.pairing = ropekit::Pairing::Interleaved;  // also reach unknown model types
    try {
      const ropekit::ModelPositions model = ropekit::read_config(text, options, "fuzz");
      for (const ropekit::LayerPositions& layer : model.groups) {
        (void)ropekit::make_plan(layer.spec);
        (void)ropekit::make_plan(layer.spec, 1 << 20);
      }
    } catch (const ropekit::Error&) {
    }
  }
  return 0;
}
