// libFuzzer target: safetensors bytes → parse_safetensors (the header length, the JSON header, every tensor's dtype,
// shape and data_offsets), then the first and last byte of every tensor it accepts read, as the model loader reads
// them. Rejections are ropekit::Error; nothing may crash, allocate without bound or read past the input.
#include <cstddef>
#include <cstdint>
#include <span>

#include "lab/loader.hpp"
#include "ropekit/error.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const auto bytes = std::as_bytes(std::span(data, size));
  try {
    const ropekit::detail::SafetensorsFile file = ropekit::detail::parse_safetensors(bytes, "fuzz.safetensors");
    volatile unsigned sum = 0;
    for (const auto& [name, t] : file.tensors) {
      if (t.bytes == 0) continue;
      sum = sum + std::to_integer<unsigned>(bytes[std::size_t(t.offset)]) +
            std::to_integer<unsigned>(bytes[std::size_t(t.offset + t.bytes - 1)]);
    }
  } catch (const ropekit::Error&) {
  }
  return 0;
}
