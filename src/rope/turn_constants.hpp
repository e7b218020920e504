// src/rope/turn_constants.hpp — the constants of the turn reduction (rope/sincos_turns-inl.h): 2π as a
// double-double and the Taylor coefficients. Apart from rope/angles.hpp so that the CUDA kernel body, compiled by
// nvcc in C++17, can read them without the C++20 public headers.
#pragma once

#include <array>
#include <cstddef>

namespace ropekit::detail {

// 2π as a double-double: hi = fl(2π), lo = 2π − hi.
inline constexpr double kTwoPiHi = 6.283185307179586232;
inline constexpr double kTwoPiLo = 2.4492935982947064e-16;

// Taylor coefficients (−1)^k / n! of sin (n = 17, 15, …, 3) and cos (n = 16, 14, …, 2), highest
// first, for |x| ≤ π/4 (rope/sincos_turns-inl.h). The first terms left out, x^19/19! and x^18/18!,
// are below 9e-20 and 2e-18 there; n! is exact in double for n ≤ 18, so each coefficient is one
// rounding of the true value.
namespace taylor {
constexpr double factorial(int n) { return n <= 1 ? 1.0 : n * factorial(n - 1); }
template <std::size_t N>
constexpr std::array<double, N> terms(int highest) {
  std::array<double, N> k{};
  for (std::size_t i = 0; i < N; ++i) {
    const int n = highest - 2 * static_cast<int>(i);
    k[i] = ((n / 2) % 2 == 0 ? 1.0 : -1.0) / factorial(n);
  }
  return k;
}
}  // namespace taylor
inline constexpr std::array<double, 8> kSinTaylor = taylor::terms<8>(17);
inline constexpr std::array<double, 8> kCosTaylor = taylor::terms<8>(16);

}  // namespace ropekit::detail
