// Engines' cos/sin caches (vLLM / FlashInfer layout): export, import, check (ropekit/cos_sin_cache.hpp).
#include "ropekit/cos_sin_cache.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "rope/angles.hpp"
#include "ropekit/error.hpp"

namespace ropekit {

namespace {

void check_cache_size(const Rope& rope, std::size_t size, std::int64_t num_positions, const char* what) {
  if (num_positions < 0 || num_positions >= kPositionLimit) {
    throw Error(fmt::format("{}: num_positions = {}: must be in [0, 2^47)", what, num_positions));
  }
  const auto rotary_dim = static_cast<std::size_t>(rope.spec().rotary_dim);
  if (size / rotary_dim != static_cast<std::size_t>(num_positions) || size % rotary_dim != 0) {
    throw Error(fmt::format("{}: {} values: {} positions x rotary_dim {} need {}", what, size, num_positions,
                            rotary_dim, static_cast<double>(num_positions) * static_cast<double>(rotary_dim)));
  }
}

}  // namespace

void export_cos_sin_cache(const Rope& rope, std::int64_t num_positions, std::span<float> out) {
  check_cache_size(rope, out.size(), num_positions, "export_cos_sin_cache");
  const std::int64_t pairs = rope.spec().num_pairs();
  const int axes = rope.spec().num_axes();
  // In chunks, through Rope::cos_sin: the very coefficients the Rope's calls use. M-RoPE and axial RoPE give
  // every stream the same position, so each pair reads row p whatever its stream.
  constexpr std::int64_t kChunk = 4096;
  std::vector<std::int64_t> pos;
  std::vector<float> cos, sin;
  for (std::int64_t first = 0; first < num_positions; first += kChunk) {
    const std::int64_t n = std::min(kChunk, num_positions - first);
    pos.resize(static_cast<std::size_t>(axes * n));
    for (std::size_t i = 0; i < pos.size(); ++i) pos[i] = first + static_cast<std::int64_t>(i) % n;
    cos.resize(static_cast<std::size_t>(n * pairs));
    sin.resize(cos.size());
    rope.cos_sin(axial_positions(std::span<const std::int64_t>(pos), axes), cos, sin);
    for (std::int64_t t = 0; t < n; ++t) {
      float* row = out.data() + (first + t) * 2 * pairs;
      std::copy_n(cos.data() + t * pairs, pairs, row);
      std::copy_n(sin.data() + t * pairs, pairs, row + pairs);
    }
  }
}

std::shared_ptr<const Table> import_cos_sin_cache(const Rope& rope, std::span<const float> cache,
                                                  std::int64_t num_positions) {
  check_cache_size(rope, cache.size(), num_positions, "import_cos_sin_cache");
  const std::int64_t pairs = rope.spec().num_pairs();
  std::vector<float> cos(static_cast<std::size_t>(num_positions * pairs)), sin(cos.size());
  for (std::int64_t p = 0; p < num_positions; ++p) {
    const float* row = cache.data() + p * 2 * pairs;
    std::copy_n(row, pairs, cos.data() + p * pairs);
    std::copy_n(row + pairs, pairs, sin.data() + p * pairs);
  }
  return std::make_shared<const Table>(
      Table::external(rope.plan().inv_freq, std::move(cos), std::move(sin), num_positions, rope.plan().cos_sin_scale));
}

CosSinCacheReport check_cos_sin_cache(const Rope& rope, std::span<const float> cache, std::int64_t num_positions,
                                      double tolerance) {
  check_cache_size(rope, cache.size(), num_positions, "check_cos_sin_cache");
  if (!std::isfinite(tolerance) || tolerance <= 0.0) {
    throw Error(fmt::format("check_cos_sin_cache: tolerance = {}: must be finite and > 0", tolerance));
  }
  const Plan& plan = rope.plan();
  const double m = plan.cos_sin_scale;
  const double mf = static_cast<float>(m);
  CosSinCacheReport report;
  report.num_positions = num_positions;
  report.tolerance = tolerance;
  // export_cos_sin_cache's bound: correctly rounded cos/sin (table.hpp: 6e-8), times float32(m)
  // (|m − float32(m)|), one float32 product (half an ulp, ≤ 2^-24 relative).
  report.accurate_bound = 6e-8 * mf + std::abs(m - mf) + std::ldexp(mf, -24);
  const detail::AngleEvaluator exact(plan.inv_freq, AngleMode::Accurate);
  const int pairs = rope.spec().num_pairs();
  std::vector<double> c(static_cast<std::size_t>(pairs)), s(c.size());
  for (std::int64_t p = 0; p < num_positions; ++p) {
    exact.exact_row(p, c.data(), s.data());
    const float* row = cache.data() + p * 2 * pairs;
    double row_worst = 0.0;
    for (int j = 0; j < pairs; ++j) {
      for (int half = 0; half < 2; ++half) {
        const double value = row[half * pairs + j];
        const double want = m * (half == 0 ? c[j] : s[j]);
        const double err = std::isfinite(value) ? std::abs(value - want) : std::numeric_limits<double>::infinity();
        row_worst = std::max(row_worst, err);
        if (err > report.max_error || report.worst_position < 0) {
          report.max_error = err;
          report.worst_position = p;
          report.worst_pair = j;
          report.worst_is_sin = half == 1;
        }
      }
    }
    if (row_worst > tolerance && report.first_position_over < 0) report.first_position_over = p;
  }
  return report;
}

}  // namespace ropekit
