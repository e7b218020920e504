// libFuzzer target: bytes → `ropekit positions`' JSON description parser (positions_from_json). Anything
// accepted must have as many values as its shape says; anything else must be a ropekit::Error.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "positions.hpp"
#include "ropekit/error.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  try {
    const ropekit::cli::PositionIds ids =
        ropekit::cli::positions_from_json(std::string_view(reinterpret_cast<const char*>(data), size), "fuzz.json");
    std::int64_t count = 1;
    for (std::int64_t d : ids.shape) count *= d;
    if (count != std::int64_t(ids.values.size())) std::abort();
  } catch (const ropekit::Error&) {
  }
  return 0;
}
