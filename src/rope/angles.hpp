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

 private:
  AngleMode mode_;
  // Accurate: inv_freq/2π as an unevaluated sum hi + lo (about 106 significant bits).
  std::vector<double> turns_hi_;
  std::vector<double> turns_lo_;
  // HfCompat: the float32 inv_freq HF multiplies by.
  std::vector<float> inv_freq_f32_;
};

}  // namespace ropekit::detail
