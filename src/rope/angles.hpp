// src/rope/angles.hpp — the angle function shared by Table and the on-the-fly path, so both give
// bit-identical cos/sin. Internal: the public contract is stated in ropekit/table.hpp.
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "ropekit/table.hpp"

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

class AngleEvaluator {
 public:
  AngleEvaluator(const std::vector<double>& inv_freq, AngleMode mode);

  int num_pairs() const { return static_cast<int>(turns_hi_.size()); }

  AngleMode mode() const { return mode_; }
  // Accurate: inv_freq[j]/2π as hi + lo (about 106 significant bits), for the SIMD rows.
  const double* turns_hi() const { return turns_hi_.data(); }
  const double* turns_lo() const { return turns_lo_.data(); }

  // cos/sin of position·inv_freq[j] for every pair j, written to cos_out/sin_out: the scalar
  // reference. Accurate: rope/sincos_turns-inl.h's operation sequence, which every SIMD target's
  // rows repeat bit for bit (cpu::angle_rows). HfCompat: libm's cos/sin of HF's float32 angle.
  void row(std::int64_t position, float* cos_out, float* sin_out) const;
  // The accurate angle's cos/sin in double, the doubles Accurate rows round to float32 (whatever the
  // mode): within about 6e-16 of the exact values for any position < 2^47. The reference external
  // tables are measured against (ropekit/cos_sin_cache.hpp), and what every SIMD target reproduces bit
  // for bit (cpu::exact_angle_rows; tests/targets_test.cpp compares these, as the float32 rounding
  // would hide a last-bit difference).
  void exact_row(std::int64_t position, double* cos_out, double* sin_out) const;

 private:
  AngleMode mode_;
  // Accurate: inv_freq/2π as an unevaluated sum hi + lo (about 106 significant bits).
  std::vector<double> turns_hi_;
  std::vector<double> turns_lo_;
  // HfCompat: the float32 inv_freq HF multiplies by.
  std::vector<float> inv_freq_f32_;
};

}  // namespace ropekit::detail
