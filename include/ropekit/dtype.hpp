// ropekit/dtype.hpp — storage types of q/k and their scalar conversions.
//
// Arithmetic is always float32; bf16 and fp16 are storage only.
//   Precision: conversions to float32 are exact; conversions to bf16/fp16 round to nearest, ties to
//   even, once (subnormals kept, overflow to ±infinity as IEEE 754 says), keep infinities and give a
//   quiet NaN (sign kept) for every NaN.
//   Error: ≤ half an ulp of the target type (bf16: 2^-8 relative, fp16: 2^-11 relative above 2^-14).
//   Valid range: every float32 and every 16-bit pattern (tests/spec_test.cpp, and all 65 536 patterns
//   through the kernels in tests/targets_test.cpp).
#pragma once

#include <bit>
#include <cstdint>
#include <cstring>
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

// IEEE binary16 through the compiler's half type, whose conversions are correctly rounded:
// _Float16 (GCC >= 12, clang >= 15 on x86-64 and AArch64), or clang 14's storage-only __fp16 (the
// fuzz build uses Debian 12's clang 14).
#if defined(__clang__) && __clang_major__ < 15
using Half = __fp16;
#else
using Half = _Float16;
#endif

inline float f16_to_float(std::uint16_t bits) {
  Half h;
  std::memcpy(&h, &bits, sizeof h);  // memcpy, not bit_cast: clang 14's libstdc++ bit_cast rejects __fp16
  return static_cast<float>(h);
}

inline std::uint16_t float_to_f16(float value) {
  const Half h = static_cast<Half>(value);
  std::uint16_t bits;
  std::memcpy(&bits, &h, sizeof bits);
  return bits;
}

}  // namespace ropekit
