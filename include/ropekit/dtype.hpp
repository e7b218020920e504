// ropekit/dtype.hpp — storage types of q/k and of KV caches, and their scalar conversions.
//
// Arithmetic is always float32; bf16 and fp16 are storage only.
//   Precision: conversions to float32 are exact; conversions to bf16/fp16 round to nearest, ties to
//   even, once (subnormals kept, overflow to ±infinity as IEEE 754 says), keep infinities and give a
//   quiet NaN (sign kept) for every NaN.
//   Error: ≤ half an ulp of the target type (bf16: 2^-8 relative, fp16: 2^-11 relative above 2^-14).
//   Valid range: every float32 and every 16-bit pattern (tests/spec_test.cpp, and all 65 536 patterns
//   through the kernels in tests/targets_test.cpp).
#pragma once

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string_view>

namespace ropekit {

enum class DType : std::uint8_t { F32 = 1, BF16 = 2, F16 = 3 };

std::string_view to_string(DType dtype);
constexpr std::int64_t element_size(DType dtype) { return dtype == DType::F32 ? 4 : 2; }

// The storage type of a KV cache: the q/k storage types plus fp8 e4m3 (the codec below) with a
// per-tensor scale (stored = e4m3(x / scale), read back as e4m3 · scale).
enum class CacheDType : std::uint8_t { F32 = 1, BF16 = 2, F16 = 3, F8E4M3 = 4 };
std::string_view to_string(CacheDType dtype);
constexpr std::int64_t element_size(CacheDType dtype) {
  return dtype == CacheDType::F32 ? 4 : dtype == CacheDType::F8E4M3 ? 1 : 2;
}

enum class PageLayout : std::uint8_t { NHD = 1, HND = 2 };
std::string_view to_string(PageLayout layout);

inline float bf16_to_float(std::uint16_t bits) { return std::bit_cast<float>(static_cast<std::uint32_t>(bits) << 16); }

inline std::uint16_t float_to_bf16(float value) {
  std::uint32_t bits = std::bit_cast<std::uint32_t>(value);
  if ((bits & 0x7fffffffu) > 0x7f800000u) {  // NaN: keep the sign, force a quiet payload bit
    return static_cast<std::uint16_t>((bits >> 16) | 0x0040u);
  }
  bits += 0x7fffu + ((bits >> 16) & 1u);  // round to nearest, ties to even
  return static_cast<std::uint16_t>(bits >> 16);
}

// IEEE binary16 through the compiler's half type, whose conversions are correctly rounded:
// _Float16 (GCC >= 12 on x86-64, GCC >= 13 on AArch64, clang >= 15), or the storage-only __fp16 of clang 14
// (the fuzz build uses Debian 12's clang 14) and of GCC 12 on AArch64 (IEEE binary16 there; the cross build).
#if (defined(__clang__) && __clang_major__ < 15) || \
    (defined(__aarch64__) && !defined(__clang__) && defined(__GNUC__) && __GNUC__ < 13)
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

// fp8 E4M3 ("e4m3fn", OCP 8-bit floating point, as vLLM's and FlashInfer's fp8 KV caches store it):
// 1 sign, 4 exponent (bias 7), 3 mantissa bits; no infinities; S.1111.111 is NaN; the largest finite
// value is ±448, the smallest subnormal 2^-9. Storage only, for KV caches (ropekit/append.hpp).
//   float_to_e4m3: round to nearest, ties to even, saturating — every |x| ≥ 448 and ±infinity become ±448
//   (CUDA's __NV_SATFINITE, so the cache never holds a NaN made from a large value); every NaN becomes
//   0x7f (the canonical NaN CUDA's conversion writes); −0 stays −0.
//   e4m3_to_float: exact.
//   Error: ≤ half a spacing of e4m3 at |x| (2^-4 relative for normals, 2^-10 absolute below 2^-6) for
//   |x| < 448. Valid range: every float32 and every 8-bit pattern (tests/append_test.cpp, all 256
//   patterns and the rounding boundaries against a double oracle).
inline float e4m3_to_float(std::uint8_t bits) {
  const float sign = (bits & 0x80u) != 0 ? -1.0f : 1.0f;
  const int exponent = (bits >> 3) & 0xf, mantissa = bits & 0x7;
  if (exponent == 0xf && mantissa == 0x7) return std::numeric_limits<float>::quiet_NaN();
  if (exponent == 0) return sign * std::ldexp(static_cast<float>(mantissa), -9);
  return sign * std::ldexp(static_cast<float>(8 + mantissa), exponent - 10);
}

// float_to_e4m3's rounding constant for normals: rounding float32's 23 mantissa bits to 3 at bit 20 adds
// 0x7ffff (and the kept bit, for ties to even); the exponent's rebias from 127 to 7 (120 << 23) is
// folded in, so that one shift leaves the e4m3 code. (Wraps below 2^-7, where the subnormal path is taken.)
inline constexpr std::uint32_t kE4m3NormalBias = 0x7ffffu - (120u << 23);

// Branch-free (selects only), so that conversion loops vectorize; the SIMD encoder (src/cpu/rotate-inl.h)
// runs the same steps.
inline std::uint8_t float_to_e4m3(float value) {
  const std::uint32_t bits = std::bit_cast<std::uint32_t>(value);
  const std::uint32_t a = bits & 0x7fffffffu;
  // A normal (2^-6 ≤ |x| < 448): round to 3 mantissa bits at bit 20, ties to even (a carry moves into the
  // exponent, as it should), rebias the exponent; every |x| ≥ 448, infinities included, saturates to 448.
  const std::uint32_t normal = std::min((a + ((a >> 20) & 1u) + kE4m3NormalBias) >> 20, 0x7eu);
  // |x| < 2^-6: a multiple of 2^-9 (subnormals, and 2^-6 itself). Float32's spacing in [2^14, 2^15) is
  // 2^-9, so |x| + 2^14 rounds |x| to it, ties to even, and the multiple is the sum's low bits.
  const float sum = std::bit_cast<float>(a) + 0x1p14f;
  const std::uint32_t subnormal = std::bit_cast<std::uint32_t>(sum) - 0x46800000u;
  std::uint32_t out = a < 0x3c800000u ? subnormal : normal;
  out |= (bits >> 24) & 0x80u;
  out = a > 0x7f800000u ? 0x7fu : out;  // NaN
  return static_cast<std::uint8_t>(out);
}

// n elements of storage type `from` at src into n cache elements of type `to` at dst (neither may overlap
// the other): the conversion the fused append (ropekit/append.hpp) writes the cache with, on the SIMD
// target calls run on now — for an engine that writes entries of its own beside it (values, or keys it
// rotated itself). Precision: exact widening, or one rounding to nearest even; fp8: float_to_e4m3(x / scale)
// (the division in float32, then the e4m3 rounding above); the same type is copied bit for bit. Every
// SIMD target gives the same bits (tests/append_test.cpp). Valid range: n >= 0, dtypes of their enums,
// scale finite and > 0 (read for F8E4M3 only); otherwise ropekit::Error naming the argument.
void convert_to_cache(const void* src, DType from, std::int64_t n, void* dst, CacheDType to, float scale);

}  // namespace ropekit
