// WeightMatrix (ropekit/model.hpp): a checkpoint's matrices kept in their own encoding and widened to float32 row
// by row as the runner's products read them.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <optional>
#include <utility>

#include "lab/kernels.hpp"
#include "lab/loader.hpp"
#include "lab/quants.hpp"
#include "ropekit/model.hpp"

namespace ropekit {

std::string_view to_string(WeightEncoding encoding) {
  switch (encoding) {
    case WeightEncoding::F32: return "F32";
    case WeightEncoding::F16: return "F16";
    case WeightEncoding::BF16: return "BF16";
    default: {
      const detail::QuantType* q = detail::quant_type(static_cast<std::uint32_t>(encoding));
      return q != nullptr ? q->name : "unknown";
    }
  }
}

void WeightMatrix::rows_to_float(std::int64_t first, std::int64_t count, std::int64_t width, float* out) const {
  if (const float* rows = float_rows()) {
    std::memcpy(out, rows + first * width, static_cast<std::size_t>(count * width) * sizeof(float));
    return;
  }
  lab::widen_rows(*this, static_cast<std::size_t>(first), static_cast<std::size_t>(count), out);
}

namespace detail {

std::optional<std::pair<std::uint64_t, float>> first_non_finite(const WeightMatrix& m) {
  std::vector<float> values;
  const std::int64_t chunk = std::max<std::int64_t>(1, (std::int64_t{1} << 16) / m.cols);
  for (std::int64_t r = 0; r < m.rows; r += chunk) {
    const std::int64_t n = std::min(chunk, m.rows - r);
    values.resize(static_cast<std::size_t>(n * m.cols));
    m.rows_to_float(r, n, m.cols, values.data());
    for (std::size_t i = 0; i < values.size(); ++i) {
      if (!std::isfinite(values[i])) return std::pair{static_cast<std::uint64_t>(r * m.cols) + i, values[i]};
    }
  }
  return std::nullopt;
}

}  // namespace detail

std::vector<float> WeightMatrix::to_floats(std::int64_t width) const {
  if (!is_packed()) return *this;
  if (encoding == WeightEncoding::F32) return {float_rows(), float_rows() + rows * cols};
  std::vector<float> out(static_cast<std::size_t>(rows * cols));
  rows_to_float(0, rows, width, out.data());
  return out;
}

}  // namespace ropekit
