// src/angles.hpp — the angle function shared by Table and the on-the-fly path, so both give
// bit-identical cos/sin. Internal: the public contract is stated in ropekit/table.hpp.
#pragma once

#include <cstdint>
#include <vector>

#include "ropekit/table.hpp"

namespace ropekit::detail {

class AngleEvaluator {
 public:
  AngleEvaluator(const std::vector<double>& inv_freq, AngleMode mode);

  int num_pairs() const { return static_cast<int>(turns_hi_.size()); }

  // cos/sin of position·inv_freq[j] for every pair j, written to cos_out/sin_out.
  void row(std::int64_t position, float* cos_out, float* sin_out) const;
  // The accurate angle's cos/sin in double, before the rounding to float32 (whatever the mode):
  // within a few 1e-16 of the exact values for any position < 2^47. The reference that external
  // tables are measured against (ropekit/cos_sin_cache.hpp).
  void exact_row(std::int64_t position, double* cos_out, double* sin_out) const;

 private:
  // p·inv_freq[j] reduced to [−π, π] without rounding the product (angles.cpp).
  double reduced_angle(double p, int j) const;

  AngleMode mode_;
  // Accurate: inv_freq/2π as an unevaluated sum hi + lo (about 106 significant bits).
  std::vector<double> turns_hi_;
  std::vector<double> turns_lo_;
  // HfCompat: the float32 inv_freq HF multiplies by.
  std::vector<float> inv_freq_f32_;
};

}  // namespace ropekit::detail
