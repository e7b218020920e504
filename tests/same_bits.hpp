// tests/same_bits.hpp — a case's output buffers against the reference's: whole buffers, guards included, bit for
// bit — except that a NaN may carry another sign or payload (IEEE 754 leaves NaN propagation open, and an FMA's
// operand order picks it). Shared by the per-target tests and the CUDA kernel's host and device tests.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "lib/cases.hpp"
#include "ropekit/dtype.hpp"

namespace same_bits {

inline bool is_nan(ropekit::DType dt, const std::byte* p) {
  if (dt == ropekit::DType::F32) {
    float f;
    std::memcpy(&f, p, 4);
    return std::isnan(f);
  }
  std::uint16_t h;
  std::memcpy(&h, p, 2);
  return std::isnan(dt == ropekit::DType::BF16 ? ropekit::bf16_to_float(h) : ropekit::f16_to_float(h));
}

inline void expect_same_bits(const ropekit::cases::Tensor& got, const ropekit::cases::Tensor& want, const char* name) {
  ASSERT_EQ(got.size, want.size) << name;
  const std::size_t es = std::size_t(ropekit::element_size(got.dtype));
  for (std::size_t i = 0; i < got.size; i += es) {
    if (std::memcmp(got.data() + i, want.data() + i, es) == 0) continue;
    if (is_nan(got.dtype, got.data() + i) && is_nan(want.dtype, want.data() + i)) continue;
    ADD_FAILURE() << name << " differs at byte " << i << " of its buffer";
    return;
  }
}

// Every output of a rotation case: q, k and, out of place, q_out and k_out.
inline void expect_same_rotation(const ropekit::cases::Workload& got, const ropekit::cases::Workload& want) {
  expect_same_bits(got.q, want.q, "q");
  expect_same_bits(got.k, want.k, "k");
  expect_same_bits(got.q_out, want.q_out, "q_out");
  expect_same_bits(got.k_out, want.k_out, "k_out");
}

}  // namespace same_bits
