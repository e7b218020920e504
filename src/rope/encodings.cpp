#include "ropekit/encodings.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>

#include "rope/angles.hpp"
#include "rope/attention_job.hpp"
#include "ropekit/error.hpp"

namespace ropekit {
namespace {

void check_out_size(std::string_view what, std::size_t got, std::size_t want) {
  if (got != want) {
    throw Error(fmt::format("{}: out holds {} floats, expected {} (positions × dim)", what, got, want));
  }
}

}  // namespace

float alibi_bias(float slope, std::int64_t query_position, std::int64_t key_position) {
  return detail::alibi_logit_bias(slope, query_position, key_position);
}

void sinusoidal_encoding(std::span<const std::int64_t> positions, int dim, std::span<float> out, double base) {
  if (dim <= 0 || dim % 2 != 0) {
    throw Error(fmt::format("sinusoidal_encoding: dim = {}: must be even and > 0", dim));
  }
  if (!std::isfinite(base) || base <= 1.0) {
    throw Error(fmt::format("sinusoidal_encoding: base = {}: must be finite and > 1", base));
  }
  check_out_size("sinusoidal_encoding", out.size(), positions.size() * std::size_t(dim));
  // The frequencies of RoPE's plain plan (exponent 2i/dim): a sinusoidal encoding is the cos/sin
  // table a RoPE of the same dim would use, laid out (sin, cos) per pair.
  const int pairs = dim / 2;
  std::vector<double> inv_freq(pairs);
  for (int i = 0; i < pairs; ++i) inv_freq[i] = std::pow(base, -2.0 * i / dim);
  const detail::AngleEvaluator angles(inv_freq, AngleMode::Accurate);
  std::vector<float> c(pairs), s(pairs);
  for (std::size_t t = 0; t < positions.size(); ++t) {
    const std::int64_t p = positions[t];
    if (p < 0 || p >= kPositionLimit) {
      throw Error(fmt::format("sinusoidal_encoding: positions[{}] = {}: must be in [0, 2^47)", t, p));
    }
    angles.row(p, c.data(), s.data());
    float* row = out.data() + t * dim;
    for (int i = 0; i < pairs; ++i) {
      row[2 * i] = s[i];
      row[2 * i + 1] = c[i];
    }
  }
}

LearnedPositionTable::LearnedPositionTable(std::vector<float> weights, int dim)
    : weights_(std::move(weights)), dim_(dim), num_positions_(0) {
  if (dim <= 0) throw Error(fmt::format("LearnedPositionTable: dim = {}: must be > 0", dim));
  if (weights_.empty() || weights_.size() % std::size_t(dim) != 0) {
    throw Error(
        fmt::format("LearnedPositionTable: weights hold {} floats: must be a non-zero "
                    "multiple of dim = {}",
                    weights_.size(), dim));
  }
  num_positions_ = static_cast<std::int64_t>(weights_.size() / std::size_t(dim));
}

void LearnedPositionTable::lookup(std::span<const std::int64_t> positions, std::span<float> out) const {
  check_out_size("LearnedPositionTable::lookup", out.size(), positions.size() * std::size_t(dim_));
  for (std::size_t t = 0; t < positions.size(); ++t) {
    const std::int64_t p = positions[t];
    if (p < 0 || p >= num_positions_) {
      throw Error(
          fmt::format("LearnedPositionTable::lookup: positions[{}] = {}: outside the learned "
                      "table [0, {}) (a learned encoding has no value past its end)",
                      t, p, num_positions_));
    }
    std::copy_n(weights_.data() + p * dim_, dim_, out.data() + t * dim_);
  }
}

std::vector<float> alibi_slopes(int num_heads, double max_bias) {
  if (num_heads < 1) throw Error(fmt::format("alibi_slopes: num_heads = {}: must be >= 1", num_heads));
  if (!std::isfinite(max_bias) || max_bias <= 0.0) {
    throw Error(fmt::format("alibi_slopes: max_bias = {}: must be finite and > 0", max_bias));
  }
  int n = 1;
  while (n * 2 <= num_heads) n *= 2;
  std::vector<float> slopes;
  slopes.reserve(num_heads);
  for (int h = 0; h < n; ++h) slopes.push_back(float(std::exp2(-max_bias * (h + 1) / n)));
  for (int j = 0; j < num_heads - n; ++j) {
    slopes.push_back(float(std::exp2(-max_bias * (2 * j + 1) / (2 * n))));
  }
  return slopes;
}

void T5Buckets::validate() const {
  const int min_buckets = bidirectional ? 4 : 2;
  if (num_buckets < min_buckets) {
    throw Error(fmt::format("T5Buckets.num_buckets = {}: must be >= {} ({})", num_buckets, min_buckets,
                            bidirectional ? "bidirectional" : "causal"));
  }
  const int exact = (bidirectional ? num_buckets / 2 : num_buckets) / 2;
  if (max_distance <= exact) {
    throw Error(
        fmt::format("T5Buckets.max_distance = {}: must be greater than the exact range {} "
                    "(num_buckets = {})",
                    max_distance, exact, num_buckets));
  }
}

int t5_bucket(const T5Buckets& buckets, std::int64_t relative_position) {
  buckets.validate();
  int num = buckets.num_buckets;
  int bucket = 0;
  std::int64_t n = 0;
  if (buckets.bidirectional) {
    num /= 2;
    if (relative_position > 0) bucket += num;
    n = relative_position < 0 ? -relative_position : relative_position;
  } else {
    n = relative_position < 0 ? -relative_position : 0;
  }
  const int max_exact = num / 2;
  if (n < max_exact) return bucket + int(n);
  // float32 as PyTorch evaluates it: log(float(n) / max_exact) / float(log(max_distance / max_exact))
  // · (num − max_exact), truncated toward zero by .to(long).
  const float log_ratio = std::log(float(n) / float(max_exact));
  const float log_range = float(std::log(double(buckets.max_distance) / double(max_exact)));
  const float scaled = log_ratio / log_range * float(num - max_exact);
  const std::int64_t large = max_exact + static_cast<std::int64_t>(scaled);
  return bucket + int(std::min<std::int64_t>(large, num - 1));
}

}  // namespace ropekit
