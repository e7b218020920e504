// The accurate angle: why and how.
//
// At position p the angle of pair j is p·ω (ω = inv_freq[j]). Forming it as a float32 product (as
// HF does) loses half an ulp of the product: 0.03 rad at p = 10^6. Forming it in double and
// reducing with fmod(·, 2π) loses p·ω·2^-53 plus the error of 2π in double (≈ 2.4e-7 rad at
// p = 2^31). Instead we work in turns: t = p·ω/2π with ω/2π held as a double-double (hi + lo).
// p < 2^53 is exact in double, so p·hi = ph + pe exactly (FMA), the integer part of ph drops out
// exactly, and the fractional turn r = (ph − round(ph)) + pe + p·lo carries an absolute error of
// about 2^-54 turn. r (|r| <= 1/2 + tiny) is split into quarter turns and a remainder of at most 1/8
// turn, which is turned into radians (|x| ≤ π/4); cos and sin of x are Taylor polynomials in double
// (rope/sincos_turns-inl.h) and are rounded once to float32. The doubles are within about 6e-16 of
// the exact cos/sin for any p < 2^47, whatever the base, so the float32 values are correctly rounded
// except where the exact value lies that close to a rounding boundary. The polynomial (not libm)
// makes the angles vectorizable with the same bits on every target: the on-the-fly path and the
// table fill run it in SIMD (cpu::angle_rows).
#include "rope/angles.hpp"

#include <bit>
#include <cmath>
#include <cstdint>
#include <utility>

namespace ropekit::detail {
namespace {

// Scalar arithmetic for SinCosOfTurns: each operation one IEEE rounding (std::fma: one for a·b + c).
struct ScalarOps {
  using V = double;
  using U = std::uint64_t;
  using M = bool;
  static V Set(double c) { return c; }
  static V Mul(V a, V b) { return a * b; }
  static V Sub(V a, V b) { return a - b; }
  static V Add(V a, V b) { return a + b; }
  static V MulAdd(V a, V b, V c) { return std::fma(a, b, c); }
  static V MulSub(V a, V b, V c) { return std::fma(a, b, -c); }
  static V Round(V a) { return std::nearbyint(a); }  // the default rounding mode: nearest, ties to even
  static U Bits(V a) { return std::bit_cast<U>(a); }
  static U Increment(U k) { return k + 1; }
  static M Bit0(U k) { return (k & 1) != 0; }
  static U Bit1ToSign(U k) { return (k << 62) & (U{1} << 63); }
  static V XorSign(V a, U sign) { return std::bit_cast<V>(std::bit_cast<U>(a) ^ sign); }
  static V Select(M m, V yes, V no) { return m ? yes : no; }
};

#include "rope/sincos_turns-inl.h"

}  // namespace

AngleEvaluator::AngleEvaluator(const std::vector<double>& inv_freq, AngleMode mode) : mode_(mode) {
  const std::size_t n = inv_freq.size();
  turns_hi_.resize(n);
  turns_lo_.resize(n);
  inv_freq_f32_.resize(n);
  for (std::size_t j = 0; j < n; ++j) {
    const double w = inv_freq[j];
    // Double-double division w / (kTwoPiHi + kTwoPiLo): q1 + q2 with a relative error ~2^-104.
    const double q1 = w / kTwoPiHi;
    double r = std::fma(-q1, kTwoPiHi, w);  // exact remainder of w − q1·hi
    r -= q1 * kTwoPiLo;
    const double q2 = r / kTwoPiHi;
    turns_hi_[j] = q1 + q2;
    turns_lo_[j] = q2 - (turns_hi_[j] - q1);
    inv_freq_f32_[j] = static_cast<float>(w);
  }
}

void AngleEvaluator::row(std::int64_t position, float* cos_out, float* sin_out) const {
  const int n = num_pairs();
  if (mode_ == AngleMode::HfCompat) {
    // torch: freqs = inv_freq.float() @ position_ids.float() — one float32 product per entry.
    const float p = static_cast<float>(position);
    for (int j = 0; j < n; ++j) {
      const float angle = p * inv_freq_f32_[j];
      cos_out[j] = static_cast<float>(std::cos(static_cast<double>(angle)));
      sin_out[j] = static_cast<float>(std::sin(static_cast<double>(angle)));
    }
    return;
  }
  const double p = static_cast<double>(position);
  for (int j = 0; j < n; ++j) {
    double c, s;
    SinCosOfTurns<ScalarOps>(p, turns_hi_[std::size_t(j)], turns_lo_[std::size_t(j)], c, s);
    cos_out[j] = static_cast<float>(c);
    sin_out[j] = static_cast<float>(s);
  }
}

void AngleEvaluator::exact_row(std::int64_t position, double* cos_out, double* sin_out) const {
  const double p = static_cast<double>(position);
  for (int j = 0; j < num_pairs(); ++j) {
    SinCosOfTurns<ScalarOps>(p, turns_hi_[std::size_t(j)], turns_lo_[std::size_t(j)], cos_out[j], sin_out[j]);
  }
}

}  // namespace ropekit::detail
