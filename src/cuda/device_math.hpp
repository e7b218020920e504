// src/cuda/device_math.hpp — the scalar reference's arithmetic, written once for the host compiler and nvcc.
//
// Every function is ROPEKIT_HD (__host__ __device__ under nvcc, plain inline otherwise) and uses only integer bit
// operations and explicitly rounded float32 operations, so that a kernel body gives the same bits on the CPU (where
// the test suite runs it over the whole launch grid) and on a GPU: fmul/fadd round to nearest even once (nvcc:
// __fmul_rn/__fadd_rn, which the compiler never contracts; host: the build's -ffp-contract=off), fma is one fused
// multiply-add (__fmaf_rn / std::fma). The codecs equal ropekit/dtype.hpp's bit for bit (tests/cuda_host_test.cpp:
// every bf16 and fp16 pattern, and the rounding boundaries). On a GPU the bf16 and fp16 conversions of numbers are the
// hardware's cvt.rn (one instruction, the same IEEE rounding to nearest even, subnormals kept: no -ftz), NaNs the
// software's (the hardware makes every NaN canonical); tests/cuda_device_test.cpp checks them against the host's
// around every bf16 and fp16 rounding boundary and on a million random patterns.
#pragma once

#include <cstdint>
#include <cstring>

#include "rope/device_shape.hpp"  // ROPEKIT_HD

#if defined(__CUDACC__)
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#else
#include <cmath>
#endif

namespace ropekit::cuda {

ROPEKIT_HD std::uint32_t bits_of(float x) {
  std::uint32_t b;
  std::memcpy(&b, &x, 4);
  return b;
}
ROPEKIT_HD float float_of(std::uint32_t b) {
  float x;
  std::memcpy(&x, &b, 4);
  return x;
}

ROPEKIT_HD float fmul(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}
ROPEKIT_HD float fadd(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fadd_rn(a, b);
#else
  return a + b;
#endif
}
ROPEKIT_HD float fma(float a, float b, float c) {
#if defined(__CUDA_ARCH__)
  return __fmaf_rn(a, b, c);
#else
  return std::fma(a, b, c);
#endif
}

ROPEKIT_HD float fdiv(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fdiv_rn(a, b);
#else
  return a / b;
#endif
}

// Double precision, each operation rounded once (the QK-norm's sum of squares and root).
ROPEKIT_HD double dadd(double a, double b) {
#if defined(__CUDA_ARCH__)
  return __dadd_rn(a, b);
#else
  return a + b;
#endif
}
ROPEKIT_HD double dmul(double a, double b) {
#if defined(__CUDA_ARCH__)
  return __dmul_rn(a, b);
#else
  return a * b;
#endif
}
ROPEKIT_HD double ddiv(double a, double b) {
#if defined(__CUDA_ARCH__)
  return __ddiv_rn(a, b);
#else
  return a / b;
#endif
}
ROPEKIT_HD double dsqrt(double a) {
#if defined(__CUDA_ARCH__)
  return __dsqrt_rn(a);
#else
  return std::sqrt(a);
#endif
}

// bf16: the top half of a float32; rounding to nearest even, NaN kept quiet with its sign (ropekit/dtype.hpp).
ROPEKIT_HD float bf16_load(std::uint16_t b) { return float_of(static_cast<std::uint32_t>(b) << 16); }
ROPEKIT_HD bool is_nan_bits(std::uint32_t b) { return (b & 0x7fffffffu) > 0x7f800000u; }
ROPEKIT_HD std::uint16_t bf16_quiet(std::uint32_t b) { return static_cast<std::uint16_t>((b >> 16) | 0x0040u); }
ROPEKIT_HD std::uint16_t bf16_store(float x) {
  std::uint32_t b = bits_of(x);
#if defined(__CUDA_ARCH__)
  // Both results, then a select: a branch per element (with its convergence barrier) cost more on a GPU than the
  // conversion itself.
  const std::uint16_t rounded = __bfloat16_as_ushort(__float2bfloat16_rn(x));
  return is_nan_bits(b) ? bf16_quiet(b) : rounded;
#else
  if (is_nan_bits(b)) return bf16_quiet(b);
  b += 0x7fffu + ((b >> 16) & 1u);
  return static_cast<std::uint16_t>(b >> 16);
#endif
}
// A packed pair of 16-bit results (lo's in the low half) with each NaN lane replaced by quiet(its float's bits): the
// hardware's packed conversions make every NaN canonical.
template <class Quiet>
ROPEKIT_HD std::uint32_t with_quiet_nans(std::uint32_t w, float lo, float hi, Quiet quiet) {
  const std::uint32_t bl = bits_of(lo), bh = bits_of(hi);
  w = is_nan_bits(bl) ? (w & 0xffff0000u) | quiet(bl) : w;
  return is_nan_bits(bh) ? (w & 0x0000ffffu) | (static_cast<std::uint32_t>(quiet(bh)) << 16) : w;
}

// Two bf16 results in one 32-bit word, lo in the low half (the lower address): bf16_store of each. On a GPU one
// cvt.rn.bf16x2.f32 for both (half the conversions of a 16-bit row), NaN lanes then replaced by selects.
ROPEKIT_HD std::uint32_t bf16x2_store(float lo, float hi) {
#if defined(__CUDA_ARCH__)
  const __nv_bfloat162 both = __floats2bfloat162_rn(lo, hi);  // .x = lo: the low half
  std::uint32_t w;
  std::memcpy(&w, &both, 4);
  return with_quiet_nans(w, lo, hi, bf16_quiet);
#else
  return bf16_store(lo) | (static_cast<std::uint32_t>(bf16_store(hi)) << 16);
#endif
}

// IEEE binary16, correctly rounded (nearest, ties to even), as the host compiler's _Float16 conversion.
ROPEKIT_HD float f16_load(std::uint16_t h) {
  const std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000u) << 16;
  const std::uint32_t exponent = (h >> 10) & 0x1fu, mantissa = h & 0x3ffu;
  const float special = float_of(sign | 0x7f800000u | (mantissa << 13));  // inf, NaN (payload kept)
#if defined(__CUDA_ARCH__)
  const float widened = __half2float(__ushort_as_half(h));  // exact; NaNs made canonical, hence the select
  return exponent == 0x1f ? special : widened;
#else
  if (exponent == 0x1f) return special;
  if (exponent != 0) return float_of(sign | ((exponent + 112u) << 23) | (mantissa << 13));
  // Zero and subnormals: mantissa · 2^-24, exact in float32.
  const float magnitude = fmul(static_cast<float>(mantissa), 5.9604644775390625e-8f);
  return float_of(sign | bits_of(magnitude));
#endif
}
// f16_load of a finite fp16 (exponent not all ones): on a GPU the conversion alone, without the select that keeps an
// infinity's or a NaN's bits (the rotation tests a run's elements once: any_f16_special).
ROPEKIT_HD float f16_load_finite(std::uint16_t h) {
#if defined(__CUDA_ARCH__)
  return __half2float(__ushort_as_half(h));
#else
  return f16_load(h);
#endif
}
// A NaN's fp16: quiet, its sign and the top of its payload.
ROPEKIT_HD std::uint16_t f16_quiet(std::uint32_t b) {
  return static_cast<std::uint16_t>(((b >> 16) & 0x8000u) | 0x7e00u | ((b >> 13) & 0x3ffu));
}
ROPEKIT_HD std::uint16_t f16_store(float x) {
  const std::uint32_t b = bits_of(x);
#if defined(__CUDA_ARCH__)
  const std::uint16_t rounded = __half_as_ushort(__float2half_rn(x));
  return is_nan_bits(b) ? f16_quiet(b) : rounded;
#else
  if (is_nan_bits(b)) return f16_quiet(b);
  const std::uint32_t sign = (b >> 16) & 0x8000u, a = b & 0x7fffffffu;
  if (a >= 0x477ff000u) return static_cast<std::uint16_t>(sign | 0x7c00u);  // ≥ 65520 rounds to infinity
  if (a < 0x38800000u) {
    // |x| < 2^-14: a multiple of 2^-24 (subnormals). Float32's spacing in [0.5, 1) is 2^-24, so |x| + 0.5 rounds
    // |x| to it, ties to even, and the multiple is the sum's low bits.
    const float sum = fadd(float_of(a), 0.5f);
    return static_cast<std::uint16_t>(sign | (bits_of(sum) - 0x3f000000u));
  }
  // Normal: rebias the exponent (127 → 15) and round 23 mantissa bits to 10 at bit 13, ties to even (a carry moves
  // into the exponent, as it should; 65504 + half a spacing and above were taken above).
  const std::uint32_t rounded = a + 0xc8000fffu + ((a >> 13) & 1u);
  return static_cast<std::uint16_t>(sign | (rounded >> 13));
#endif
}
// Two fp16 results in one word, lo in the low half: f16_store of each (on a GPU one cvt.rn.f16x2.f32).
ROPEKIT_HD std::uint32_t f16x2_store(float lo, float hi) {
#if defined(__CUDA_ARCH__)
  const __half2 both = __floats2half2_rn(lo, hi);  // .x = lo: the low half
  std::uint32_t w;
  std::memcpy(&w, &both, 4);
  return with_quiet_nans(w, lo, hi, f16_quiet);
#else
  return f16_store(lo) | (static_cast<std::uint32_t>(f16_store(hi)) << 16);
#endif
}

// fp8 E4M3 (the KV cache's storage, ropekit/dtype.hpp): saturating round to nearest even, every NaN to 0x7f; exact
// widening. The same steps as float_to_e4m3 / e4m3_to_float, for the fused append's kernel body.
ROPEKIT_HD float e4m3_load(std::uint8_t b) {
  const std::uint32_t sign = static_cast<std::uint32_t>(b & 0x80u) << 24;
  const std::uint32_t exponent = (b >> 3) & 0xfu, mantissa = b & 0x7u;
  if (exponent == 0xf && mantissa == 0x7) return float_of(0x7fc00000u);                                  // NaN
  if (exponent == 0) return float_of(sign | bits_of(fmul(static_cast<float>(mantissa), 0.001953125f)));  // m·2^-9
  return float_of(sign | ((exponent + 120u) << 23) | (mantissa << 20));
}
ROPEKIT_HD std::uint8_t e4m3_store(float x) {
  const std::uint32_t b = bits_of(x);
  const std::uint32_t a = b & 0x7fffffffu;
  std::uint32_t normal = (a + ((a >> 20) & 1u) + (0x7ffffu - (120u << 23))) >> 20;
  normal = normal < 0x7eu ? normal : 0x7eu;
  const std::uint32_t subnormal = bits_of(fadd(float_of(a), 16384.0f)) - 0x46800000u;
  std::uint32_t out = a < 0x3c800000u ? subnormal : normal;
  out |= (b >> 24) & 0x80u;
  return static_cast<std::uint8_t>(a > 0x7f800000u ? 0x7fu : out);
}

}  // namespace ropekit::cuda
