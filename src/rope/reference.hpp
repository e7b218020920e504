// src/rope/reference.hpp — the scalar reference rotation and the one scalar dtype codec.
//
// The reference is the specification every SIMD target and GPU kernel is tested against, bit for
// bit: per token the float32 coefficients c = m·cos, s = sign·(m·sin) (m = cos_sin_scale), then per
// pair a' = fma(a, c, −(b·s)), b' = fma(b, c, a·s) in float32, one rounding to the storage type.
// CPU targets without a fused multiply-add run it as their kernel (a second rounding would change
// the numbers).
#pragma once

#include <cstdint>

#include "rope/call_shape.hpp"
#include "ropekit/dtype.hpp"

namespace ropekit::detail {

// Storage ↔ float32, element by element: the conversions of ropekit/dtype.hpp (exact widening;
// narrowing rounds to nearest even once, keeps infinities, quiets NaNs).
template <DType>
struct ScalarCodec;
template <>
struct ScalarCodec<DType::F32> {
  using T = float;
  static float load(T v) { return v; }
  static T store(float v) { return v; }
};
template <>
struct ScalarCodec<DType::BF16> {
  using T = std::uint16_t;
  static float load(T v) { return bf16_to_float(v); }
  static T store(float v) { return float_to_bf16(v); }
};
template <>
struct ScalarCodec<DType::F16> {
  using T = std::uint16_t;
  static float load(T v) { return f16_to_float(v); }
  static T store(float v) { return float_to_f16(v); }
};

// n contiguous elements of storage type `dtype` to float32 and back.
void widen(const void* src, DType dtype, std::int64_t n, float* dst);
void narrow(const float* src, std::int64_t n, DType dtype, void* dst);

// Rows [first, last) of a validated call (a detail::RowsKernel). Single-threaded per call.
void rotate_rows_reference(const RotateJob& job, std::int64_t first, std::int64_t last);

// A TokenKernel's work (ropekit/call.hpp) in storage type `dtype`: on targets without SIMD kernels,
// consumers that rotate rows into their own buffers (fused attention, linear attention) use this.
void rotate_token_rows_reference(const RotateJob& job, std::int64_t token, const void* src, std::int64_t src_stride,
                                 void* dst, std::int64_t dst_stride, std::int64_t heads, DType dtype);

// n lanes of storage type `from` into cache elements of type `to` (ropekit::convert_to_cache's
// specification): the same type copied, else widened exactly and rounded once; fp8 as
// float_to_e4m3(x / scale).
void convert_to_cache_reference(const void* src, DType from, std::int64_t n, void* dst, CacheDType to, float scale);
// n e4m3 bytes to float32, each e4m3_to_float(b) · scale (exact, then one rounding): how an fp8 cache's
// entries are read.
void e4m3_widen_reference(const std::uint8_t* src, std::int64_t n, float scale, float* dst);

}  // namespace ropekit::detail
