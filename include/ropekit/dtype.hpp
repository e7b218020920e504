// ropekit/dtype.hpp — storage types of q/k and their scalar conversions.
//
// Arithmetic is always float32; bf16 and fp16 are storage only. Conversions to bf16/fp16 round to
// nearest, ties to even (one rounding), keep infinities and produce quiet NaNs from NaNs.
// Conversions to float32 are exact.
#pragma once

#include <bit>
#include <cstdint>
#include <string_view>

namespace ropekit {

enum class DType : std::uint8_t { F32 = 1, BF16 = 2, F16 = 3 };

std::string_view to_string(DType dtype);
constexpr std::int64_t element_size(DType dtype) { return dtype == DType::F32 ? 4 : 2; }

inline float bf16_to_float(std::uint16_t bits) {
  return std::bit_cast<float>(static_cast<std::uint32_t>(bits) << 16);
}

inline std::uint16_t float_to_bf16(float value) {
  std::uint32_t bits = std::bit_cast<std::uint32_t>(value);
  if ((bits & 0x7fffffffu) > 0x7f800000u) {  // NaN: keep the sign, force a quiet payload bit
    return static_cast<std::uint16_t>((bits >> 16) | 0x0040u);
  }
  bits += 0x7fffu + ((bits >> 16) & 1u);  // round to nearest, ties to even
  return static_cast<std::uint16_t>(bits >> 16);
}

// IEEE binary16 through the compiler's _Float16 (GCC >= 12 on x86-64 and AArch64), whose
// conversions are correctly rounded.
inline float f16_to_float(std::uint16_t bits) {
  return static_cast<float>(std::bit_cast<_Float16>(bits));
}

inline std::uint16_t float_to_f16(float value) {
  return std::bit_cast<std::uint16_t>(static_cast<_Float16>(value));
}

}  // namespace ropekit
