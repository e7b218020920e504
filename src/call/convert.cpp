// ropekit::convert_to_cache (ropekit/dtype.hpp): the backend's cache converter behind the checks of a
// public function.
#include <fmt/format.h>

#include <cmath>

#include "rope/backend.hpp"
#include "ropekit/dtype.hpp"
#include "ropekit/error.hpp"

namespace ropekit {

void convert_to_cache(const void* src, DType from, std::int64_t n, void* dst, CacheDType to, float scale) {
  if (n < 0) throw Error(fmt::format("convert_to_cache: n = {}: must be >= 0", n));
  if (from != DType::F32 && from != DType::BF16 && from != DType::F16) {
    throw Error(fmt::format("convert_to_cache: from = {}: not a DType", static_cast<int>(from)));
  }
  if (to != CacheDType::F32 && to != CacheDType::BF16 && to != CacheDType::F16 && to != CacheDType::F8E4M3) {
    throw Error(fmt::format("convert_to_cache: to = {}: not a CacheDType", static_cast<int>(to)));
  }
  if (to == CacheDType::F8E4M3 && (!std::isfinite(scale) || scale <= 0.0f)) {
    throw Error(fmt::format("convert_to_cache: scale = {}: must be finite and > 0", scale));
  }
  if (n == 0) return;
  cpu::select_cache_convert_kernel()(src, from, n, dst, to, scale);
}

}  // namespace ropekit
