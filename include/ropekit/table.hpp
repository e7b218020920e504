// ropekit/table.hpp — float32 cos/sin per (position, pair), immutable once built.
//
// Angle modes (every test says which one it checks):
//   Accurate  — the angle p·inv_freq[j] is formed from the double inv_freq without ever rounding
//               the product: inv_freq/2π is held as a double-double, p·(inv_freq/2π) is split
//               exactly with an FMA, and only its fractional turn is turned into radians in
//               [−π, π]; cos and sin are then evaluated in double (reduced to a quarter turn,
//               Taylor polynomials, the same operations on every SIMD target) and rounded once to
//               float32.
//               Contract: correctly rounded — each value is the float32 nearest to the exact
//               cos/sin of p·inv_freq (within half a float32 ulp, + 1e-15 for values that lie that
//               close to a rounding boundary), so |error| ≤ 6e-8. Tested against a __float128 oracle
//               at 0 ≤ p < 2^31 (13 fixed and 2000 random positions, bases 1e4 to 1e7, every row of
//               a 32 768-row table). Valid to p < kPositionLimit = 2^47.
//   HfCompat  — reproduces Hugging Face's float32 arithmetic: angle = float32(float32(p) ·
//               float32(inv_freq[j])), then cos/sin of that float32 angle, rounded to float32.
//               Bit-for-bit HF's angle whenever the float32 inv_freq is HF's; its error against
//               the true angle grows with p (≈ 3e-2 rad at p = 10^6, 0.5 at 10^7).
//
// The cos/sin magnitude (Plan::cos_sin_scale) is not in the table: apply multiplies it in, so a
// table also serves pure rotations (inverse, K-shift). A Table is safe to read from many threads.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "ropekit/plan.hpp"

namespace ropekit {

enum class AngleMode { Accurate, HfCompat };
std::string_view to_string(AngleMode mode);

// Largest table ropekit builds, in bytes (cos + sin). Positions beyond what fits are computed on
// the fly by Rope::apply.
inline constexpr std::int64_t kMaxTableBytes = std::int64_t{1} << 30;

class Table {
 public:
  // Rows for positions [0, num_positions), each as the angle mode above says. Throws ropekit::Error
  // if num_positions is negative or the table would exceed kMaxTableBytes.
  Table(const Plan& plan, AngleMode mode, std::int64_t num_positions);
  // The same table grown to num_positions (>= previous.num_positions()), reusing its rows: bit for bit
  // the table built at that size directly. Errors also: an external table (its rows are not ours to
  // compute).
  Table(const Table& previous, std::int64_t num_positions);

  // A table holding an engine's own values (import_cos_sin_cache, ropekit/cos_sin_cache.hpp):
  // num_positions rows of inv_freq.size() cos and sin values each, with the magnitude
  // `included_magnitude` already multiplied in (HF's cos·attention_scaling, vLLM's cos·mscale). A
  // call using it rotates by exactly these coefficients (Forward and Backward; Inverse divides by
  // the magnitude squared, one more float32 rounding). Errors: sizes that do not match, a value that
  // is not finite (named by position and pair), included_magnitude not finite and > 0.
  static Table external(std::vector<double> inv_freq, std::vector<float> cos, std::vector<float> sin,
                        std::int64_t num_positions, double included_magnitude);
  bool is_external() const { return external_; }
  // The magnitude the values include: 1 for a computed table.
  double included_magnitude() const { return included_magnitude_; }

  std::int64_t num_positions() const { return num_positions_; }
  int num_pairs() const { return static_cast<int>(inv_freq_.size()); }
  AngleMode mode() const { return mode_; }
  const std::vector<double>& inv_freq() const { return inv_freq_; }

  // Row of num_pairs() values for position p; p must be in [0, num_positions()).
  const float* cos_row(std::int64_t p) const { return cos_.data() + p * num_pairs(); }
  const float* sin_row(std::int64_t p) const { return sin_.data() + p * num_pairs(); }

 private:
  Table() = default;
  void fill(std::int64_t first, std::int64_t last);  // rows [first, last)

  std::vector<double> inv_freq_;
  AngleMode mode_ = AngleMode::Accurate;
  bool external_ = false;
  double included_magnitude_ = 1.0;
  std::int64_t num_positions_ = 0;
  std::vector<float> cos_;
  std::vector<float> sin_;
};

}  // namespace ropekit
