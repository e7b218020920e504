#include <fmt/format.h>

#include "ropekit/error.hpp"
#include "ropekit/tensor.hpp"

namespace ropekit {

std::string_view to_string(DType dtype) {
  switch (dtype) {
    case DType::F32: return "float32";
    case DType::BF16: return "bfloat16";
    case DType::F16: return "float16";
  }
  return "unknown";
}

Heads bshd(void* data, DType dtype, std::int64_t batch, std::int64_t seq, std::int64_t heads,
           std::int64_t head_dim) {
  return {data, dtype, batch, seq, heads, seq * heads * head_dim, heads * head_dim, head_dim};
}

Heads bhsd(void* data, DType dtype, std::int64_t batch, std::int64_t seq, std::int64_t heads,
           std::int64_t head_dim) {
  return {data, dtype, batch, seq, heads, heads * seq * head_dim, head_dim, seq * head_dim};
}

namespace {

template <class T>
Positions make_mrope_positions(std::span<const T> p, IndexType type) {
  if (p.size() % 3 != 0) {
    throw Error(fmt::format("M-RoPE positions hold {} values: must be 3 streams (t, h, w) of equal "
                            "length",
                            p.size()));
  }
  return {p.data(), type, static_cast<std::int64_t>(p.size() / 3), 3};
}

}  // namespace

Positions mrope_positions(std::span<const std::int64_t> p) {
  return make_mrope_positions(p, IndexType::I64);
}
Positions mrope_positions(std::span<const std::int32_t> p) {
  return make_mrope_positions(p, IndexType::I32);
}

}  // namespace ropekit
