#include <fmt/format.h>

#include <cmath>

#include "rope/angles.hpp"
#include "rope/backend.hpp"
#include "ropekit/error.hpp"
#include "ropekit/table.hpp"

namespace ropekit {

std::string_view to_string(AngleMode mode) { return mode == AngleMode::Accurate ? "accurate" : "hf_compat"; }

namespace {

void check_size(std::int64_t num_positions, std::size_t num_pairs) {
  if (num_positions < 0) {
    throw Error(fmt::format("table num_positions = {}: must be >= 0", num_positions));
  }
  const std::int64_t row_bytes = static_cast<std::int64_t>(num_pairs) * 2 * sizeof(float);
  if (row_bytes > 0 && num_positions > kMaxTableBytes / row_bytes) {
    throw Error(
        fmt::format("table num_positions = {}: {} pairs would need more than {} bytes; "
                    "use on-the-fly angles (Rope::apply chooses them by itself)",
                    num_positions, num_pairs, kMaxTableBytes));
  }
}

}  // namespace

Table::Table(const Plan& plan, AngleMode mode, std::int64_t num_positions) : inv_freq_(plan.inv_freq), mode_(mode) {
  check_size(num_positions, inv_freq_.size());
  num_positions_ = num_positions;
  cos_.resize(static_cast<std::size_t>(num_positions) * inv_freq_.size());
  sin_.resize(cos_.size());
  fill(0, num_positions);
}

Table::Table(const Table& previous, std::int64_t num_positions) : inv_freq_(previous.inv_freq_), mode_(previous.mode_) {
  if (previous.external_) throw Error("an external table (an imported cos/sin cache) cannot be grown");
  check_size(num_positions, inv_freq_.size());
  if (num_positions < previous.num_positions_) {
    throw Error(
        fmt::format("table num_positions = {}: a grown table cannot be smaller than the "
                    "previous one ({})",
                    num_positions, previous.num_positions_));
  }
  num_positions_ = num_positions;
  cos_.resize(static_cast<std::size_t>(num_positions) * inv_freq_.size());
  sin_.resize(cos_.size());
  std::copy(previous.cos_.begin(), previous.cos_.end(), cos_.begin());
  std::copy(previous.sin_.begin(), previous.sin_.end(), sin_.begin());
  fill(previous.num_positions_, num_positions);
}

Table Table::external(std::vector<double> inv_freq, std::vector<float> cos, std::vector<float> sin,
                      std::int64_t num_positions, double included_magnitude) {
  check_size(num_positions, inv_freq.size());
  const std::size_t pairs = inv_freq.size();
  const auto expected = static_cast<std::size_t>(num_positions) * pairs;
  if (cos.size() != expected || sin.size() != expected) {
    throw Error(fmt::format("external table: {} cos and {} sin values, {} positions x {} pairs need {} each",
                            cos.size(), sin.size(), num_positions, pairs, expected));
  }
  if (!std::isfinite(included_magnitude) || included_magnitude <= 0.0) {
    throw Error(fmt::format("external table: included magnitude = {}: must be finite and > 0", included_magnitude));
  }
  for (std::size_t i = 0; i < expected; ++i) {
    if (!std::isfinite(cos[i]) || !std::isfinite(sin[i])) {
      throw Error(fmt::format("external table: position {} pair {}: cos = {}, sin = {}: must be finite", i / pairs,
                              i % pairs, cos[i], sin[i]));
    }
  }
  Table t;
  t.inv_freq_ = std::move(inv_freq);
  t.external_ = true;
  t.included_magnitude_ = included_magnitude;
  t.num_positions_ = num_positions;
  t.cos_ = std::move(cos);
  t.sin_ = std::move(sin);
  return t;
}

void Table::fill(std::int64_t first, std::int64_t last) {
  const detail::AngleEvaluator angles(inv_freq_, mode_);
  cpu::angle_rows(angles, first, last - first, cos_.data() + first * num_pairs(), sin_.data() + first * num_pairs());
}

}  // namespace ropekit
