// libFuzzer target: .npy bytes → parse_npy; an accepted array must survive serialize → parse
// unchanged (the writer and the reader agree on the format).
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <span>

#include "npy.hpp"
#include "ropekit/error.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace ropekit::cli;
  try {
    const NpyArray a = parse_npy(std::as_bytes(std::span(data, size)), "fuzz.npy");
    const NpyArray b = parse_npy(serialize_npy(a), "round-trip");
    if (b.type != a.type || b.shape != a.shape || b.data != a.data) std::abort();
  } catch (const ropekit::Error&) {
  }
  return 0;
}
