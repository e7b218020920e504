// src/rope/angles.hpp — the angle function shared by Table and the on-the-fly path, so both give
// bit-identical cos/sin. Internal: the public contract is stated in ropekit/table.hpp.
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "rope/turn_constants.hpp"
#include "ropekit/table.hpp"

namespace ropekit::detail {

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
