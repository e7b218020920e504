// RoFormer's long-term decay bound (see ropekit/analysis.hpp).
#include <fmt/format.h>

#include <cmath>
#include <numbers>

#include "ropekit/analysis.hpp"
#include "ropekit/error.hpp"

namespace ropekit {

std::vector<double> decay_bound(const Plan& plan, std::int64_t max_distance) {
  if (max_distance < 0 || max_distance > (std::int64_t{1} << 24)) {
    throw Error(fmt::format("decay_bound: max_distance = {}: must be in [0, 2^24]", max_distance));
  }
  if (plan.inv_freq.empty()) throw Error("decay_bound: the plan has no rotated pairs");
  const std::size_t pairs = plan.inv_freq.size();
  std::vector<double> bound(std::size_t(max_distance + 1));
  for (std::int64_t r = 0; r <= max_distance; ++r) {
    double re = 0.0, im = 0.0, total = 0.0;
    for (std::size_t k = 0; k < pairs; ++k) {  // S_{k+1} = S_k + e^{i r θ_k}
      const double angle = std::fmod(double(r) * plan.inv_freq[k], 2.0 * std::numbers::pi);
      re += std::cos(angle);
      im += std::sin(angle);
      total += std::hypot(re, im);
    }
    bound[std::size_t(r)] = total / double(pairs);
  }
  return bound;
}

}  // namespace ropekit
