// The accurate angle: why and how.
//
// At position p the angle of pair j is p·ω (ω = inv_freq[j]). Forming it as a float32 product (as
// HF does) loses half an ulp of the product: 0.03 rad at p = 10^6. Forming it in double and
// reducing with fmod(·, 2π) loses p·ω·2^-53 plus the error of 2π in double (≈ 2.4e-7 rad at
// p = 2^31). Instead we work in turns: t = p·ω/2π with ω/2π held as a double-double (hi + lo).
// p < 2^53 is exact in double, so p·hi = ph + pe exactly (FMA), the integer part of ph drops out
// exactly, and the fractional turn r = (ph − round(ph)) + pe + p·lo carries an absolute error of
// about 2^-53 turn. Only r (|r| <= 1/2 + tiny) is multiplied by 2π, then cos and sin are taken in
// double and rounded once to float32. The result is correctly rounded float32 cos/sin up to a
// few 1e-16 for any p < 2^47, whatever the base.
#include "rope/angles.hpp"

#include <cmath>

namespace ropekit::detail {
namespace {

// 2π as a double-double: hi = fl(2π), lo = 2π − hi.
constexpr double kTwoPiHi = 6.283185307179586232;
constexpr double kTwoPiLo = 2.4492935982947064e-16;

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
    const double angle = reduced_angle(p, j);
    cos_out[j] = static_cast<float>(std::cos(angle));
    sin_out[j] = static_cast<float>(std::sin(angle));
  }
}

void AngleEvaluator::exact_row(std::int64_t position, double* cos_out, double* sin_out) const {
  const double p = static_cast<double>(position);
  for (int j = 0; j < num_pairs(); ++j) {
    const double angle = reduced_angle(p, j);
    cos_out[j] = std::cos(angle);
    sin_out[j] = std::sin(angle);
  }
}

double AngleEvaluator::reduced_angle(double p, int j) const {
  const double ph = p * turns_hi_[j];
  const double pe = std::fma(p, turns_hi_[j], -ph);
  const double turn = (ph - std::nearbyint(ph)) + (pe + p * turns_lo_[j]);
  return turn * kTwoPiHi;
}

}  // namespace ropekit::detail
